"""``match --method keypoints``: a batch of new photos against the catalogue by the keypoint matcher, no run.

The catalogue keeps the matcher's features in ``CAT/keypoints/<fingerprint>/`` (a
:class:`whale.keypoints.FeatureStore`: one file per photo content and feature setting, written atomically,
so a killed match keeps what it extracted and a later match extracts only new photos). Per photo the
candidates are the individuals ranked by their best image's score (:mod:`whale.keypoints.matcher`: LNBNN
votes over the whole catalogue, geometric verification of the best), each with its calibrated probability of
the same whale (:mod:`whale.catalogue.calibration`: the catalogue's photos matched against it, each left out of
its own row, with the same selection), ``possibly_new`` when the best one's is below ``--threshold`` (0.5; a
catalogue that cannot be calibrated falls back to the score :data:`SCORE_THRESHOLD`); photos of the
batch whose calibrated probability of one whale reaches the threshold are grouped as
:func:`whale.catalogue.match.groups_of` does (complete linkage: no chain through weak links). Each photo keeps
the keypoints that the catalogue's own verified same-whale matches taught a classifier to keep (``select``,
:mod:`whale.keypoints.selection`; all of them in a catalogue with too few such matches), the batch matched within
itself with the same choice. The selection's classifiers and the matcher's check are kept beside the features
(``CAT/keypoints/<fingerprint>/selectors/``, :class:`whale.keypoints.selectcache.SelectorCache`), read back by the
next match of an unchanged catalogue (fitting them is most of a match's time on thousands of photos), fitted again
after a change, the earlier catalogue's deleted. The settings used are kept beside the proposals
(``batches/<batch>/keypoints.yaml``), so the review page draws the matches the same way.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from whale.catalogue import sql
from whale.catalogue.db import Catalogue
from whale.catalogue.ingest import image_path
from whale.catalogue.calibration import catalogue_calibration
from whale.catalogue.match import Flagging, batch_photos, check_batch, record_proposals
from whale.catalogue.proposals import Proposals
from whale.core.errors import DataError

STORE_DIR = "keypoints"
"""The catalogue's folder of keypoint features."""
RUN = "keypoints"
"""What a keypoint batch's row and proposals record as the run that matched it."""
CONFIG_NAME = "keypoints.yaml"
SCORE_THRESHOLD = 0.15
"""The keypoint score below which a photo's best individual leaves it "possibly new" in a catalogue that cannot be
calibrated (no two photos of one whale; every other catalogue reads P(same whale) against ``--threshold``,
:mod:`whale.catalogue.calibration`); chosen on the real flukes' validation folds (docs/humpback.md). Formerly the
keypoint config's ``verify.new_threshold`` (:data:`whale.keypoints.config.MOVED`); ``whale ensemble --tune`` tunes
its own on a fold's validation queries."""


def store_of(cat_root, cfg):
    """The catalogue's :class:`whale.keypoints.FeatureStore` for ``cfg``."""
    from whale.keypoints import FeatureStore

    return FeatureStore(cfg, Path(cat_root) / STORE_DIR)


def batch_config(cat_root, batch: str):
    """The keypoint settings a batch was matched with (the defaults when it recorded none)."""
    from whale.keypoints import load_keypoint_config

    path = Path(cat_root) / "batches" / batch / CONFIG_NAME
    return load_keypoint_config(path if path.is_file() else None)


def _box(text: str | None):
    return None if not text else tuple(float(v) for v in text.split(","))


