"""``match --method joint``: a batch of new photos against the catalogue by the joint identification.

``whale catalogue match CAT --method joint --photos NEW [--joint-config configs/joint.yaml] [--run RUN] [--outline]``
does for a catalogue what ``whale score --matcher joint`` does for a competition fold (:mod:`whale.identify`):

1. **every feature kind** of the joint config (its ``keypoints:`` list: RootSIFT, XFeat) builds its matcher on the
   catalogue's photos, as ``--method keypoints`` builds its one (features per kind in ``CAT/keypoints/``, its
   keypoint selection and its own check fitted on the catalogue and kept beside its features, read back by the next
   match until the catalogue changes: :func:`whale.catalogue.keypoints.kept_matcher`);
2. **one shortlist per new photo**: each kind's best ``shortlist.votes`` catalogue photos by LNBNN votes and, with
   ``--run``, the run's best ``shortlist.runs`` by its scores (its features indexed and scored as ``match --run``
   scores them: :mod:`whale.catalogue.match`), with ``--outline``, the learned trailing edge's best
   ``shortlist.runs`` by its cosine (its net trained on the catalogue: :mod:`whale.catalogue.outline`), merged
   (:func:`whale.identify.sources.shortlist_of`); **every shortlisted pair verified by every kind**
   (``KeypointMatcher.match``'s ``also``);
3. **one check** (:class:`whale.identify.check.JointCheck` over :func:`whale.identify.check.pair_table`'s rows)
   gives each pair P(same whale), aggregated to the individual (the config's ``aggregate``): a photo's candidates,
   best first, carry that probability, and a photo is possibly new when its best one's is below ``--threshold``
   (default 0.5, :class:`whale.catalogue.match.Flagging`).

**Where the check learns.** A catalogue has no validation queries: the check is fitted on the catalogue's own photos
as queries (up to :data:`whale.catalogue.calibration.MAX_QUERIES` of them), each left out of its own row as a new
photo of a catalogued whale would be matched (its own photo gets no vote, is never shortlisted nor verified, and
its row is what the catalogue without it gives: :func:`~whale.identify.check.pair_table`'s ``leave_out``), each pair
labelled same whale or not (a one-photo individual's photo gives negatives only). Three things there would tell the
check the answer, and are kept out of what it learns:

* **the photo count** of the candidate's individual (``log_photos`` of the competition's table): left out of its own
  row, the query's own individual is one photo short, and counted whole, a one-photo individual is never the same
  whale; either way the count names the label as it never does for a new photo (a catalogue of three photos per
  whale: every same-whale pair at two, every other at three). The catalogue's columns have no count.

* **the run** (``--run``): its scores of catalogue photos are of photos it may have trained on, so they are
  over-confident there; a check fitted on them would trust the run as it can never be trusted on a new photo. So
  the run **only proposes candidates for the new photos**: the check's columns are the feature kinds' alone, and the
  catalogue's shortlists it is fitted on come from the kinds' votes alone (a run that finds a catalogue photo's
  other photos because it learned them would teach the check that pairs with little keypoint evidence are often
  the same whale). A pair the run proposes is judged on what every kind verified of it. (The run's columns would
  be honest only on photos it never trained on, which the catalogue cannot tell: not done.)
* **each kind's own check** (``check.model: gbm``): fitted on the catalogue matched against itself, the very pairs
  here; its probabilities of them are cross-fitted by individual before the joint check sees them
  (:meth:`whale.keypoints.check.MatchCheck.out_of_fold`, the config's ``check.folds`` and ``check.seed``). The
  keypoint selection is cross-fitted already (:mod:`whale.keypoints.selection`).

The catalogue's pair table is kept in ``CAT/calibration/`` (:func:`whale.identify.check.save_table`, named as the
calibrations are: :func:`whale.catalogue.calibration.kept_file`) until a photo is added, accepted, moved or
removed; the check's trees are fitted from it at each match (the settings of ``check`` and ``aggregate`` change no
table). A catalogue with fewer than :data:`MIN_PAIRS` same-whale pairs (or other pairs) among its shortlists has
nothing to fit the check on and is **refused**, naming it: ``--method keypoints`` matches it with its own
calibration (a silent fallback would record another method's probabilities under this one's name).

**Groups** within the batch, as ``--method keypoints`` forms them: the first kind's match of the batch against
itself (each photo left out of its own row, the kind's check applied), read through that kind's calibration on the
catalogue (:func:`whale.catalogue.calibration.catalogue_calibration`, fitted on the same left-out scores as the
check), complete linkage at ``--threshold`` (:func:`whale.catalogue.match.groups_of`).

Beside the proposals: ``batches/<batch>/keypoints.yaml`` (the first kind's settings, with which the review page
draws the keypoint matches: :func:`whale.catalogue.keypoints.batch_config`) and ``batches/<batch>/joint.yaml``
(every kind's settings, the shortlist, the check).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from whale.catalogue import sql
from whale.catalogue.calibration import (catalogue_calibration, catalogue_key, drop_earlier, kept_file,
                                         left_out_queries)
from whale.catalogue.db import Catalogue
from whale.catalogue.ingest import image_path
from whale.catalogue.keypoints import (CONFIG_NAME as KEYPOINT_CONFIG, SCORE_THRESHOLD, best_individuals, kept_matcher,
                                       store_of)
from whale.catalogue.match import Flagging, batch_photos, check_batch, record_proposals
from whale.catalogue.proposals import Proposals
from whale.core.errors import ConfigError, DataError
from whale.identify.check import (FLOOR, JointCheck, KindEvidence, column_names, identification_scores, pair_table,
                                  pairs_of, read_table, save_table)
from whale.identify.config import JointConfig, load_joint_config
from whale.identify.sources import shortlist_of
from whale.keypoints.config import KeypointConfig

if TYPE_CHECKING:
    from whale.keypoints.matcher import KeypointMatcher
    from whale.keypoints.selectcache import SelectorCache

RUN = "joint"
"""What a joint batch's row and proposals record as the run that matched it."""
CONFIG_NAME = "joint.yaml"
"""The joint config kept beside a joint batch's proposals."""
OUTLINE_NAME = "outline.yaml"
"""The outline's settings kept beside a joint batch's proposals when ``--outline`` proposed candidates."""
DEFAULT_CONFIG = Path("configs") / "joint.yaml"
"""``--joint-config``'s default, relative to the folder the command runs in (the toolkit's)."""
MIN_PAIRS = 2
"""Same-whale pairs, and other pairs, among the catalogue's own shortlists below which no check is fitted."""


