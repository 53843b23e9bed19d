"""Combining runs: score files aligned by image name and averaged with weights.

Runs may store their queries and gallery in any order; :func:`average_score_files` aligns
them by *name* and averages with weights, one run in memory at a time, accumulating in
float32. :func:`validation_groups` combines validation files: files with the *same set* of
queries (several models scoring the same fold) are averaged like the test files; files with
*disjoint* query sets (the folds of one model) stay separate groups whose queries are
concatenated for every measure (a query is only ever scored against its own group's
gallery, so groups may have different galleries). Two files whose query sets overlap without
being equal are an error: there is no single right way to combine them.

Validation weights: within a group of files with equal query sets, the runs' weights are
renormalised to sum 1. Caveat: a fold's validation gallery holds only that fold's training
images while the test gallery holds all of them, so per-id maxima run a little higher on test;
a threshold (or calibration) learnt on validation carries that bias, which is why the share of
``new_whale`` it implies on test is printed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale.core.errors import ConfigError, DataError
from whale.inference.scorefile import ScoreFile, first_names, read_header, load_score_file

_ROW_BLOCK = 2048  # rows reordered and accumulated at a time: bounds the float32 temporaries


def normalise_weights(weights: Sequence[float] | None, n_runs: int) -> np.ndarray:
    """Weights of ``n_runs`` runs scaled to sum 1 (``None``: equal weights).

    Returns:
        ``[n_runs]`` float64.

    Raises:
        ConfigError: the count differs from ``n_runs``, a weight is negative or not finite, or
            they sum to zero.
    """
    if n_runs < 1:
        raise ConfigError("expected at least one run, got none")
    if weights is None:
        return np.full(n_runs, 1.0 / n_runs)
    w = np.asarray(list(weights), dtype=np.float64)
    if w.shape != (n_runs,):
        raise ConfigError(f"expected one weight per run ({n_runs} runs), got {w.size} weights: {w.tolist()}")
    if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ConfigError(f"weights must be finite, >= 0 and not all zero, got {w.tolist()}")
    return w / w.sum()


def _positions(names: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Index of each of ``wanted`` in ``names`` (both unique, same set) as ``[len(wanted)]`` int64."""
    order = np.argsort(names, kind="stable")
    return order[np.searchsorted(names, wanted, sorter=order)].astype(np.int64)


def _compare_sets(ref: np.ndarray, other: np.ndarray, what: str, ref_path: Path, path: Path) -> None:
    missing = np.setdiff1d(ref, other)
    if missing.size:
        raise DataError(f"{path}: {missing.size} {what} image(s) of {ref_path} are missing from this "
                        f"run: {first_names(missing)}; every run must score the same {what} images")
    extra = np.setdiff1d(other, ref)
    if extra.size:
        raise DataError(f"{path}: {extra.size} {what} image(s) are not in {ref_path}: "
                        f"{first_names(extra)}; every run must score the same {what} images")


def _alignment(paths: Sequence[Path], need_query_ids: bool) -> tuple[dict, list[tuple[np.ndarray, np.ndarray]]]:
    """The first file's header and, per file, its query and gallery rows in the first file's order (``(qi, gi)``,
    int64): the files checked to hold the same images with the same ids, from their headers alone."""
    metas = [read_header(p, need_query_ids) for p in paths]  # cheap: checks everything first
    ref, ref_path = metas[0], paths[0]
    plans = []
    for path, meta in zip(paths, metas):
        _compare_sets(ref["query"], meta["query"], "query", ref_path, path)
        _compare_sets(ref["gallery"], meta["gallery"], "gallery", ref_path, path)
        qi = _positions(meta["query"], ref["query"])
        gi = _positions(meta["gallery"], ref["gallery"])
        bad = np.flatnonzero(meta["gallery_ids"][gi] != ref["gallery_ids"])
        if bad.size:
            raise DataError(f"{path}: gallery ids differ from {ref_path} for images "
                            f"{first_names(ref['gallery'][bad])}")
        if "query_ids" in ref and "query_ids" in meta:
            bad = np.flatnonzero(meta["query_ids"][qi] != ref["query_ids"])
            if bad.size:
                raise DataError(f"{path}: query ids differ from {ref_path} for images "
                                f"{first_names(ref['query'][bad])}")
        plans.append((qi, gi))
    return ref, plans


