"""Ranking: from scores to five labels per query, and every rule that places ``new_whale``.

:mod:`whale.ranking.topids` (per-id maximum through :class:`whale.core.arrays.IdGroups`, each query's best ids), :mod:`whale.ranking.newwhale`
(the paper's threshold rule, the one threshold tuner, test-share rules) and
:mod:`whale.ranking.calibrate` (the calibrated rule and its cross-validation);
:mod:`whale.ranking.pairprob` (:class:`~whale.ranking.pairprob.PairCalibration`: a pair score as P(same individual)).
"""
from whale.core.arrays import IdGroups
from whale.ranking.newwhale import (
    map_by_threshold,
    map_for_thresholds,
    new_whale_share,
    new_whale_shares,
    predict_top5,
    rank_from_id_scores,
    share_first,
    threshold_for_fraction,
    threshold_grid,
    topk_to_predictions,
    tune,
    tune_threshold,
)
from whale.ranking.topids import TopIds, concat_top_ids, per_id_scores, top_id_scores, top_ids

__all__ = [
    "IdGroups",
    "TopIds",
    "concat_top_ids",
    "map_by_threshold",
    "map_for_thresholds",
    "new_whale_share",
    "new_whale_shares",
    "per_id_scores",
    "predict_top5",
    "rank_from_id_scores",
    "share_first",
    "threshold_for_fraction",
    "threshold_grid",
    "top_id_scores",
    "top_ids",
    "topk_to_predictions",
    "tune",
    "tune_threshold",
]