class Probabilities:
    """The joint check's P(same whale) read as it is: a :class:`whale.catalogue.match.Flagging`'s calibration that
    changes nothing (the check's probabilities are learned on this catalogue already)."""

    def transform(self, scores) -> np.ndarray:
        """``scores`` (any shape) as float32 in [0, 1]."""
        return np.clip(np.asarray(scores, np.float32), 0.0, 1.0)


def joint_config(path=None, overrides: dict | None = None) -> JointConfig:
    """The joint config of ``path`` (None: :data:`DEFAULT_CONFIG`) with ``--set`` ``overrides``.

    Raises:
        ConfigError: no such file (saying where the default is looked for), a bad config (file and key named), or
            a competition fold's ``check.validation``/``check.columns`` (a catalogue has no validation to thin).
    """
    path = Path(DEFAULT_CONFIG if path is None else path)
    if not path.is_file():
        raise ConfigError(f"{path}: no joint config there: --method joint reads its feature kinds and its check "
                          f"from --joint-config FILE (default {DEFAULT_CONFIG}, relative to the folder the command "
                          "runs in: the toolkit's)")
    cfg = load_joint_config(path, overrides)
    if cfg.validation != "original" or cfg.columns != "pairs":
        raise ConfigError(f"{path}: check.validation: {cfg.validation} and check.columns: {cfg.columns} are a "
                          "competition fold's (whale score --matcher joint); a catalogue's check is fitted on its own "
                          "photos, with neither a validation to thin nor a photo count (docs/catalogue.md): leave "
                          "them at original and pairs")
    return cfg