def average_score_files(paths: Sequence, weights: Sequence[float] | None = None,
                        need_query_ids: bool = False, log=None, transforms: Sequence[Callable] | None = None,
                        finish: Callable | None = None) -> ScoreFile:
    """Weighted mean of several score files, aligned by query and gallery image names.

    All files must hold the same *sets* of query and gallery images (in any order) with the
    same gallery ids (and query ids, where present). The result is in the first file's order.
    Only one file's matrix is in memory at a time besides the float32 sum.

    Args:
        paths: score files (``.npz``), at least one.
        weights: one per file, any positive scale (normalised to sum 1); None = equal.
        need_query_ids: require ``query_ids`` (validation).
        log: optional ``print``-like callable for progress.
        transforms: one per file or None: each file's rows mapped (``[b, n_gallery]`` -> float32, same shape)
            before they are weighed in (calibrated fusion, :mod:`whale.ensemble.fusion`).
        finish: None, or the weighted sum's rows mapped once more at the end (in place of the sum).

    Returns:
        A :class:`ScoreFile` with float32 ``scores`` [n_query, n_gallery].

    Raises:
        DataError: a file is malformed, or an image is missing from a file (the message names
            the file and the first few images), or ids disagree between files.
        ConfigError: the weights do not match the files.
    """
    paths = [Path(p) for p in paths]
    w = normalise_weights(weights, len(paths))
    if transforms is not None and len(transforms) != len(paths):
        raise ValueError(f"expected one transform per score file ({len(paths)}), got {len(transforms)}")
    ref, plans = _alignment(paths, need_query_ids)
    ref_path = paths[0]
    nq, ng = ref["shape"]
    total = np.zeros((nq, ng), dtype=np.float32)
    for i, (path, weight, (qi, gi)) in enumerate(zip(paths, w, plans)):
        if log:
            log(f"  adding {path} (weight {weight:.4g})")
        scores = load_score_file(path, need_query_ids).scores
        same_q = np.array_equal(qi, np.arange(nq))
        same_g = np.array_equal(gi, np.arange(ng))
        for start in range(0, nq, _ROW_BLOCK):
            rows = slice(start, min(start + _ROW_BLOCK, nq))
            block = scores[rows] if same_q else scores[qi[rows]]
            if not same_g:
                block = block[:, gi]
            if transforms is not None:
                block = transforms[i](block)
            total[rows] += np.float32(weight) * block.astype(np.float32, copy=False)
        del scores
    if finish is not None:
        for start in range(0, nq, _ROW_BLOCK):
            total[start:start + _ROW_BLOCK] = finish(total[start:start + _ROW_BLOCK])
    return ScoreFile(ref_path, total, ref["query"], ref["gallery"], ref["gallery_ids"],
                     ref.get("query_ids"), tuple(paths))


def validation_groups(paths: Sequence, weights: Sequence[float] | None = None, log=None,
                      transforms: Sequence[Callable] | None = None, finish: Callable | None = None,
                      models: Sequence[str] | None = None) -> list[ScoreFile]:
    """Validation files combined: averaged within identical query sets, kept apart across disjoint ones.

    Files whose query *sets* are equal (several models validating the same fold) are averaged
    with their weights renormalised within the group (:func:`average_score_files`). Files
    with disjoint query sets (the folds of one model) form separate groups; callers
    concatenate the groups' queries, each scored against its own gallery.

    Args:
        paths: ``val.npz`` files (with ``query_ids``).
        weights: one per file (None = equal).
        transforms, finish: as :func:`average_score_files` (``transforms`` one per file of ``paths``).
        models: the runs' models (:func:`whale.ensemble.models.model_keys`): within a group each model weighs its
            whole weight, shared by its files there (:func:`~whale.ensemble.models.validation_weights`), and only
            the groups every model scores are kept when there are such groups (the others said to ``log``).

    Returns:
        One float32 :class:`ScoreFile` per group, in order of first appearance.

    Raises:
        DataError: two files share some but not all queries (names both and a few images), a
            file is malformed, or files of a group disagree (see :func:`average_score_files`).
    """
    from whale.ensemble.models import complete_groups, validation_weights

    paths = [Path(p) for p in paths]
    w = normalise_weights(weights, len(paths))
    keys, members = _query_groups(paths)
    kept = list(range(len(members)))
    if models is not None:
        complete = complete_groups(models, members)
        if complete and len(complete) < len(members) and log:
            log(f"  {len(members) - len(complete)} validation group(s) scored by only some of the models left out: "
                f"the fused runs are validated on the {len(complete)} every model scores")
        kept = complete or kept
    groups = []
    for g in kept:
        mem = members[g]
        if log:
            log(f"  validation group of {len(mem)} run(s), {len(keys[g])} queries")
        maps = None if transforms is None else [transforms[i] for i in mem]
        gw = w[mem] if models is None else validation_weights(models, w, mem)
        groups.append(average_score_files([paths[i] for i in mem], gw, need_query_ids=True, log=log,
                                          transforms=maps, finish=finish))
    return groups


