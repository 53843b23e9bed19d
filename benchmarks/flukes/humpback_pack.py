"""The real flukes' splits, packed small enough to travel to a lent GPU. Not a test.

    python benchmarks/flukes/humpback_pack.py --out .humpback_pack --seeds 0,1,2

A GPU machine takes at most 64 MiB of files a call, and ``../shared/data/humpback`` does not travel. The pack
holds each photo of the source once, as the training stores it (:func:`whale.data.images.load_crop`: its content,
the white padding cut, with the config's margin, resized to the stored crop of the training input), gray and
encoded as WebP; and for every split seed of :mod:`benchmarks.flukes.humpback` the competition folder's rows naming
those photos (``splits/seed<N>.csv``: ``Image, Id, set, photo``; ``set`` is ``train`` or ``test``, a test row's
``Id`` its truth). The photos are spread over ``part1/`` and ``part2/`` so that each fits one device call beside
the wheels: the first call carries ``part1`` (and the wheels), the second ``part2``; the warm machine keeps what
the first call brought (docs/gpu.md, "The real flukes, fine-tuned").

There, :func:`materialize` builds split ``N``'s competition folder (``train/``, ``test/``, ``train.csv``,
``test_solution.csv``) from the pack with hard links: the same image names, ids and folds as the folder that
:func:`benchmarks.flukes.humpback.build_split` writes here, the photos already cropped (train there with ``crop: box``
and ``box_margin: 0``). Scores made there are remade here from the returned checkpoint on the original photos
(``benchmarks/flukes/humpback.py --gpu-runs``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.flukes.humpback import check_disjoint, read_source, split_flukes  # noqa: E402

PARTS = ("part1", "part2")
FIRST_PART_BYTES = 26 * 2**20
"""``part1``'s photos: what fits one call beside the wheels (~30 MB: .whl/ and the Lite0 wheel) and the tree."""


def crop_shape(config: str) -> tuple[int, int]:
    """``(height, width)`` of the crop the training stores for ``config``'s largest stage."""
    from whale.config import load_config
    from whale.data import crop_size_for
    from whale.imagesize import as_hw, input_size

    cfg = load_config(config)
    return as_hw(crop_size_for(input_size(max(s.image_size for s in cfg.stages), cfg.aspect)))