def batch_config_hash(cat_root, batch: str) -> str | None:
    """12 hex digits of the joint config kept beside a joint batch (None when it has none)."""
    path = Path(cat_root) / "batches" / batch / CONFIG_NAME
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.is_file() else None


@dataclass
class Kind:
    """One feature kind on the catalogue: its ``name`` and settings ``cfg``, the catalogue's photos' features
    ``gallery`` (in the catalogue's order, by hash), the batch's ``queries``, and its ``matcher`` of the catalogue;
    ``keys``, ``query_keys``: the catalogue's and the batch's photos' store keys (content hash and box), by which
    the matcher's selector knows them, and ``cache`` where it keeps its selector and check."""

    name: str
    cfg: KeypointConfig
    gallery: list
    queries: list
    matcher: KeypointMatcher
    keys: list = field(default_factory=list)
    query_keys: list | None = None
    cache: SelectorCache | None = None


def columns(cfg: JointConfig) -> list[str]:
    """The catalogue's pair table's columns: every feature kind's (no run, no photo count: module docstring)."""
    return column_names([name for name, _ in cfg.kinds], [], photos=False)


def fit_settings(cfg: JointConfig) -> str:
    """What the catalogue's pair table depends on besides the catalogue (each kind's settings, the votes'
    shortlist, the cross-fitting of the kinds' checks, the columns); neither the run nor the check's trees nor the
    aggregation."""
    return "joint " + json.dumps({"kinds": [(n, k.config_hash()) for n, k in cfg.kinds], "votes": cfg.votes,
                                  "folds": cfg.folds, "seed": cfg.seed, "columns": columns(cfg)}, sort_keys=True)


