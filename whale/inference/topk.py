"""Streaming top-k: the best ids of every query by per-id maximum, without a full score matrix.

Streaming top-k (:func:`topk_stream`). Test-vs-gallery scores are reduced to a per-id maximum
block by block (``[query block, n_ids]`` float32 running maximum), then the top ``k_ids`` ids
per query are kept; no ``[n_query, n_gallery]`` matrix exists. ``prune=P`` re-ranks only each
query's top ``P`` gallery images by the proxy.
"""

from __future__ import annotations

import numpy as np

from whale import NEW_WHALE
from whale.core.arrays import as_features
from whale.mining.candidates import proxy_prep, top_columns
from whale.core.progress import progress_bar
from whale.ranking.topids import top_k_columns


def topk_stream(scorer, fq, fg, gallery_ids, k_ids: int = 20, block: int = 256,
                prune: int | None = None, similarity: str = "auto", progress: bool = True,
                open_label: str = NEW_WHALE):
    """Top ``k_ids`` ids per query by per-id maximum probability, streamed over the gallery.

    Args:
        scorer: :class:`whale.models.scorer.HeadScorer`.
        fq: ``[nq, d]`` float query features; fg: ``[ng, d]`` float gallery features.
        gallery_ids: ``[ng]`` str labels; ``open_label`` images (the competition's open-set label,
            ``new_whale`` by default) are dropped (never returned).
        k_ids: ids kept per query (``min(k_ids, n_ids)``).
        block: queries per step; memory ~ ``block * n_ids * 4`` bytes for the running maximum
            plus one scorer tile (and ``block * ng * 4`` for the proxy when pruning).
        prune: ``None`` = exact (every gallery image scored by the head); ``P`` = per query only
            its top ``P`` gallery images by the proxy are scored by the head.
        similarity: proxy for ``prune``; ``"auto"`` = ``"head"`` (rank-4 factorisation of the
            head's own logit, :meth:`HeadScorer.proxy_features`) for a hidden=0 contract head,
            else ``"cosine"``.

    Returns:
        ``(id_names, id_scores)``: ``[nq, k]`` str and ``[nq, k]`` float32, descending per row
        (ties by id name). With ``prune``, a query whose ``P`` images hold fewer than ``k``
        distinct ids is padded with other ids at probability 0.0 (the sigmoid's floor). Feed
        them to :func:`whale.ranking.newwhale.topk_to_predictions` (or row-wise to ``rank_from_id_scores``).
    """
    fq = as_features(fq, "fq", scorer.d)
    fg = as_features(fg, "fg", scorer.d)
    gids = np.asarray(list(gallery_ids), dtype=str)
    if gids.shape != (len(fg),):
        raise ValueError(f"gallery_ids: expected {len(fg)} labels (one per gallery row), received {gids.shape}")
    keep = gids != open_label
    fg, gids = fg[keep], gids[keep]
    names, codes = np.unique(gids, return_inverse=True)
    n_ids = names.size
    if n_ids == 0:
        raise ValueError(f"gallery_ids: expected at least one id other than {open_label}")
    kk = min(int(k_ids), n_ids)
    nq = len(fq)
    out_idx = np.empty((nq, kk), np.int64)
    out_val = np.empty((nq, kk), np.float32)
    # Gallery sorted by id so a block's per-id max is one reduceat over contiguous runs.
    order = np.argsort(codes, kind="stable")
    fg_s, codes_s = fg[order], codes[order]
    if prune is not None:
        if similarity == "auto":
            similarity = "head" if scorer.has_head_proxy else "cosine"
        prune = int(prune)
        if prune < 1:
            raise ValueError(f"prune: expected None or an integer >= 1, received {prune}")
        vg, bias = proxy_prep(fg_s, similarity, scorer, "g")
        vq, _ = proxy_prep(fq, similarity, scorer, "q")
    ta = scorer.tile[0]
    block = max(1, int(block))
    starts = range(0, nq, block)
    for q0 in progress_bar(starts, total=len(starts), desc="top-k", enabled=progress):
        q1 = min(nq, q0 + block)
        best = np.full((q1 - q0, n_ids), -np.inf, np.float32)
        if prune is None:
            gb = max(scorer.tile[1], 2048)
            xa = np.zeros((ta, scorer.d), np.float32)
            for r0 in range(q0, q1, ta):
                r1 = min(q1, r0 + ta)
                xa[: r1 - r0] = fq[r0:r1]
                xa[r1 - r0 :] = 0.0
                row = np.empty((ta, gb), np.float32)
                for c0 in range(0, len(fg_s), gb):
                    c1 = min(len(fg_s), c0 + gb)
                    scorer._block(xa, fg_s, c0, c1, row[:, : c1 - c0])
                    seg = codes_s[c0:c1]
                    heads = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]])
                    red = np.maximum.reduceat(row[: r1 - r0, : c1 - c0], heads, axis=1)
                    cols = seg[heads]
                    sub = best[r0 - q0 : r1 - q0]
                    sub[:, cols] = np.maximum(sub[:, cols], red)
                    scorer.pairs_computed += (r1 - r0) * (c1 - c0)
        else:
            sim = vq[q0:q1] @ vg.T
            if bias is not None:
                sim += bias
            top = top_columns(sim, prune)  # [b, P]
            top.sort(axis=1)  # ascending gallery index = grouped by id
            qrow = np.broadcast_to(np.arange(q0, q1)[:, None], top.shape).reshape(-1)
            s = scorer.pairs_index(fq, fg_s, qrow, top.reshape(-1)).reshape(top.shape)
            np.maximum.at(best, (qrow - q0, codes_s[top.reshape(-1)]), s.reshape(-1))
        best[~np.isfinite(best)] = -1.0  # ids never scored: below any probability
        idx, val = top_k_columns(best, kk)  # ties by id name, as every ranking of the toolkit
        out_idx[q0:q1] = idx
        out_val[q0:q1] = np.maximum(val, 0.0)
    return names[out_idx], out_val

