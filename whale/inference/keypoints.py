"""A Kaggle-format folder scored by the keypoint matcher (:mod:`whale.keypoints`): the toolkit's score files, no training.

``whale score --matcher keypoints --data DIR --out OUT`` runs :func:`score_competition`:

* ``OUT`` ending in ``.npz``: that one file, the test images against every training image of a known id
  (``scores/test.npz``'s format, :mod:`whale.inference.scorefile`);
* else ``OUT`` is a score folder as ``whale ensemble`` reads it: ``OUT/test.npz`` and, with ``--fold K``,
  ``OUT/val.npz`` (fold ``K``'s validation queries, ``new_whale`` included, against the fold's training
  images, the fold rules and seed of ``whale train``, so it averages with a trained run of the same fold),
  ``OUT/run.json`` (data folder, format, settings, times, and the peak memory after each step,
  ``peak_mb``) and ``OUT/keypoints.yaml`` (the settings).

Features come from the :class:`whale.keypoints.store.FeatureStore` (extracted once per photo content), their
descriptors memory-mapped (:class:`whale.keypoints.store.MappedDescriptors`), not held in the process. With
keypoint selection (``select``), one selector serves both: fitted on the validation fold's gallery (with
``--fold``; else on the test gallery), it selects the fold's queries as it selects the test photos (both halves
of the classifier, which never saw them), and the test gallery's photos as they are: each photo of the fold's
gallery by the half that never saw its individual, the fold's queries by both (:mod:`whale.keypoints.selection`).
Validation treats its queries as the test treats its own, so the ``new_whale`` threshold tuned there carries over.

A score folder holds the files of one score run: a folder holding another kind of record (a trained run's
``run.json``, ``config.yaml``, ``checkpoints/`` or score files) is refused before any work
(:func:`check_score_folder`), and the earlier score run's files go just before the first new one is written, so a
``val.npz`` of another fold or other settings never stays beside a new ``test.npz``.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale import NEW_WHALE
from whale.data import ImageSet, fold_data, load_competition
from whale.data.folds import N_FOLDS
from whale.core.errors import ConfigError, DataError, OutputError
from whale.core.files import write_json_atomic, write_text_atomic
from whale.core.memory import peak_memory_mb
from whale.data.fingerprint import (DATA_IMAGES, changed_names, digests, image_hashes, read_data_images,
                                    write_data_images)
from whale.inference.scorefile import first_names, read_header, run_folder, score_identity, write_scores
from whale.keypoints.config import KeypointConfig
from whale.keypoints.matcher import KeypointMatcher
from whale.keypoints.selectcache import SelectorCache
from whale.keypoints.store import FeatureStore

MATCHER = "keypoints"
RECORD = ("run.json", "val.npz", "test.npz", "keypoints.yaml", DATA_IMAGES)
"""What a score run writes into its folder; ``run.json`` first among what an earlier one's removal takes."""
TRAINED = ("config.yaml", "checkpoints")
"""What a trained run's folder holds besides its ``run.json``."""


def check_score_folder(out: Path, matcher: str = MATCHER, what: str = "keypoint") -> None:
    """Refuse ``--out`` folder ``out`` when it holds another kind of record than a score run's of ``matcher``
    (``keypoints``; ``joint``: :mod:`whale.identify`), named ``what`` in its messages: a ``run.json`` not written
    by one (a trained run's: its argv, data fingerprint, history), a trained run's ``config.yaml`` or ``checkpoints/``, or score files another run wrote
    (a trained run's ``RUN/scores/``).

    Raises:
        OutputError: naming the file and what it is.
    """
    meta_path = Path(out) / "run.json"
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            meta = None
        if not isinstance(meta, dict) or meta.get("matcher") != matcher:
            record = (f"a trained run's record (run_id {meta['run_id']})" if isinstance(meta, dict) and meta.get("run_id")
                      else f"not a {what} score run's record")
            raise OutputError(f"--out {out}: {meta_path} is {record}; a score folder's run.json would replace it: "
                              "choose another --out (a new folder)")
    for name in TRAINED:
        if (Path(out) / name).exists():
            raise OutputError(f"--out {out}: holds {name}, a trained run's folder; a score folder's files would mix "
                              "with it: choose another --out (a new folder)")
    for name in ("val.npz", "test.npz"):
        path = Path(out) / name
        if not path.is_file():
            continue
        try:
            ident = read_header(path, False)["identity"] or {}
        except DataError:
            ident = {}
        if ident.get("matcher") != matcher:
            raise OutputError(f"--out {out}: {path} holds another run's scores (run_id {ident.get('run_id')}), not a "
                              f"{what} score run's; they would be replaced: choose another --out (a new folder)")