def match_keypoints(cat: Catalogue, cfg, photos_dir, batch: str | None = None, top: int = 10,
                    threshold: float | None = None, boxes_csv=None, rematch: bool = False,
                    progress: bool = True, log=None) -> tuple[Proposals, Path]:
    """Propose individuals for every photo of ``photos_dir`` with the keypoint matcher (module docstring).

    ``threshold``: the probability of the same whale below which a photo is possibly new (default
    :data:`whale.catalogue.match.DEFAULT_PROBABILITY`); ``log``: told how the catalogue was calibrated.

    Holds the catalogue's write lock for the whole match and records the proposals in one transaction, as
    :func:`whale.catalogue.match.match_batch` does; refuses an existing batch unless ``rematch``.

    Raises:
        DataError: a bad or existing batch, a photo that is not an image, an empty catalogue.
    """
    import yaml

    from whale.core.files import write_text_atomic
    from whale.keypoints import KeypointMatcher

    photos_dir = Path(photos_dir)
    photos, boxes = batch_photos(cat, photos_dir, batch, rematch, top, boxes_csv)
    with cat.writing():
        batch = check_batch(cat, photos_dir, batch, rematch)
        rows = [(h, ind, f, box) for h, ind, f, _, box in sql.photos(cat.conn)]
        if not rows:
            raise DataError(f"{cat.root}: the catalogue holds no photos (add some with `whale catalogue add`)")
        hashes = [r[0] for r in rows]
        individuals = np.array([r[1] for r in rows], dtype=str)
        paths = [image_path(cat, r[2]) for r in rows]
        store = store_of(cat.root, cfg)
        gallery = store.features(paths, progress=progress, digests=hashes, boxes=[_box(r[3]) for r in rows],
                                 mapped=True)  # the descriptors memory-mapped, not held
        keys = list(store.keys)
        queries = store.features(photos, progress=progress, boxes=[boxes.get(p.name) for p in photos])
        query_keys = list(store.keys)
        matcher, cache = kept_matcher(store, cfg, gallery, keys, individuals, progress, log)
        scores = matcher.match(queries, progress=progress, keys=query_keys).scores
        names, cols, vals = best_individuals(scores, individuals, top)

        def left_out(rows):  # catalogue photos as new photos: each its own gallery selection, itself left out
            return matcher.match([gallery[i] for i in rows], progress=progress, leave_out=rows,
                                 keys=[keys[i] for i in rows]).scores

        cal, how = catalogue_calibration(cat.root, f"keypoints {cfg.config_hash()}", hashes, individuals, left_out,
                                         log)
        within = KeypointMatcher(cfg, queries, selector=matcher.selector, keys=query_keys)  # what the catalogue taught
        pairs = within.match(queries, progress=False, keys=query_keys).scores
        cache.keep(matcher)  # with the batch's photos it scored
        flag = Flagging.of(cal, threshold, SCORE_THRESHOLD, how)
        if log:
            log(flag.how)
        write_text_atomic(cat.root / "batches" / batch / CONFIG_NAME, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        with cat.transaction() as db:
            return record_proposals(cat, db, batch, photos_dir, photos, RUN, cfg.fingerprint(), flag,
                                    names, cols, vals, flag.groups(pairs), paths, hashes)


def kept_matcher(store, cfg, gallery, keys, individuals, progress: bool = False, log=None, strict: bool = False):
    """``(matcher, cache)``: the matcher of the catalogue's photos ``gallery`` (store ``keys``, ``individuals``)
    under ``cfg``, its keypoint selector and check read back from ``store`` when this catalogue kept them
    (:class:`whale.keypoints.selectcache.SelectorCache`), else fitted now and kept there, the files of an earlier
    catalogue dropped; ``strict``: the check's photos each left out strictly (the joint check's). ``log``: told
    which, and of a kept file that could not be used."""
    from whale import NEW_WHALE
    from whale.keypoints.selectcache import SelectorCache

    say = log or (lambda line: None)
    cache = SelectorCache(store.folder, cfg, keys, individuals, NEW_WHALE, strict=strict)
    matcher, read_back = cache.matcher(gallery, individuals, progress=progress)
    if cache.note:
        say(f"keypoints: {cache.note}")
    if read_back:
        kept = matcher.check is not None and matcher.check.kept
        say(f"keypoints: the selector read back from {cache.path.name}" +
            (f", its check from {cache.check_path.name}" if kept else ""))
    else:
        cache.keep(matcher)  # kept before the catalogue is matched against itself: a killed match loses none of it
        cache.drop_others()
    return matcher, cache


def best_individuals(scores: np.ndarray, individuals: np.ndarray, top: int, images: np.ndarray | None = None):
    """``(names [n, k] str, cols [n, k] int64, vals [n, k] float32)``: per row of ``scores`` ``[n, n_gallery]``
    the ``k = min(top, individuals)`` best individuals by their best image, that image's column and score (the
    toolkit's per-individual reduction, :class:`whale.core.arrays.IdGroups`). ``images`` ``[n, n_gallery]``: what
    picks each individual's image instead (scores written on every photo of an individual, the joint
    identification's, :mod:`whale.catalogue.joint`, are each photo's own in ``images``)."""
    from whale.core.arrays import IdGroups
    from whale.ranking import top_id_scores

    names, idx, vals = top_id_scores(scores.astype(np.float32), individuals, k=min(int(top), len(set(individuals))))
    cols = IdGroups.of(individuals).best_columns(scores if images is None else images, idx)
    return names[idx], cols, vals.astype(np.float32)
