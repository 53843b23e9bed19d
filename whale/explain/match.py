"""One query against a run's gallery: its ranked ids, each id's best gallery image, new_whale's place.

The same rules as a submission: per-id maximum of the head's scores (:mod:`whale.ranking`),
``new_whale`` inserted at the first rank whose score is below the threshold.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale import NEW_WHALE
from whale.core.errors import DataError


@dataclass(frozen=True)
class Match:
    """One ranked id: ``rank`` (1-based, among known ids), ``whale_id``, ``score`` (its best image's),
    the best gallery image's ``name``, ``path`` and ``box``."""

    rank: int
    whale_id: str
    score: float
    name: str
    path: Path
    box: tuple | None


def rank_query(rs, known, f_known: np.ndarray, query_path, query_box, top: int, threshold: float,
               open_label: str = NEW_WHALE):
    """Rank the known ids for one query image.

    Args:
        rs: :class:`whale.inference.runs.RunScorer` of the run.
        known: :class:`whale.data.ImageSet` of the gallery (known ids); ``f_known`` its
            features ``[n, d]`` float32.
        query_path, query_box: the query image and its box (None: whole image).
        top: ids to return. threshold: the new_whale threshold.
        open_label: the competition's open-set label (``new_whale``, ``new_individual``).

    Returns:
        ``(matches, labels)``: ``top`` :class:`Match` es by descending score, and the five
        submission labels (``new_whale`` included where the threshold puts it).
    """
    from whale.ranking import predict_top5
    from whale.ranking.topids import IdGroups, check_scores, top_k_columns

    scores = rs.matrix(rs.features([query_path], [query_box]), f_known).astype(np.float32)  # [1, n]
    scores, gallery_ids = check_scores(scores, known.ids)
    groups = IdGroups.of(gallery_ids, open_label)
    idx, vals = top_k_columns(groups.max(scores), top)
    matches = []
    for r, (i, v, best) in enumerate(zip(idx[0], vals[0], groups.best_columns(scores, idx)[0]), start=1):
        matches.append(Match(r, str(groups.names[i]), float(v), known.names[best], known.paths[best],
                             known.boxes[best]))
    return matches, predict_top5(scores, known.ids, threshold, open_label=open_label)[0]


def new_whale_rank(labels, open_label: str = NEW_WHALE) -> int | None:
    """1-based position of ``open_label`` (``new_whale``) in a submission's labels, or None."""
    return labels.index(open_label) + 1 if open_label in labels else None


def run_threshold(run_dir, open_label: str = NEW_WHALE) -> tuple[float, str]:
    """The run's new_whale threshold and where it came from.

    Read, not tuned: ``scores/threshold.json``, which scoring writes beside ``val.npz`` with the threshold
    tuned on it (:func:`whale.inference.runs.store_val_threshold`, :mod:`whale.ranking.stored`). Without
    validation scores: the run's configured ``threshold``, else 0.5.

    Backward compatibility only: a run scored before ``threshold.json`` existed (a ``val.npz`` with
    ``query_ids`` but no ``threshold.json``) has its threshold tuned on ``val.npz`` here, as before.

    Raises:
        DataError: naming ``threshold.json`` when it is malformed, was tuned for another open-set label,
            or for other scores than ``val.npz`` now holds (score the run again: ``run_fold.py --score-only``).
    """
    from whale.config import load_config
    from whale.core.files import file_hash
    from whale.inference.scorefile import load_score_file
    from whale.ranking import tune_threshold
    from whale.ranking.stored import THRESHOLD_FILE, read_threshold

    val = Path(run_dir) / "scores" / "val.npz"
    stored_path = val.with_name(THRESHOLD_FILE)
    if val.is_file() and stored_path.exists():
        stored = read_threshold(stored_path)
        if stored.open_label != open_label:
            raise DataError(f"{stored_path}: the stored threshold was tuned for open-set label "
                            f"{stored.open_label!r}, but {open_label!r} was asked for")
        if stored.scores_hash is not None and stored.scores_hash != file_hash(val):
            raise DataError(f"{stored_path}: the stored threshold was tuned on other scores than {val} now holds; "
                            f"score the run again (run_fold.py --score-only) to store its threshold anew")
        shown = "" if stored.map5 is None else f", validation MAP@5 {stored.map5:.3f}"
        return stored.threshold, f"tuned on {val}{shown}, stored in {stored_path}"
    if val.is_file():
        sf = load_score_file(val)
        if sf.query_ids is not None:  # an older run's scores: no stored threshold beside them
            t, m, _ = tune_threshold(sf.scores.astype(np.float32), sf.gallery_ids, sf.query_ids,
                                     open_label=open_label)
            return float(t), f"tuned on {val} (validation MAP@5 {m:.3f}; the run stores no {THRESHOLD_FILE})"
    cfg = load_config(Path(run_dir) / "config.yaml")
    if cfg.threshold is not None:
        return float(cfg.threshold), "the run's config"
    return 0.5, "default 0.5 (the run has no validation scores and no configured threshold)"