def _query_groups(paths: Sequence[Path]) -> tuple[list[frozenset], list[list[int]]]:
    """``(query sets, members)``: the validation files grouped by equal query sets, in order of first appearance
    (``members``: each group's indices into ``paths``), from their headers.

    Raises:
        DataError: two files share some but not all queries.
    """
    keys: list[frozenset] = []
    members: list[list[int]] = []
    for i, p in enumerate(paths):
        q = frozenset(read_header(p, True)["query"].tolist())
        for key, mem in zip(keys, members):
            if key == q:
                mem.append(i)
                break
            shared = key & q
            if shared:
                raise DataError(
                    f"{p}: its validation queries overlap those of {paths[mem[0]]} without being the "
                    f"same set ({len(shared)} shared, e.g. {first_names(sorted(shared))}); expected equal sets "
                    "(models of the same fold: averaged) or disjoint sets (folds: concatenated)")
        else:
            keys.append(q)
            members.append([i])
    return keys, members


@dataclass(frozen=True)
class HeldValidation:
    """Validation files read once and held aligned, to be combined under many weights (a weight search).

    Attributes:
        paths: the ``val.npz`` files, in run order.
        members: per group of equal query sets, its indices into ``paths`` (:func:`validation_groups`' groups).
        refs: per group, its first file's header (the order every member is aligned to).
        matrices: per file, its ``[n_query, n_gallery]`` float32 scores in its group's order: one matrix per run
            in memory (float16 files are held as float32).
    """

    paths: tuple[Path, ...]
    members: tuple[tuple[int, ...], ...]
    refs: tuple[dict, ...]
    matrices: tuple[np.ndarray, ...]

    @classmethod
    def read(cls, paths: Sequence) -> "HeldValidation":
        """Read and align every file of ``paths`` once (checked as :func:`validation_groups` checks them)."""
        paths = tuple(Path(p) for p in paths)
        _, members = _query_groups(paths)
        refs, matrices = [], [None] * len(paths)
        for mem in members:
            ref, plans = _alignment([paths[i] for i in mem], True)
            refs.append(ref)
            for i, (qi, gi) in zip(mem, plans):
                scores = load_score_file(paths[i], True).scores
                matrices[i] = scores[qi][:, gi].astype(np.float32, copy=False)
                del scores
        return cls(paths, tuple(tuple(m) for m in members), tuple(refs), tuple(matrices))

    def groups(self, weights: Sequence[float] | None = None) -> list[ScoreFile]:
        """What ``validation_groups(self.paths, weights)`` returns (the same float32 sums), from memory."""
        w = normalise_weights(weights, len(self.paths))
        groups = []
        for mem, ref in zip(self.members, self.refs):
            wg = normalise_weights(w[list(mem)], len(mem))
            total = np.zeros(ref["shape"], dtype=np.float32)
            for i, weight in zip(mem, wg):
                total += np.float32(weight) * self.matrices[i]
            groups.append(ScoreFile(self.paths[mem[0]], total, ref["query"], ref["gallery"], ref["gallery_ids"],
                                    ref.get("query_ids"), tuple(self.paths[i] for i in mem)))
        return groups
