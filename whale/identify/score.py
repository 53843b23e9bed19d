"""One identification from all the evidence: ``whale score --matcher joint`` (module :mod:`whale.identify`).

``whale score --matcher joint --config configs/joint.yaml --with-run RUN --data DIR --fold K --out OUT`` runs
:func:`score_joint`, for fold ``K``'s validation queries and then the test photos:

1. **one shortlist per query** from every source: each feature kind's (``keypoints`` of the config: RootSIFT,
   XFeat) best ``shortlist.votes`` photos by LNBNN votes, and each trained run's (``--with-run``, its own
   ``val.npz``/``test.npz``, or ``RUN:ALL``: ``RUN``'s validation scores and the test scores of ``ALL``, the same
   config trained on every known photo, :mod:`whale.identify.sources`) best ``shortlist.runs`` photos by its scores,
   merged without duplicates;
2. **every shortlisted pair verified by every feature kind**: each kind's matcher (its keypoint selector and its
   own check, fitted on the fold's gallery as ``whale score --matcher keypoints`` fits them, and read back from
   ``--cache`` as it does) verifies its own vote shortlist and the other sources' candidates, both ways where its
   ``check.both_ways`` is set (:meth:`whale.keypoints.matcher.KeypointMatcher.match`'s ``also``);
3. **one check per pair on all of it** (:mod:`whale.identify.check`): fitted on the validation queries' pairs
   (cross-fitted for ``val.npz``), applied to the test pairs, aggregated to the individual. With
   ``check.validation: thinned`` the validation is first thinned as the test is drawn (:mod:`whale.identify.thin`),
   and ``OUT/thinned/<kind or run>/`` holds each feature kind's and trained run's thinned view: the runs that
   ``whale ensemble`` fuses with this one, on the same validation.

It writes ``OUT/val.npz`` and ``OUT/test.npz`` in the toolkit's score-file format (``whale ensemble OUT --tune``
and ``whale submission`` read them unchanged), ``OUT/kinds/<kind>/{val,test}.npz`` (each kind's own check of the
same verified pairs, a keypoint score folder: the late fusion ``whale ensemble OUT/kinds/a OUT/kinds/b`` measured
beside it), ``OUT/pairs_{val,test}.npz`` (the pair tables, :func:`whale.identify.check.save_table`, each written once its split
is verified: a killed run goes on from the first split without one, and a run that changes only the check or the
aggregation verifies nothing again; ``benchmarks/flukes/joint_screen.py`` tries checks on them), ``OUT/joint.yaml`` and
``OUT/run.json`` (times, peak memory, the check's pairs).
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from whale.core.errors import ConfigError, DataError
from whale.core.files import write_json_atomic, write_text_atomic
from whale.core.memory import peak_memory_mb
from whale.data import ImageSet, fold_data, load_competition
from whale.data.fingerprint import image_hashes, images_fingerprint, read_data_images, write_data_images
from whale.identify.check import (JointCheck, KindEvidence, check_rows, column_names, identification_scores,
                                  pair_table, pairs_of, read_table, save_table)
from whale.identify.config import JointConfig
from whale.identify.sources import TrainedRun, check_photo_bytes, check_runs, run_scores, shortlist_of
from whale.inference.keypoints import (MATCHER, Photos, check_score_folder, gallery_matcher,
                                       identity as keypoint_identity)
from whale.inference.scorefile import load_score_file, score_identity, score_path, write_scores
from whale.keypoints.selectcache import SelectorCache

JOINT = "joint"


def config_hash(cfg: JointConfig, runs: list[dict]) -> str:
    """12 hex digits naming the settings and the trained runs (their score files' identities)."""
    payload = json.dumps({"cfg": cfg.to_dict(), "runs": runs}, sort_keys=True, default=str)
    return hashlib.sha1(payload.encode()).hexdigest()[:12]


def score_joint(data_dir, out, cfg: JointConfig, runs=(), fold: int | None = None, seed: int = 0, store_root=None,
                workers: int | None = None, progress: bool = True, log=print) -> dict[str, Path]:
    """Write the joint identification's score files (module docstring); returns ``{"val": path, "test": path}``.

    Raises:
        ConfigError: no ``fold`` (the check is fitted on its validation queries).
        DataError: a bad folder or photo, a trained run of other data (each named).
    """
    out = Path(out)
    if fold is None:
        raise ConfigError("--matcher joint needs --fold K: its check is fitted on fold K's validation queries")
    check_score_folder(out, JOINT, "joint identification")
    runs = check_runs(runs)
    comp = load_competition(data_dir)
    image_bytes = check_photo_bytes(runs, data_dir)  # the data's bytes when read, so its own record reads them once
    if image_bytes is None:  # no run records its photos: read them here (a rerun only those changed since its record)
        image_bytes = image_hashes(Path(data_dir), read_data_images(out))
    photo_bytes = images_fingerprint(image_bytes)
    known, test = ImageSet.known(comp), ImageSet.test(comp)
    data = fold_data(comp, fold, seed)
    if not len(data.val) or not len(data.gallery):
        raise DataError(f"{data_dir}: fold {fold} has {len(data.val)} validation queries and {len(data.gallery)} "
                        "gallery photos of a known id: the joint check needs both")
    run_names = [_run_name(r.val, i) for i, r in enumerate(runs)]
    splits = [("val", data.gallery, data.val)] + ([("test", known, test)] if comp.test_images else [])
    scores = {split: [run_scores(r.path(split), split, q.names, g.names, fold) for r in runs]
              for split, g, q in splits}
    identities = {split: run_identities(runs, split) for split, _, _ in splits}
    digest = config_hash(cfg, identities["test" if "test" in identities else "val"])
    photos = Photos([known, test, data.val])
    times: dict[str, float] = {}
    memory: dict[str, float] = {}
    feats: dict = {}
    fitted: dict[str, tuple] = {name: (None, None) for name, _ in cfg.kinds}
    tables, written = {}, {}
    columns = column_names([n for n, _ in cfg.kinds], run_names)
    for split, gallery, queries in splits:
        t0 = time.perf_counter()
        path = out / f"pairs_{split}.npz"
        key = verification_key(cfg, identities[split], split, queries, gallery, photo_bytes)
        table = read_table(path, key)
        if table is not None:
            tables[split] = (table.pairs, table.rows, table.fallback)
            log(f"joint {split}: the pairs verified by an earlier run of these settings read back from {path} "
                "(nothing verified again)")
            continue
        if not feats:
            feats.update({name: photos.extract(kcfg, store_root, workers, progress, times, memory, log, name)
                          for name, kcfg in cfg.kinds})
        evidence = _verify(cfg, feats, fitted, split, gallery, queries, data, scores[split], comp.open_label,
                           progress, times, memory, log)
        pairs = pairs_of(evidence.pop("shortlist"))
        rows = pair_table(pairs, list(evidence.values()), scores[split], gallery.ids, comp.open_label)
        fallback = np.max([e.scores for e in evidence.values()], axis=0)
        tables[split] = (pairs, rows, fallback)
        for name, e in evidence.items():
            _write_kind(out / "kinds" / name, split, e.scores, queries, gallery, dict(cfg.kinds)[name], fold, seed)
        save_table(path, pairs, rows, fallback, columns, key)
        times[f"{split}_total"] = time.perf_counter() - t0
        log(f"joint {split}: {len(queries)} queries, {len(pairs):,} shortlisted pairs ({len(pairs) / len(queries):.1f} a "
            f"query) verified by {', '.join(evidence)}")
    thinning = None
    if cfg.validation == "thinned":
        thinning = _thin_validation(out, cfg, data, tables, columns, scores["val"], [r.val for r in runs], seed,
                                    comp.open_label, log)
    t0 = time.perf_counter()
    pairs, rows, fallback = tables["val"]
    same = (np.asarray(data.gallery.ids, str)[pairs[:, 1]] == np.asarray(data.val.ids, str)[pairs[:, 0]])
    check = JointCheck.of(cfg).fit(check_rows(pairs, rows, columns, data.gallery.ids, cfg.columns, comp.open_label),
                                   same, pairs[:, 0], progress)
    times["check_fit"] = time.perf_counter() - t0
    log(f"joint: one check fitted on {check.pairs[0]:,} same-individual and {check.pairs[1]:,} other pairs of the "
        f"{'thinned ' if thinning else ''}validation queries ({cfg.folds}-fold cross-fitted for val.npz, "
        f"{times['check_fit']:.1f} s)")
    for split, gallery, queries in splits:
        pairs, rows, fallback = tables[split]
        p = check.out_of_fold if split == "val" else check.predict(
            check_rows(pairs, rows, columns, gallery.ids, cfg.columns, comp.open_label))
        matrix = identification_scores(pairs, p, gallery.ids, fallback, cfg.aggregate, comp.open_label)
        ident = score_identity(split, run_id=f"{JOINT}-{digest}", run=JOINT, config_hash=digest, fold=fold, seed=seed,
                               backend="opencv", matcher=JOINT, with_runs=[r.spec for r in runs],
                               cross_fitted=cfg.folds if split == "val" else None)
        written[split] = write_scores(out / f"{split}.npz", matrix, queries.names, gallery.names, gallery.ids,
                                      query_ids=queries.ids if split == "val" else None, identity=ident,
                                      trained_on=[] if split == "val" else None)
    memory["check"] = peak_memory_mb()["self"]
    import yaml

    write_text_atomic(out / "joint.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    hashes = write_data_images(out, data_dir, image_bytes)  # for the ensemble and the joint
    for kind in sorted((out / "kinds").glob("*/run.json")):
        write_data_images(kind.parent, data_dir, hashes)
    write_json_atomic(out / "run.json", {"matcher": JOINT, "data": str(Path(data_dir).resolve()),
                                         "format": comp.format.name, "fold": fold, "seed": seed,
                                         "config_hash": digest, "with_runs": [str(r.val) for r in runs],
                                         "run_names": run_names, "seconds": times, "peak_mb": memory,
                                         "check_pairs": list(check.pairs)}
                      | ({"thinned": thinning} if thinning else {})
                      | ({"test_runs": [str(r.test) for r in runs]} if any(r.full for r in runs) else {}))
    for path in written.values():
        log(f"wrote {path}")
    return written


def run_identities(runs: list[TrainedRun], split: str) -> list[dict]:
    """Each trained run's identity as the settings' hash and a split's pair table name it: its ``val.npz``'s, and for
    the test split of a ``RUN:ALL`` also ``ALL``'s ``test.npz``'s (so its table is not served by a run without it)."""
    out = []
    for r in runs:
        ident = load_score_file(score_path(r.val, "val"), True).identity or {"run": str(r.val)}
        if split == "test" and r.full:
            ident = {**ident, "test_run": load_score_file(score_path(r.test, "test")).identity or {"run": str(r.test)}}
        out.append(ident)
    return out


def verification_key(cfg: JointConfig, runs: list[dict], split: str, queries, gallery, photo_bytes: str) -> str:
    """16 hex digits naming what a split's pair table depends on: every feature kind's settings, the shortlist's,
    the trained runs' identities, the split's photos and individuals, and ``photo_bytes`` (the data's
    :func:`whale.data.fingerprint.images_fingerprint`: other photos under the same names are verified again); not
    the check nor the aggregation, which a table serves again: a run changing only those verifies nothing."""
    payload = json.dumps({"kinds": [(n, k.config_hash()) for n, k in cfg.kinds], "votes": cfg.votes, "runs": cfg.runs,
                          "with": runs, "split": split, "query": list(queries.names), "gallery": list(gallery.names),
                          "ids": [str(i) for i in gallery.ids], "bytes": photo_bytes}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _run_name(run: Path, i: int) -> str:
    return f"run{i}:{run.name}"


def _verify(cfg: JointConfig, feats, fitted, split, gallery, queries, data, trained, open_label, progress,
            times, memory, log) -> dict:
    """Each feature kind's matcher of ``gallery`` (its selector and check those of the fold's gallery ``data.gallery``,
    kept in ``fitted``), every kind's votes and every run's scores merged into one shortlist per query, then each
    kind's match of ``queries`` verifying it: ``{kind: KindEvidence, "shortlist": [...]}``."""
    matchers, votes = {}, {}
    fold_gallery = data.gallery
    for name, kcfg in cfg.kinds:
        f = feats[name]
        cache = SelectorCache(f.store.folder, kcfg, f.keys(fold_gallery), fold_gallery.ids, open_label)
        t0 = time.perf_counter()
        if split != "val" and fitted[name] == (None, None):  # validation's table was read back: its parts again
            fold = gallery_matcher(kcfg, f.of(fold_gallery), fold_gallery.ids, f.keys(fold_gallery), cache,
                                   open_label=open_label, progress=progress)[0]
            fitted[name] = (fold.selector, fold.check)
            del fold
        matcher, read_back = gallery_matcher(kcfg, f.of(gallery), gallery.ids, f.keys(gallery), cache,
                                             *fitted[name], open_label, progress)
        if split == "val":
            fitted[name] = (matcher.selector, matcher.check)
        times[f"{split}_{name}_gallery"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        votes[name] = matcher.votes(f.of(queries), progress, f.keys(queries))
        times[f"{split}_{name}_votes"] = time.perf_counter() - t0
        matchers[name] = (matcher, cache)
        if read_back:
            check = matcher.check
            log(f"joint {split} {name}: the keypoint selector read back from {cache.path}" +
                (f", its check from {check.kept} (nothing fitted)" if check is not None and check.kept else
                 ", its check fitted on the fold's gallery" if check is not None else " (nothing fitted)"))
        if cache.note:
            log(f"joint {split} {name}: {cache.note}")
    shortlist = shortlist_of(list(votes.values()), trained, cfg.votes, cfg.runs)
    memory[f"{split}_gallery"] = peak_memory_mb()["self"]
    evidence: dict = {}
    for name, _ in cfg.kinds:
        matcher, cache = matchers.pop(name)
        f = feats[name]
        t0 = time.perf_counter()
        result = matcher.match(f.of(queries), progress=progress, keys=f.keys(queries), also=shortlist)
        times[f"{split}_{name}_match"] = time.perf_counter() - t0
        cache.keep(matcher)
        evidence[name] = KindEvidence(result.scores, result.votes, result.inliers)
        del matcher
    memory[f"{split}_match"] = peak_memory_mb()["self"]
    evidence["shortlist"] = shortlist
    return evidence


def _thin_validation(out: Path, cfg: JointConfig, data, tables: dict, columns, run_val: list, runs: list[Path],
                     seed: int, open_label: str, log) -> dict:
    """``check.validation: thinned``: ``tables["val"]`` replaced by its thinned copy (:mod:`whale.identify.thin`)
    and each feature kind's and trained run's thinned view written under ``OUT/thinned/`` (what ``whale ensemble``
    fuses with this run); returns what ``run.json`` records of it."""
    from whale.identify.check import PairTable
    from whale.identify.thin import hidden_names, hidden_photos, mirror_share, thinned, write_views

    gallery_ids, truth = np.asarray(data.gallery.ids, str), np.asarray(data.val.ids, str)
    share = mirror_share(gallery_ids, open_label)
    hidden = hidden_photos(gallery_ids, truth, share, seed, open_label)
    kinds = {name: out / "kinds" / name for name, _ in cfg.kinds}
    kind_scores = {name: np.asarray(load_score_file(score_path(f, "val")).scores, np.float32)
                   for name, f in kinds.items()}
    pairs, rows, fallback = tables["val"]
    tables["val"] = thinned(PairTable(pairs, rows, fallback, list(columns), ""), hidden, kind_scores, run_val,
                            gallery_ids, open_label)
    names = hidden_names(hidden, data.val.names, data.gallery.names)
    folders = [Path(r).name for r in runs]  # each run's view named by its folder, numbered where two share one
    views = {**kinds, **{f if folders.count(f) == 1 else f"{i}-{f}": Path(r)
                         for i, (r, f) in enumerate(zip(runs, folders))}}
    write_views(views, out / "thinned", names, share, seed)
    known = int((truth != open_label).sum())
    log(f"joint: validation thinned as the test is drawn (share {share:.3f}): {len(hidden)} of {known} known "
        f"queries keep one gallery photo; the runs' thinned views in {out / 'thinned'}")
    return {"share": share, "queries": len(hidden), "known": known, "views": sorted(views)}


def _write_kind(folder: Path, split: str, scores, queries, gallery, kcfg, fold: int, seed: int) -> Path:
    """One feature kind's own scores of the joint shortlist, as a keypoint score folder's file."""
    folder.mkdir(parents=True, exist_ok=True)
    ident = keypoint_identity(kcfg, split, fold, seed)
    ident["shortlist"] = JOINT
    path = write_scores(folder / f"{split}.npz", scores, queries.names, gallery.names, gallery.ids,
                        query_ids=queries.ids if split == "val" else None, identity=ident,
                        trained_on=[] if split == "val" else None)
    write_json_atomic(folder / "run.json", {"matcher": MATCHER, "fold": fold, "seed": seed, "shortlist": JOINT,
                                            "config_hash": kcfg.config_hash()})
    return path