def split_rows(df: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Split ``seed``'s folder as rows ``Image, Id, set, source`` (``source``: the row of ``df``), named as
    :func:`benchmarks.common.build_competition` names them (``tr00000.jpg``, ``te00000.jpg``)."""
    train, test = check_disjoint(*split_flukes(df, seed), log=lambda *_: None)
    row_of = {str(p): i for i, p in enumerate(df["path"])}
    rows = [(f"tr{i:05d}.jpg", label, "train", row_of[str(p)]) for i, (p, label) in enumerate(train)]
    rows += [(f"te{i:05d}.jpg", label, "test", row_of[str(p)]) for i, (p, label) in enumerate(test)]
    return pd.DataFrame(rows, columns=["Image", "Id", "set", "source"])


def pack(source: Path, dest: Path, seeds: list[int], shape: tuple[int, int], margin: float = 0.05,
         quality: int = 60, first_part_bytes: int = FIRST_PART_BYTES, log=print) -> dict:
    """Write the pack (module docstring) into ``dest``; returns ``{"photos", "bytes", "parts"}``.

    Photos are named ``P<row>.jpg`` (WebP inside: decoding is by content) and go to ``part1`` until it holds
    ``first_part_bytes``, then to ``part2``; ``part2/splits/`` holds the seeds' rows and ``part2/pack.json`` what
    the pack is (shape, quality, margin, counts).
    """
    import cv2

    from whale.core.progress import progress_bar
    from whale.data.images import load_crop

    df = read_source(source)
    for part in PARTS:
        (dest / part / "photos").mkdir(parents=True, exist_ok=True)
    (dest / "part2" / "splits").mkdir(parents=True, exist_ok=True)
    sizes = {part: 0 for part in PARTS}
    where = {}
    for i, path in enumerate(progress_bar(df["path"], total=len(df), desc="pack")):
        crop = load_crop(path, None, shape, channels=1, margin=margin, crop="content")[:, :, 0]
        ok, buf = cv2.imencode(".webp", crop, [cv2.IMWRITE_WEBP_QUALITY, int(quality)])
        if not ok:
            raise ValueError(f"{path}: could not encode its crop as WebP")
        part = "part1" if sizes["part1"] + len(buf) <= first_part_bytes else "part2"
        (dest / part / "photos" / f"P{i:05d}.jpg").write_bytes(buf.tobytes())
        sizes[part] += len(buf)
        where[i] = part
    for seed in seeds:
        rows = split_rows(df, seed)
        rows["photo"] = [f"{where[s]}/photos/P{s:05d}.jpg" for s in rows["source"]]
        rows.drop(columns="source").to_csv(dest / "part2" / "splits" / f"seed{seed}.csv", index=False)
    info = {"photos": len(df), "bytes": sizes, "shape": list(shape), "quality": quality, "margin": margin,
            "channels": 1, "seeds": seeds, "source": str(source)}
    (dest / "part2" / "pack.json").write_text(json.dumps(info, indent=2))
    log(f"pack: {len(df)} photos, part1 {sizes['part1'] / 2**20:.1f} MiB, part2 {sizes['part2'] / 2**20:.1f} MiB")
    return info


def tar_parts(dest: Path) -> dict[str, int]:
    """``dest/part1.tar`` and ``dest/part2.tar`` (uncompressed: WebP does not shrink): what a device call carries,
    one file whose size is its bytes; :func:`untar_parts` unpacks them there. Returns each tar's bytes."""
    import tarfile

    sizes = {}
    for part in PARTS:
        with tarfile.open(dest / f"{part}.tar", "w") as tar:
            tar.add(dest / part, arcname=part)
        sizes[part] = (dest / f"{part}.tar").stat().st_size
    return sizes


def untar_parts(dest: Path) -> None:
    """Unpack the carried ``part*.tar`` of ``dest`` that are not unpacked yet (a warm machine keeps the first call's)."""
    import tarfile

    for part in PARTS:
        if (dest / f"{part}.tar").is_file() and not (dest / part).is_dir():
            with tarfile.open(dest / f"{part}.tar") as tar:
                tar.extractall(dest, filter="data")


def pack_seeds(pack_dir: Path) -> list[int]:
    """The split seeds a pack holds."""
    return sorted(int(p.stem[4:]) for p in (Path(pack_dir) / "part2" / "splits").glob("seed*.csv"))


def materialize(pack_dir: Path, seed: int, dest: Path) -> tuple[Path, dict[str, str]]:
    """Split ``seed``'s competition folder ``dest`` from the pack (hard links; copies where links fail) and its
    truth ``{test image: id}``.

    Raises:
        FileNotFoundError: the pack lacks the seed or a photo (names which part to carry).
    """
    pack_dir = Path(pack_dir)
    rows_path = pack_dir / "part2" / "splits" / f"seed{seed}.csv"
    if not rows_path.is_file():
        raise FileNotFoundError(f"{rows_path}: no split {seed} in the pack (carry {pack_dir.name}/part2)")
    rows = pd.read_csv(rows_path, dtype=str, keep_default_na=False)
    for sub in ("train", "test"):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    for name, part_photo, kind in zip(rows["Image"], rows["photo"], rows["set"]):
        src, target = pack_dir / part_photo, dest / kind / name
        if not src.is_file():
            raise FileNotFoundError(f"{src}: missing from the pack (carry {pack_dir.name}/{part_photo.split('/')[0]})")
        if not target.exists():
            try:
                os.link(src, target)
            except OSError:
                target.write_bytes(src.read_bytes())
    train, test = rows[rows["set"] == "train"], rows[rows["set"] == "test"]
    train[["Image", "Id"]].to_csv(dest / "train.csv", index=False)
    test[["Image", "Id"]].to_csv(dest / "test_solution.csv", index=False)
    pd.DataFrame({"Image": test["Image"], "Id": "new_whale"}).to_csv(dest / "sample_submission.csv", index=False)
    return dest, dict(zip(test["Image"], test["Id"]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the pack's folder (git-ignored: .humpback_pack)")
    p.add_argument("--seeds", default="0,1,2", help="split seeds (benchmarks/flukes/humpback.py --seeds)")
    p.add_argument("--config", default="configs/flukes_lite0_gpu.yaml", help="the crop's shape: this config's")
    p.add_argument("--quality", type=int, default=60, help="WebP quality")
    p.add_argument("--first-part-mib", type=float, default=FIRST_PART_BYTES / 2**20)
    args = p.parse_args(argv)
    source = common.shared_data("humpback")
    if source is None:
        print("no ../shared/data/humpback beside the checkout: nothing to pack")
        return 0
    t0 = time.perf_counter()
    seeds = [int(s) for s in args.seeds.split(",")]
    info = pack(source, Path(args.out), seeds, crop_shape(args.config), quality=args.quality,
                first_part_bytes=int(args.first_part_mib * 2**20))
    tars = tar_parts(Path(args.out))
    print(f"carry {args.out}/part1.tar ({tars['part1'] / 2**20:.1f} MiB) with .whl in the first call, "
          f"{args.out}/part2.tar ({tars['part2'] / 2**20:.1f} MiB) in the second (docs/gpu.md)")
    print(common.final_json("humpback_pack", {"photos": info["photos"],
                                              **{f"{k}_tar_mib": v / 2**20 for k, v in tars.items()}},
                            time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