def left_out_table(kinds: list[Kind], rows: np.ndarray, individuals: np.ndarray, cfg: JointConfig,
                   progress: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The catalogue's own photos ``rows`` ``[m]`` as queries, each left out of its own row (module docstring):
    ``(pairs [p, 2] int64, table [p, f] float32, first [m, n] float32)``: the shortlisted (catalogue photo, other
    catalogue photo) pairs, both as catalogue rows, their :func:`~whale.identify.check.pair_table` rows (the kinds'
    columns; the kinds' checks cross-fitted by individual), and the first kind's scores of every photo (its
    calibration's, for the batch's groups)."""
    rows = np.asarray(rows, np.int64)
    asked = individuals[rows]
    votes = [k.matcher.votes([k.gallery[i] for i in rows], progress, keys=_keys(k, rows), leave_out=rows,
                             strict=True) for k in kinds]
    shortlist = shortlist_of(votes, [], cfg.votes, 0)  # the kinds' votes alone: no run (module docstring)
    evidence = []
    for k in kinds:
        result = k.matcher.match([k.gallery[i] for i in rows], progress=progress, leave_out=rows,
                                 keys=_keys(k, rows), also=shortlist, strict=True)
        scores = result.scores
        check = k.matcher.check
        if check is not None and check.active:
            q, g = result.pairs.index[:, 0], result.pairs.index[:, 1]
            scores = check.out_of_fold(scores, result.pairs, asked[q] == individuals[g], asked[q], cfg.folds,
                                       cfg.seed)
        evidence.append(KindEvidence(scores, result.votes, result.inliers))
    pairs = pairs_of(shortlist)
    table = pair_table(pairs, evidence, [], individuals, leave_out=rows, photos=False)
    return np.stack([rows[pairs[:, 0]], pairs[:, 1]], axis=1).reshape(-1, 2), table, evidence[0].scores


def match_joint(cat: Catalogue, cfg: JointConfig, photos_dir, batch: str | None = None, top: int = 10,
                threshold: float | None = None, boxes_csv=None, rematch: bool = False, run=None,
                progress: bool = True, log=None, outline=None) -> tuple[Proposals, Path]:
    """Propose individuals for every photo of ``photos_dir`` by the joint identification (module docstring).

    ``run``: a :class:`whale.catalogue.features.RunFeatures` whose best catalogue photos join each new photo's
    shortlist (None: the feature kinds' alone); ``outline``: the learned outline's settings
    (:class:`whale.outline.net.OutlineConfig`), whose best catalogue photos join it too
    (:mod:`whale.catalogue.outline`; None: no outline); ``threshold``: the P(same whale) below which a photo is
    possibly new (None: :data:`whale.catalogue.match.DEFAULT_PROBABILITY`); ``log``: told how the check was had.

    Holds the catalogue's write lock for the whole match and records the run's new features (with ``run``) and the
    proposals in one transaction, as :func:`whale.catalogue.match.match_batch` does; refuses an existing batch unless
    ``rematch``.

    Raises:
        DataError: a bad or existing batch, a photo that is not an image, a catalogue too small to fit the check
            (naming it).
    """
    import yaml

    from whale.core.files import write_text_atomic

    say = log or (lambda line: None)
    photos_dir = Path(photos_dir)
    photos, boxes = batch_photos(cat, photos_dir, batch, rematch, top, boxes_csv)
    with cat.writing():
        batch = check_batch(cat, photos_dir, batch, rematch)
        rows = [(h, ind, f, box) for h, ind, f, _, box in sql.photos(cat.conn)]
        hashes = [r[0] for r in rows]
        individuals = np.array([r[1] for r in rows], dtype=str)
        _check_size(cat, individuals)
        paths = [image_path(cat, r[2]) for r in rows]
        cat_boxes, photo_boxes = [_box(r[3]) for r in rows], [boxes.get(p.name) for p in photos]
        outlined = None
        if outline is not None:  # a proposer as the run is (whale.catalogue.outline); refused before any keypoint
            from whale.catalogue.outline import outline_scores

            outlined = outline_scores(cat.root, outline, paths, hashes, cat_boxes, individuals, photos, photo_boxes,
                                      progress, say)
        kinds = [_kind(cat, name, kcfg, paths, hashes, cat_boxes, photos, photo_boxes, individuals, progress, say)
                 for name, kcfg in cfg.kinds]
        check, first_left_out = _fitted_check(cat, kinds, hashes, individuals, cfg, progress, say)
        pending = None
        if run is not None:
            from whale.catalogue.features import prepare_index

            pending = prepare_index(cat, run)  # the catalogue's new features: recorded with the proposals
            fq = run.features(photos, photo_boxes)
        with cat.transaction() as db:
            trained = []
            if pending is not None:
                pending.record(db)
                trained.append(_run_scores(cat, run, fq, hashes))
            if outlined is not None:
                trained.append(outlined)
            names, cols, vals = _propose(kinds, trained, check, individuals, cfg, top, progress)
            for k in kinds:
                k.cache.keep(k.matcher)  # with the batch's photos it scored
            flag = Flagging.of(Probabilities(), threshold, 0.0,
                               f"the joint check ({check.pairs[0]:,} same-whale and {check.pairs[1]:,} other pairs "
                               "of the catalogue's own photos, each left out of its own row)")
            say(flag.how)
            groups = _groups(cat, kinds, cfg, hashes, individuals, threshold, first_left_out, say)
            folder = cat.root / "batches" / batch
            write_text_atomic(folder / KEYPOINT_CONFIG, yaml.safe_dump(kinds[0].cfg.to_dict(), sort_keys=False))
            write_text_atomic(folder / CONFIG_NAME, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
            if outline is not None:
                write_text_atomic(folder / OUTLINE_NAME, yaml.safe_dump(outline.to_dict(), sort_keys=False))
            return record_proposals(cat, db, batch, photos_dir, photos, RUN, _fingerprint(cfg, run, outline), flag,
                                    names, cols, vals, groups, paths, hashes)


def _kind(cat, name: str, kcfg: KeypointConfig, paths, hashes, cat_boxes, photos, photo_boxes, individuals,
          progress: bool, say) -> Kind:
    """The feature kind ``name`` on the catalogue: its features (extracted where the store lacks them) and its
    matcher (:func:`whale.catalogue.keypoints.kept_matcher`: its selector and check, fitted on the catalogue's
    photos each left out strictly, read back when this catalogue kept them)."""
    store = store_of(cat.root, kcfg)
    gallery = store.features(paths, progress=progress, digests=hashes, boxes=cat_boxes, mapped=True)  # not held
    keys = list(store.keys)
    queries = store.features(photos, progress=progress, boxes=photo_boxes)
    query_keys = list(store.keys)
    matcher, cache = kept_matcher(store, kcfg, gallery, keys, individuals, progress,
                                  lambda line: say(line.replace("keypoints:", f"joint {name}:", 1)), strict=True)
    return Kind(name, kcfg, gallery, queries, matcher, keys, query_keys, cache)


def _keys(kind: Kind, rows: np.ndarray) -> list:
    """The store keys of the catalogue's photos ``rows``."""
    return [kind.keys[i] for i in rows]


def _box(text: str | None):
    return None if not text else tuple(float(v) for v in text.split(","))


def _check_size(cat: Catalogue, individuals: np.ndarray) -> None:
    """Refuse, before any feature is extracted, a catalogue whose shortlists cannot hold a same-whale pair."""
    if not len(individuals):
        raise DataError(f"{cat.root}: the catalogue holds no photos (add some with `whale catalogue add`)")
    counts = np.unique(individuals, return_counts=True)[1]
    if counts.max() < 2 or len(counts) < 2:
        raise DataError(f"{cat.root}: --method joint fits its check on the catalogue's own photos and needs two "
                        f"photos of one whale and photos of two whales ({len(individuals)} photos of {len(counts)} "
                        "individuals); --method keypoints matches this catalogue")


def _fitted_check(cat, kinds, hashes, individuals, cfg, progress, say) -> tuple[JointCheck, dict]:
    """The joint check fitted on the catalogue's pair table (kept in ``CAT/calibration/``, else built now by
    :func:`left_out_table` and kept), and ``{"rows", "scores"}``: the first kind's left-out scores when they were
    computed now (empty when the table was read back)."""
    settings = fit_settings(cfg)
    path = kept_file(cat.root, settings, hashes, individuals, ".npz")
    key = catalogue_key(settings, hashes, individuals)
    rows = left_out_queries(len(individuals))
    table = read_table(path, key)
    if table is not None and table.columns != columns(cfg):
        table = None  # kept by another version: made again
    first: dict = {}
    if table is None:
        say(f"joint check: {len(rows)} of the catalogue's {len(individuals)} photos matched against it by "
            f"{', '.join(k.name for k in kinds)}, each left out of its own row")
        pairs, rows_table, first["scores"] = left_out_table(kinds, rows, individuals, cfg, progress)
        first["rows"] = rows
        path.parent.mkdir(exist_ok=True)
        save_table(path, pairs, rows_table, np.zeros((0, 0), np.float32), columns(cfg), key)
        drop_earlier(path)
        how = "fitted now"
    else:
        pairs, rows_table = table.pairs, table.rows
        how = f"its pair table read back from {path.name}"
    same = individuals[pairs[:, 0]] == individuals[pairs[:, 1]]
    positives, negatives = int(same.sum()), int((~same).sum())
    if positives < MIN_PAIRS or negatives < MIN_PAIRS:
        raise DataError(f"{cat.root}: the catalogue's own photos, each matched against it, shortlist {positives} "
                        f"same-whale and {negatives} other pairs: the joint check needs at least {MIN_PAIRS} of each; "
                        "--method keypoints matches this catalogue")
    check = JointCheck.of(cfg).fit(rows_table, same, pairs[:, 0], progress, cross_fit=False)
    say(f"joint check: {positives:,} same-whale and {negatives:,} other pairs of the catalogue's photos ({how})")
    return check, first


def _run_scores(cat, run, fq: np.ndarray, hashes: list[str]) -> np.ndarray:
    """``[n_photos, n_catalogue] float32``: the run's scores of the batch against the catalogue, in its order."""
    from whale.catalogue.features import load_gallery

    gallery = load_gallery(cat, run.fingerprint)
    if list(gallery.hashes) != list(hashes):
        raise DataError(f"{cat.root}: the run's features are not of the catalogue's photos (changed during the match?)"
                        "; run the match again")
    return np.asarray(run.scorer.matrix(fq, gallery.features), np.float32)


def _propose(kinds: list[Kind], trained: list[np.ndarray], check: JointCheck, individuals: np.ndarray,
             cfg: JointConfig, top: int, progress: bool):
    """``(names, cols, vals)`` ``[n_photos, k]`` of :func:`whale.catalogue.keypoints.best_individuals`: the
    individuals by the check's aggregated P(same whale), each with its photo of the best pair."""
    votes = [k.matcher.votes(k.queries, progress, keys=k.query_keys) for k in kinds]
    shortlist = shortlist_of(votes, trained, cfg.votes, cfg.runs)
    evidence = []
    for k in kinds:
        result = k.matcher.match(k.queries, progress=progress, also=shortlist, keys=k.query_keys)
        evidence.append(KindEvidence(result.scores, result.votes, result.inliers))
    pairs = pairs_of(shortlist)
    p = check.predict(pair_table(pairs, evidence, [], individuals, photos=False))
    fallback = np.max([e.scores for e in evidence], axis=0)  # in [0, 1): the order of what no source shortlisted
    scores = identification_scores(pairs, p, individuals, fallback, cfg.aggregate)
    images = (fallback.astype(np.float64) * FLOOR).astype(np.float32)  # each photo's own P, to pick the image
    images[pairs[:, 0], pairs[:, 1]] = np.clip(p, 2 * FLOOR, 1).astype(np.float32)
    return best_individuals(scores, individuals, top, images)


def _groups(cat, kinds: list[Kind], cfg: JointConfig, hashes, individuals, threshold, first_left_out: dict, say):
    """Per batch photo its group (module docstring): the first kind's match of the batch against itself, read
    through that kind's calibration on the catalogue's left-out scores (those of the pair table's match; matched
    again only when the table was kept and the calibration was not)."""
    from whale.keypoints import KeypointMatcher

    kind = kinds[0]

    def left_out(rows):
        if "scores" not in first_left_out or not np.array_equal(rows, first_left_out["rows"]):
            first_left_out["rows"] = rows
            first_left_out["scores"] = left_out_table(kinds, rows, individuals, cfg)[2]
        return first_left_out["scores"]

    cal, how = catalogue_calibration(cat.root, fit_settings(cfg) + f" groups {kind.name}", hashes, individuals,
                                     left_out)
    flag = Flagging.of(cal, threshold, SCORE_THRESHOLD, how)
    say(f"groups within the batch by {kind.name}: {flag.how}")
    n = len(kind.queries)
    if n < 2:
        return [None] * n
    within = KeypointMatcher(kind.cfg, kind.queries, selector=kind.matcher.selector, check=kind.matcher.check,
                             keys=kind.query_keys)
    scores = within.match(within.gallery, progress=False, leave_out=np.arange(n), selected=True, strict=True).scores
    return flag.groups(scores)


def _fingerprint(cfg: JointConfig, run, outline=None) -> str:
    """12 hex digits naming the joint settings, the run and the outline's settings
    (:func:`whale.identify.score.config_hash`)."""
    from whale.identify.score import config_hash

    sources = [] if run is None else [{"run": str(Path(run.run_dir).resolve()), "fingerprint": run.fingerprint}]
    return config_hash(cfg, sources + ([] if outline is None else [{"outline": outline.config_hash()}]))