class _Folder:
    """The score folder ``out``: the earlier score run's files removed once, just before the first new one."""

    def __init__(self, out: Path, log):
        self.out, self.log, self.cleared = out, log, False

    def clear(self, writes: set[str]) -> None:
        if self.cleared:
            return
        self.cleared = True
        for name in RECORD:
            path = self.out / name
            if path.is_file():
                path.unlink()
                if name not in writes:
                    self.log(f"removed {path}: an earlier score run's, which this run does not write again")


def identity(cfg: KeypointConfig, split: str, fold: int | None, seed: int) -> dict:
    """What a keypoint score file records about its writer (:func:`whale.inference.scorefile.score_identity`, and
    ``matcher``)."""
    return score_identity(split, run_id=f"{MATCHER}-{cfg.config_hash()}", run=MATCHER, config_hash=cfg.config_hash(),
                          fold=fold, seed=seed, backend="opencv", matcher=MATCHER)


def score_competition(data_dir, out, cfg: KeypointConfig, fold: int | None = None, seed: int = 0,
                      store_root=None, workers: int | None = None, progress: bool = True, log=print) -> dict[str, Path]:
    """Write the matcher's score files for the competition in ``data_dir`` (module docstring).

    Args:
        data_dir: a Kaggle-format folder. out: ``FILE.npz`` (test scores only) or a folder.
        cfg: the matcher's settings. fold: also score this validation fold (``out`` must be a folder).
        seed: the fold assignment's seed (a trained run's config ``seed``). store_root: the feature store
            (None: :func:`whale.keypoints.store.default_root`). workers: extraction processes.

    Returns:
        ``{"test": path, "val": path}`` of what was written.

    Raises:
        DataError: no test images and no fold, a bad folder or photo (named), a ``FILE.npz`` beside a record of
            other photos (:func:`check_folder_record`).
    """
    out = Path(out)
    single = out.suffix == ".npz"
    if fold is not None and not 0 <= fold < N_FOLDS:
        raise ConfigError(f"--fold {fold}: expected 0..{N_FOLDS - 1}, the fold whose validation queries val.npz "
                          f"holds (the paper's {N_FOLDS} folds, as whale train's --fold)")
    if single and fold is not None:
        raise DataError(f"--out {out}: --fold writes val.npz and test.npz: give a folder, not a .npz file")
    if not single:
        check_score_folder(out)
    comp = load_competition(data_dir)
    lone_photos = check_folder_record(out, data_dir) if single else None
    if not comp.test_images and fold is None:
        raise DataError(f"{Path(data_dir) / 'test'}: no test images to score (the folder is empty or missing); "
                        "give --fold K to score a validation fold")
    known = ImageSet.known(comp)
    if not len(known):
        raise DataError(f"{Path(data_dir) / 'train.csv'}: no training image has a known id ({len(comp.train)} rows, "
                        f"all {comp.open_label}): the matcher has no gallery to match against")
    test = ImageSet.test(comp)
    data = fold_data(comp, fold, seed) if fold is not None else None
    if data is not None and not len(data.val):
        raise DataError(f"{data_dir}: fold {fold} has no validation images (fold rules: docs/training.md)")
    if data is not None and not len(data.gallery):
        raise DataError(f"{Path(data_dir) / 'train.csv'}: fold {fold} keeps no training image of a known id to "
                        "match its validation queries against")
    if data is not None and not comp.test_images:
        log(f"keypoints: {Path(data_dir) / 'test'} holds no test images: writing val.npz only, no test.npz")
    # every photo once: the known training images (the gallery and the fold's known queries), the fold's
    # open-set queries, the test images
    photos = Photos([known, test] + ([data.val] if data is not None else []))
    times: dict[str, float] = {}
    memory: dict[str, float] = {}
    features = photos.extract(cfg, store_root, workers, progress, times, memory, log)
    store, of, keys = features.store, features.of, features.keys

    def cache(s: ImageSet) -> SelectorCache:  # where the selector fitted on gallery ``s`` is kept
        return SelectorCache(store.folder, cfg, keys(s), s.ids, comp.open_label)

    written = {}
    target = out if single else out / "test.npz"
    folder = _Folder(out, log)
    writes = {name for name, yes in (("val.npz", data is not None), ("test.npz", bool(comp.test_images))) if yes}
    writes |= {"run.json", "keypoints.yaml", DATA_IMAGES}
    selector = check = None  # the validation fold's, reused by the test
    if data is not None:
        def write_val(scores):
            folder.clear(writes)
            return write_scores(out / "val.npz", scores, data.val.names, data.gallery.names, data.gallery.ids,
                                query_ids=data.val.ids, identity=identity(cfg, "val", fold, seed), trained_on=[])

        fitted_on = cache(data.gallery)
        written["val"], fitted = _score(of(data.gallery), data.gallery.ids, keys(data.gallery), of(data.val),
                                        keys(data.val), cfg, progress, times, "val", log, write_val, fitted_on,
                                        open_label=comp.open_label, memory=memory)
        selector, check = fitted.selector, fitted.check
        del fitted  # its index and selected gallery go before the test's are built
    if comp.test_images:
        def write_test(scores):
            if not single:
                folder.clear(writes)
            return write_scores(target, scores, test.names, known.names, known.ids,
                                identity=identity(cfg, "test", fold, seed), photos=lone_photos)

        written["test"], _ = _score(of(known), known.ids, keys(known), of(test), keys(test), cfg, progress, times,
                                    "test", log, write_test, fitted_on if data is not None else cache(known),
                                    selector=selector, check=check, open_label=comp.open_label, memory=memory)
    if not single:
        import yaml

        write_text_atomic(out / "keypoints.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        write_data_images(out, data_dir)  # so the ensemble and the joint refuse it beside other photos of these names
        write_json_atomic(out / "run.json", {"matcher": MATCHER, "data": str(Path(data_dir).resolve()),
                                             "format": comp.format.name, "fold": fold, "seed": seed,
                                             "config_hash": cfg.config_hash(), "seconds": times,
                                             "peak_mb": memory})
    for path in written.values():
        log(f"wrote {path}")
    return written


def check_folder_record(out: Path, data_dir) -> dict[str, str] | None:
    """A score file written alone (``--out FILE.npz``) into a run folder: ``whale ensemble`` reads the folder's record
    (:func:`whale.inference.scorefile.run_folder`, ``data_images.json``) for it. Refuse to write it beside a record of
    other photos under ``data_dir``'s names.

    Returns:
        None beside such a record (the file's photos are the record's); else ``{name: digest}`` of ``data_dir``'s
        images, for the file to hold itself (:func:`whale.inference.scorefile.file_photos`).

    Raises:
        DataError: naming the record and a few images whose bytes differ.
    """
    folder = run_folder(out)
    record = read_data_images(folder)
    hashes = image_hashes(Path(data_dir))
    if not record:
        return digests(hashes)
    changed = changed_names(record, hashes)
    if changed:
        raise DataError(f"--out {out}: {folder / DATA_IMAGES} records other photos under the names of {data_dir}'s "
                        f"({len(changed)} images differ in bytes, e.g. {first_names(changed, 2)}), and whale ensemble "
                        "takes that record for every score file of the folder: write it to another folder")
    return None


class Photos:
    """Every photo of some image sets once (a photo in two sets, such as a known query that is also in the test
    gallery, is extracted and read once); :meth:`extract` gives their features under one feature config."""

    def __init__(self, sets: list[ImageSet]):
        self.paths, self.boxes, self.where = [], [], {}
        for s in sets:
            for p, b in zip(s.paths, s.boxes):
                key = (str(p), b)
                if key not in self.where:
                    self.where[key] = len(self.paths)
                    self.paths.append(p)
                    self.boxes.append(b)

    def at(self, s: ImageSet) -> list[int]:
        """Each photo of ``s``: its place among these photos."""
        return [self.where[(str(p), b)] for p, b in zip(s.paths, s.boxes)]

    def extract(self, cfg: KeypointConfig, store_root, workers, progress, times: dict, memory: dict, log,
                name: str = "") -> "PhotoFeatures":
        """Every photo's features under ``cfg`` read from its :class:`FeatureStore` (the missing ones extracted;
        descriptors memory-mapped), the wall time recorded in ``times`` and this process's and the extraction
        workers' peak memory in ``memory`` (MB), under ``features`` (``features_<name>`` with a ``name``)."""
        store = FeatureStore(cfg, store_root)
        t0 = time.perf_counter()
        feats = store.features(self.paths, workers=workers, progress=progress, boxes=self.boxes, mapped=True)
        step = f"features_{name}" if name else "features"
        times[step] = time.perf_counter() - t0
        peak = peak_memory_mb()  # this process's peak so far after each step, its extraction workers' (MB)
        memory.update({step: peak["self"], "extraction_workers": peak["workers"]})
        log(f"keypoints{' ' + name if name else ''}: {len(self.paths)} photos' features in {times[step]:.1f} s "
            f"(store {store.folder}; {np.mean([len(f) for f in feats]) if feats else 0:.0f} per photo)")
        return PhotoFeatures(self, store, feats, list(store.keys))


@dataclass
class PhotoFeatures:
    """The features of :class:`Photos` under one feature config: ``feats`` and ``store_keys`` (each photo's content
    key: its key to the selector) in the photos' order."""

    photos: Photos
    store: FeatureStore
    feats: list
    store_keys: list[str]

    def of(self, s: ImageSet) -> list:
        """The features of ``s``'s photos."""
        return [self.feats[i] for i in self.photos.at(s)]

    def keys(self, s: ImageSet) -> list[str]:
        """The store keys of ``s``'s photos."""
        return [self.store_keys[i] for i in self.photos.at(s)]


def gallery_matcher(cfg: KeypointConfig, gallery, ids, keys, cache: SelectorCache, selector=None, check=None,
                    open_label=NEW_WHALE, progress: bool = False) -> tuple[KeypointMatcher, bool]:
    """``(matcher of gallery, read back)``: with a ``selector`` or ``check`` already fitted (on the fold's gallery),
    a matcher that uses them (the check fitted here when only a selector is given); else ``cache``'s (:meth:`SelectorCache.matcher
    <whale.keypoints.selectcache.SelectorCache.matcher>`: the selector it keeps, ``read back``, else one fitted
    here, never pairing a gallery photo labelled ``open_label``)."""
    if selector is not None or check is not None:
        matcher = KeypointMatcher(cfg, gallery, ids, selector=selector, keys=keys, progress=progress, check=check)
        if check is None:
            matcher.fit_check(ids, open_label, progress)
        return matcher, False
    return cache.matcher(gallery, ids, open_label, progress)


def _score(gallery, ids, keys, queries, query_keys, cfg, progress, times, split, log, write, cache: SelectorCache,
           selector=None, check=None, open_label=NEW_WHALE, memory=None):
    """Match ``queries`` against ``gallery`` (``keys``, ``query_keys``: the photos' store keys), record the times
    under ``split`` (and this process's peak memory after the gallery's selection and index, and after the match,
    in ``memory``), ``write`` the scores: returns ``(written path, the matcher)``; ``selector``, ``check``: ones
    already fitted (on the fold's gallery), else ``cache``'s matcher (:meth:`SelectorCache.matcher
    <whale.keypoints.selectcache.SelectorCache.matcher>`: the selector it keeps, else one fitted here, never pairing
    a gallery photo labelled ``open_label``, the format's); ``cache`` keeps the selector afterwards with every photo
    it scored."""
    given = selector is not None or check is not None  # select.keep 1: no selector, the fold's check still serves
    matcher, read_back = gallery_matcher(cfg, gallery, ids, keys, cache, selector, check, open_label, progress)
    if not given and cache.note:
        log(f"keypoints {split}: {cache.note}")
    memory = {} if memory is None else memory
    memory[f"{split}_gallery"] = peak_memory_mb()["self"]
    result = matcher.match(queries, progress=progress, keys=query_keys)
    memory[f"{split}_match"] = peak_memory_mb()["self"]
    cache.keep(matcher)
    if read_back:
        log(f"keypoints {split}: the keypoint selector of this gallery read back from {cache.path} (nothing fitted)")
    times[f"{split}_select"] = matcher.select_seconds + result.seconds["select"]
    steps = {**matcher.select_steps, "queries": result.seconds["select"]} if matcher.select_steps else {}
    times.update({f"{split}_select_{step}": s for step, s in steps.items()})  # where selection's time goes
    times[f"{split}_index"] = matcher.index_seconds
    times[f"{split}_search"] = result.seconds["search"]
    times[f"{split}_verify"] = result.seconds["verify"]
    fitted = matcher.selector
    if matcher.check is not None:
        if check is None and not matcher.check.kept:  # fitted in this split: its time is this split's
            times.update({f"{split}_check_{step}": s for step, s in matcher.check.seconds.items()})
        whose = (" (the validation fold's)" if check is not None else
                 f" (read back from {matcher.check.kept})" if matcher.check.kept else "")
        log(f"keypoints {split}: " + (matcher.check.reason or "verified matches scored by a check fitted on "
                                      "{:,} same-individual and {:,} other verified pairs of the gallery".format(
                                          *matcher.check.pairs) + whose))
    if fitted is not None:
        how = ("the validation fold's classifier" if given else
               "a classifier of the gallery's same-whale matches" + (", read back" if read_back else ""))
        took = ", ".join([f"{times[f'{split}_select']:.1f} s"] + [f"{k} {v:.1f} s" for k, v in steps.items()])
        log(f"keypoints {split}: " + (fitted.reason or f"each photo keeps {cfg.select.keep:.0%} of its keypoints, "
                                      f"chosen by {how} ({took})"))
    log(f"keypoints {split}: {len(queries)} queries x {len(gallery)} gallery photos "
        f"({len(matcher.index)} descriptors, {matcher.index.kind} index {matcher.index_seconds:.1f} s, "
        f"search {result.seconds['search']:.1f} s, verification {result.seconds['verify']:.1f} s)")
    return write(result.scores), matcher
