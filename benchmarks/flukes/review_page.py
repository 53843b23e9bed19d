"""The review server on real flukes, driven by keys in headless Chromium; screenshots for docs/catalogue.md. Not a test.

    python benchmarks/flukes/review_page.py --out runs/review_page [--ids 7] [--seed 0] [--shots docs/img]

1. A small catalogue of real flukes (``../shared/data/humpback``): ``--ids`` individuals with at least four
   photos, three of each added (``whale catalogue add``), the fourth of each and two photos of other
   individuals (new to the catalogue) in a batch, matched with the keypoint matcher
   (``whale catalogue match --method keypoints --top 5``). The photos are copied under ``OUT/photos``.
2. ``whale catalogue review OUT/cat --batch field --serve`` as a subprocess; headless Chromium at 1,400 x 900
   (the DevTools driver of ``tests/test_report.py``) opens it, screenshots the first photo with its candidates
   (the pointer on the best candidate: its individual's other photos show) and that pair enlarged (Shift+1:
   the verified keypoint matches), then decides every photo with one key each (1 where the best candidate
   is the right individual, else S) and reads each decision back from the catalogue's SQLite.
3. ``--shots``: the screenshots as PNGs there (``review-served.png``, ``review-enlarged.png``), reduced to
   256 colours so each stays under ~300 KB.

The last stdout line is ``{"benchmark": "review_page", "metrics": {...}, "seconds": ...}``: match and server
start-up seconds, keys pressed, decisions recorded, keypress-to-SQLite latency (median, max), top-1 right.
"""
from __future__ import annotations

import argparse
import base64
import io
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.common import shared_data  # noqa: E402

BATCH = "field"


def photos(data: Path, out: Path, n_ids: int, seed: int) -> tuple[Path, Path, dict[str, str]]:
    """Copy the catalogue's and the batch's photos under ``out``; ``(labels CSV, batch folder, truth)``:
    ``truth`` maps each batch photo's name to its individual (``new_whale`` for those new to the catalogue)."""
    import numpy as np
    import pandas as pd

    train = pd.read_csv(data / "train.csv")
    train = train[train["Id"] != "new_whale"]
    counts = train["Id"].value_counts()
    rng = np.random.default_rng(seed)
    ids = sorted(counts[counts >= 4].index)
    chosen = [ids[i] for i in rng.choice(len(ids), n_ids + 2, replace=False)]
    known, new = chosen[:n_ids], chosen[n_ids:]
    (out / "identified").mkdir(parents=True, exist_ok=True)
    (out / BATCH).mkdir(parents=True, exist_ok=True)
    rows, truth = [], {}
    for ind in known + new:
        images = sorted(train.loc[train["Id"] == ind, "Image"])
        for image in images[:3] if ind in known else []:
            shutil.copy(data / "train" / image, out / "identified" / image)
            rows.append((image, ind))
        shutil.copy(data / "train" / images[-1], out / BATCH / images[-1])
        truth[images[-1]] = ind if ind in known else "new_whale"
    labels = out / "identified.csv"
    pd.DataFrame(rows, columns=["image", "individual"]).to_csv(labels, index=False)
    return labels, out / BATCH, truth


def whale(*argv: str) -> None:
    subprocess.run([sys.executable, "-m", "whale", *argv, "--quiet"], cwd=ROOT, check=True)


def png(shot: dict, path: Path) -> int:
    """The screenshot as a 256-colour PNG at ``path``; its size in bytes."""
    from PIL import Image

    image = Image.open(io.BytesIO(base64.b64decode(shot["data"]))).convert("RGB")
    image.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)
    return path.stat().st_size


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--ids", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shots", help="folder for the screenshots (docs/img)")
    args = p.parse_args(argv)
    from tests.test_report import DevTools, chromium_binary
    from tests.test_review_server import STATE, ServerProcess, Tab

    t0 = time.time()
    data = shared_data("humpback")
    binary = chromium_binary()
    if data is None or binary is None:
        print(f"needs ../shared/data/humpback ({data}) and chromium ({binary})", file=sys.stderr)
        return 2
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    labels, batch, truth = photos(data, out / "photos", args.ids, args.seed)
    cat = out / "cat"
    whale("catalogue", "add", str(cat), "--photos", str(out / "photos" / "identified"), "--labels", str(labels))
    started = time.time()
    whale("catalogue", "match", str(cat), "--method", "keypoints", "--photos", str(batch), "--top", "5")
    match_s = time.time() - started
    started = time.time()
    server = ServerProcess(cat, out / "server.log", batch=BATCH)
    serve_s = time.time() - started
    browser = DevTools(binary, out / "profile", out / "chromium.log")
    metrics = {"photos": len(truth), "match_s": round(match_s, 1), "server_start_s": round(serve_s, 1)}
    try:
        tab = Tab(browser, server.url)
        tab.wait(f"(() => {{ const s = {STATE}; return s.images.every(Boolean); }})()", timeout=30)
        if args.shots:
            shots = Path(args.shots)
            shots.mkdir(parents=True, exist_ok=True)
            tab.mouse("figure.cand .pic")
            tab.wait("getComputedStyle(document.querySelector('figure.cand .others')).display === 'flex' && "
                     "[...document.querySelectorAll('figure.cand .others img')].every(i => i.complete)")
            metrics["served_png_bytes"] = png(browser.send("Page.captureScreenshot", tab.session, format="png"),
                                              shots / "review-served.png")
            tab.key("1", shift=True)
            tab.wait("!document.getElementById('zoom').hidden && "
                     "[...document.querySelectorAll('#zoom-pair img')].every(i => i.complete && i.naturalWidth > 0)")
            metrics["enlarged_png_bytes"] = png(browser.send("Page.captureScreenshot", tab.session, format="png"),
                                                shots / "review-enlarged.png")
            tab.key("Escape")
        conn = sqlite3.connect(f"file:{cat / 'catalogue.sqlite'}?mode=ro", uri=True)
        latencies, right = [], 0
        for k in range(len(truth)):
            state = tab.wait(f"(() => {{ const s = {STATE}; return s.position === '#{k + 1} of {len(truth)}' "
                             "&& s.kind !== 'saving' && s; })()")
            best = state["individuals"][0] if state["individuals"] else None
            right += best == truth[state["name"]]
            began = time.monotonic()
            tab.key("1" if best == truth[state["name"]] else "s")
            while conn.execute("SELECT COUNT(*) FROM decisions").fetchone()[0] < k + 1:
                time.sleep(0.005)
            latencies.append(time.monotonic() - began)
        metrics.update(keys=len(latencies), decisions=conn.execute("SELECT COUNT(*) FROM decisions").fetchone()[0],
                       top1_right=right, latency_median_ms=round(1000 * sorted(latencies)[len(latencies) // 2]),
                       latency_max_ms=round(1000 * max(latencies)))
        conn.close()
    finally:
        browser.close()
        server.stop()
    print(json.dumps({"benchmark": "review_page", "metrics": metrics, "seconds": round(time.time() - t0, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
