"""A Kaggle-format folder scored by the learned outline: ``whale score --matcher outline``.

``whale score --matcher outline --config configs/outline.yaml --data DIR --fold K --out OUT`` runs
:func:`score_outline`: every photo's trailing edge read once (:class:`whale.outline.curve.CurveStore`, in the
``--cache`` folder beside the keypoint features), then the embedding net (:mod:`whale.outline.net`) trained twice as
a fold run and a run on every known photo are: on fold ``K``'s gallery for ``OUT/val.npz`` (its validation queries
against that gallery, held out from the net) and on every photo of a known id for ``OUT/test.npz`` (the test photos
against them). Scores are the two curves' cosine, 0 where either photo has no curve.

The folder is a score folder as ``whale ensemble`` reads it (``run.json``, ``outline.yaml``, ``data_images.json``),
and a source of the joint identification: ``whale score --matcher joint ... --with-run RUN --with-run OUT`` takes
the outline's best photos into every query's shortlist and its scores into the check (docs/humpback.md, "The
trailing edge, learned").
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

MATCHER = "outline"
RECORD = ("run.json", "val.npz", "test.npz", "outline.yaml")


def identity(cfg, split: str, fold: int | None, seed: int) -> dict:
    """What an outline score file records about its writer."""
    import keras

    from whale.inference.scorefile import score_identity

    return score_identity(split, run_id=f"{MATCHER}-{cfg.config_hash()}", run=MATCHER, config_hash=cfg.config_hash(),
                          fold=fold, seed=seed, backend=keras.backend.backend(), matcher=MATCHER)


def cosines(e: np.ndarray, ok: np.ndarray, queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
    """``[n_q, n_g] float32``: the embeddings' cosines of rows ``queries`` and ``gallery`` of ``e``, 0 where either
    photo has no curve (``ok`` false)."""
    s = (e[queries] @ e[gallery].T).astype(np.float32)
    s[~ok[queries]] = 0.0
    s[:, ~ok[gallery]] = 0.0
    return s


def score_outline(data_dir, out, cfg, fold: int | None = None, seed: int = 0, store_root=None,
                  progress: bool = True, log=print) -> dict[str, Path]:
    """Write the outline's score files (module docstring); returns ``{"val": path, "test": path}`` of those written.

    Raises:
        ConfigError: a fold outside 0..3.
        DataError: a bad folder or photo (named), no test photos and no fold, a fold without queries or gallery,
            a gallery without two curves of one individual to learn from.
    """
    from whale.core.errors import ConfigError, DataError
    from whale.core.files import write_json_atomic, write_text_atomic
    from whale.core.memory import peak_memory_mb
    from whale.data import ImageSet, fold_data, load_competition
    from whale.data.fingerprint import digests, image_hashes, read_data_images, write_data_images
    from whale.data.folds import N_FOLDS
    from whale.inference.keypoints import check_score_folder
    from whale.inference.scorefile import write_scores
    from whale.keypoints.store import default_root
    from whale.outline.curve import CurveStore
    from whale.outline.net import embeddings, train_embedding

    out = Path(out)
    if fold is not None and not 0 <= fold < N_FOLDS:
        raise ConfigError(f"--fold {fold}: expected 0..{N_FOLDS - 1}, the fold whose validation queries val.npz holds")
    check_score_folder(out, MATCHER, "outline")
    comp = load_competition(data_dir)
    known, test = ImageSet.known(comp), ImageSet.test(comp)
    if not comp.test_images and fold is None:
        raise DataError(f"{Path(data_dir) / 'test'}: no test images to score; give --fold K to score a validation fold")
    data = fold_data(comp, fold, seed) if fold is not None else None
    if data is not None and (not len(data.val) or not len(data.gallery)):
        raise DataError(f"{data_dir}: fold {fold} has {len(data.val)} validation queries and {len(data.gallery)} "
                        "gallery photos of a known id: the outline needs both")
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    hashes = image_hashes(Path(data_dir), read_data_images(out))
    named = digests(hashes)
    sets = [(known, comp.format.train_dir), (test, comp.format.test_dir)] + (
        [(data.val, comp.format.train_dir)] if data is not None else [])
    paths = [p for s, _ in sets for p in s.paths]
    keys = [named[f"{sub}/{name}"] for s, sub in sets for name in s.names]
    curves, ok = CurveStore(store_root or default_root()).of(paths, keys, progress, log)
    row = {str(p): i for i, p in enumerate(paths)}
    times["curves"] = time.perf_counter() - t0
    log(f"outline: {int((~ok).sum())} of {len(ok)} photos without a curve (scored 0 against every photo)")

    def rows(s) -> np.ndarray:
        return np.array([row[str(p)] for p in s.paths], np.int64)

    for name in RECORD:
        (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    splits = ([("val", data.gallery, data.val)] if data is not None else []) + (
        [("test", known, test)] if comp.test_images else [])
    for split, gallery, queries in splits:
        t0 = time.perf_counter()
        g, q = rows(gallery), rows(queries)
        learn = g[ok[g]]
        if len(set(np.asarray(gallery.ids, str)[ok[g]])) < 2:
            raise DataError(f"{data_dir}: {split}: the gallery has curves of fewer than two individuals: "
                            "nothing for the outline net to learn")
        log(f"outline {split}: the net trained on {len(learn)} curves of {len(set(np.asarray(gallery.ids)[ok[g]]))} "
            f"individuals, {cfg.steps} batches")
        net = train_embedding(curves[learn], np.asarray(gallery.ids, str)[ok[g]], cfg.steps, cfg.seed,
                              progress=progress)
        e = embeddings(net, curves)
        s = cosines(e, ok, q, g)
        written[split] = write_scores(out / f"{split}.npz", s, queries.names, gallery.names, gallery.ids,
                                      query_ids=queries.ids if split == "val" else None,
                                      identity=identity(cfg, split, fold, seed),
                                      trained_on=list(gallery.names) if split == "val" else None)
        times[split] = time.perf_counter() - t0
    import yaml

    write_text_atomic(out / "outline.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    write_data_images(out, data_dir, hashes)
    write_json_atomic(out / "run.json", {"matcher": MATCHER, "data": str(Path(data_dir).resolve()),
                                         "format": comp.format.name, "fold": fold, "seed": seed,
                                         "config_hash": cfg.config_hash(), "seconds": times,
                                         "without_curve": int((~ok).sum()), "peak_mb": peak_memory_mb()})
    for path in written.values():
        log(f"wrote {path}")
    return written
