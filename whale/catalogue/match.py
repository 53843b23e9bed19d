"""``match``: a folder of new photos scored against the whole catalogue; top individuals per photo.

Per photo, the candidates are the catalogue's individuals ranked by their best image's score (the
per-id maximum of :mod:`whale.ranking`), each with that best image and the calibrated probability that it is
the same whale (:mod:`whale.catalogue.calibration`: the catalogue's own photos matched against it, each left
out of its own row); a photo whose best candidate's probability is below the threshold (``--threshold``,
default :data:`DEFAULT_PROBABILITY`) is flagged ``possibly_new`` (:class:`Flagging`). Photos of the batch whose
probability of one whale reaches the threshold are grouped by complete linkage (:func:`groups_of`: every
two photos of a group reach it, so no chain of weak links joins different whales): the same unknown animal
photographed twice. A catalogue that cannot be calibrated (no two photos of one whale) flags by the run's
``new_whale`` score threshold (:func:`whale.explain.match.run_threshold`), as before calibration.

How the gallery is searched (``method``), always through the run's own scorer
(:func:`whale.objectives.make_scorer`):

* ``exact``: every catalogue image scored (:meth:`RunScorer.matrix`, blocks of queries): one matrix
  product for an embedding objective, every pair through the head for the paper's model.
* ``prune`` (paper's head): the head's proxy picks each photo's top ``pool`` images, only those are
  re-scored exactly by the head (:func:`whale.inference.topk.topk_stream`, as mining does).
* ``faiss`` (embedding objectives): a FAISS HNSW index over the embeddings picks each photo's top
  ``pool`` images, re-scored exactly (``pip install faiss-cpu``; optional). The index is kept in
  ``CATALOGUE/index/`` and reused by later matches while the catalogue's embeddings are unchanged
  (its file is named by their digest; a stale one is deleted when the next is written).
* ``auto``: ``exact``, except ``prune`` for the head from :data:`AUTO_FROM` catalogue images; FAISS
  only when asked: its first match builds the index, slower than the exact product at every size
  measured (up to 100,000 images); later matches load it (``benchmarks/seeds/catalogue.py``,
  docs/catalogue.md).
"""
from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale.catalogue import sql
from whale.catalogue.db import Catalogue, file_hash
from whale.catalogue.features import RunFeatures, load_gallery, prepare_index
from whale.catalogue.ingest import check_photo
from whale.catalogue.proposals import Candidate, PhotoProposal, Proposals, proposals_file, write_proposals
from whale.core.errors import DataError
from whale.ranking.topids import IdGroups, top_k_columns

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
METHODS = ("auto", "exact", "prune", "faiss")
AUTO_FROM = 50_000
"""Catalogue size (images) from which ``auto`` takes ``prune`` for the paper's head (docs/catalogue.md)."""
DEFAULT_POOL = 300
"""Catalogue images re-scored exactly per photo by ``prune`` / ``faiss``."""
INDEX_DIR = "index"
"""The catalogue's folder for ``faiss``'s stored index."""
DEFAULT_PROBABILITY = 0.5
"""A photo is possibly new when its best candidate's probability of the same whale is below this."""


@dataclass(frozen=True)
class Flagging:
    """How a match flags "possibly new" and groups a batch: by the calibrated probability of the same whale
    (``calibration``), or, for a catalogue without one, by the raw score (``scale`` ``score``).

    Attributes:
        calibration: the catalogue's :class:`whale.ranking.pairprob.PairCalibration`, or None.
        threshold: a probability (or, without a calibration, a score).
        how: one line saying which and why.
    """

    calibration: object
    threshold: float
    how: str

    @classmethod
    def of(cls, calibration, threshold: float | None, fallback: float, how: str) -> "Flagging":
        """``threshold`` (a probability; None: :data:`DEFAULT_PROBABILITY`) read with ``calibration``; without one
        the score threshold ``fallback``. ``how``: how the calibration was had (or why there is none)."""
        if calibration is None:
            return cls(None, float(fallback), f"{how}; possibly new below the score {float(fallback):g}" + (
                f" (--threshold {threshold:g} is a probability: not used)" if threshold is not None else ""))
        t = DEFAULT_PROBABILITY if threshold is None else float(threshold)
        return cls(calibration, t, f"possibly new below P(same whale) {t:g}, by {how}")

    @property
    def scale(self) -> str:
        """``probability``, or ``score`` without a calibration."""
        return "score" if self.calibration is None else "probability"

    def probabilities(self, scores: np.ndarray) -> np.ndarray | None:
        """``scores`` (any shape) as float32 probabilities of the same whale; None without a calibration."""
        return None if self.calibration is None else self.calibration.transform(scores)

    def groups(self, pair_scores: np.ndarray) -> list[int | None]:
        """:func:`groups_of` the batch's ``[n, n]`` scores against itself, read as probabilities when calibrated."""
        p = self.probabilities(pair_scores)
        return groups_of(pair_scores if p is None else p, self.threshold)


def list_photos(folder) -> list[Path]:
    """Photo files directly in ``folder`` (by suffix, case-insensitive), sorted by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: no such folder of photos")
    photos = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in PHOTO_SUFFIXES)
    if not photos:
        raise DataError(f"{folder}: no photos ({', '.join(PHOTO_SUFFIXES)}) in this folder")
    return photos


def _exact(rs, fq, fg, codes, k, block=64):
    """Per query the ``k`` best ids by per-id maximum and each one's best column: ``[nq, k]`` int64 x2, float32."""
    groups = IdGroups.of(codes, open_label=None)
    k = min(k, groups.names.size)
    nq = fq.shape[2]
    ids, cols, vals = (np.empty((nq, k), np.int64), np.empty((nq, k), np.int64), np.empty((nq, k), np.float32))
    for q0 in range(0, nq, block):
        s = rs.matrix(fq[:, :, q0:q0 + block], fg).astype(np.float32)  # [b, ng]
        top, best = top_k_columns(groups.max(s), k)
        ids[q0:q0 + len(s)], vals[q0:q0 + len(s)] = groups.names[top], best
        cols[q0:q0 + len(s)] = groups.best_columns(s, top)
    return ids, cols, vals


def _best_per_id(q_idx, g_idx, scores, codes, nq, k):
    """From scored (query, gallery column) pairs, per query the ``k`` best ids and their best columns."""
    ids = np.full((nq, k), -1, np.int64)
    cols = np.full((nq, k), -1, np.int64)
    vals = np.zeros((nq, k), np.float32)
    for q in range(nq):
        sel = np.flatnonzero(q_idx == q)
        o = sel[np.lexsort((g_idx[sel], -scores[sel].astype(np.float64)))]
        _, first = np.unique(codes[g_idx[o]], return_index=True)
        pick = o[np.sort(first)[:k]]
        n = len(pick)
        ids[q, :n], cols[q, :n], vals[q, :n] = codes[g_idx[pick]], g_idx[pick], scores[pick]
    return ids, cols, vals


def faiss_candidates(eq: np.ndarray, eg: np.ndarray, pool: int, metric: str = "ip", m: int = 32,
                     ef_search: int = 128, index_dir=None):
    """``[nq, pool]`` int64 gallery rows nearest to each query embedding by a FAISS HNSW index.

    ``eq`` ``[nq, E]``, ``eg`` ``[ng, E]`` float32; ``metric`` ``"ip"`` (unit embeddings, cosine)
    or ``"l2"``. With ``index_dir`` the index is read from there when one of these embeddings
    (same bytes, metric and ``m``) was stored, else built and stored (atomically; other stored
    indexes deleted). Raises :class:`whale.core.errors.DataError` when faiss is not installed.
    """
    try:
        import faiss
    except ImportError:
        raise DataError("method 'faiss' needs the faiss-cpu package (pip install faiss-cpu); "
                        "--method exact needs nothing") from None
    eg = np.ascontiguousarray(eg, np.float32)
    path = None
    if index_dir is not None:
        digest = hashlib.sha1(f"{metric} {m} {eg.shape}".encode())
        digest.update(eg)  # the contiguous array's buffer, not a copy of its bytes
        key = digest.hexdigest()[:20]
        path = Path(index_dir) / f"faiss-hnsw-{key}.index"
    index = None
    if path is not None and path.is_file():
        try:
            index = faiss.read_index(str(path))
        except RuntimeError:  # unreadable (a damaged disk, another faiss): a cache, so rebuilt below
            index = None
    if index is None:
        kind = faiss.METRIC_INNER_PRODUCT if metric == "ip" else faiss.METRIC_L2
        index = faiss.IndexHNSWFlat(eg.shape[1], m, kind)
        index.add(eg)
        if path is not None:
            _store_index(faiss, index, path)
    index.hnsw.efSearch = max(ef_search, pool)
    _, found = index.search(np.ascontiguousarray(eq, np.float32), min(pool, len(eg)))
    return found.astype(np.int64)


STRAY_AGE_S = 3600.0
"""A hidden partial index older than this is a killed match's leftover, deleted by the next store (a younger
one may be another match writing now)."""


def _store_index(faiss, index, path: Path) -> None:
    """Write ``index`` to ``path`` atomically, then delete the folder's other stored indexes and the partial
    writes that killed matches left (hidden, older than :data:`STRAY_AGE_S`)."""
    from whale.core.files import atomic_write, partial_writes

    atomic_write(path, lambda tmp: faiss.write_index(index, str(tmp)))
    for old in path.parent.glob("faiss-hnsw-*.index"):
        if old != path:
            old.unlink(missing_ok=True)
    for stray in partial_writes(path.parent, "faiss-hnsw-*.index"):
        try:
            if time.time() - stray.stat().st_mtime > STRAY_AGE_S:
                stray.unlink()
        except FileNotFoundError:  # another match cleaned it first
            pass


def propose(rs, fq: np.ndarray, fg: np.ndarray, gallery_ids, top: int, method: str = "auto",
            pool: int = DEFAULT_POOL, index_dir=None):
    """Each query's ``top`` individuals by per-id maximum score, with the best gallery image of each.

    Args:
        rs: :class:`whale.inference.runs.RunScorer` of the run.
        fq: ``[G, V, nq, d]`` float32 query features; fg: ``[G, V, ng, d]`` gallery features.
        gallery_ids: ``[ng]`` str individuals.
        top: individuals per query. method: one of :data:`METHODS`. pool: images re-scored
            exactly per query by ``prune`` / ``faiss``. index_dir: where ``faiss`` keeps its index
            between calls (None: built each call).

    Returns:
        ``(names [nq, k] str, best [nq, k] int64 gallery columns, scores [nq, k] float32)``,
        descending per row; ``k = min(top, n individuals)``.
    """
    if method not in METHODS:
        raise DataError(f"method: expected one of {', '.join(METHODS)}, received {method!r}")
    names, codes = np.unique(np.asarray(gallery_ids, dtype=str), return_inverse=True)
    ng, nq, k = fg.shape[2], fq.shape[2], min(int(top), len(names))
    single = fq.shape[:2] == (1, 1)
    embedding = hasattr(rs.scorer, "embed")
    if method == "auto":
        method = "prune" if ng >= AUTO_FROM and single and not embedding else "exact"
    if method != "exact" and not single:
        raise DataError(f"method {method!r} scores one view; this run uses test-time views or mirrors: use exact")
    if method == "prune" and embedding:
        raise DataError("method 'prune' is the paper's head's proxy; an embedding run takes exact or faiss")
    if method == "faiss" and not embedding:
        raise DataError("method 'faiss' indexes embeddings; the paper's head takes exact or prune")
    if method == "exact" or ng <= pool:
        ids, cols, vals = _exact(rs, fq, fg, codes, k)
        return names[ids], cols, vals
    q, g = fq[0, 0], fg[0, 0]
    if method == "prune":
        from whale.inference.topk import topk_stream

        top_names, _ = topk_stream(rs.scorer, q, g, names[codes], k_ids=k, prune=pool, progress=False)
        # the best image of each proposed id, scored exactly by the head
        q_idx, g_idx = [], []
        for i, row in enumerate(top_names):
            c = np.flatnonzero(np.isin(codes, np.searchsorted(names, row)))
            q_idx.append(np.full(len(c), i)), g_idx.append(c)
        q_idx, g_idx = np.concatenate(q_idx), np.concatenate(g_idx)
    else:
        eg, eq = rs.scorer.embed(g), rs.scorer.embed(q)
        metric = "ip" if rs.scorer.score == "cosine" and rs.scorer.similarity is None else "l2"
        found = faiss_candidates(eq, eg, pool, metric, index_dir=index_dir)
        q_idx = np.repeat(np.arange(nq), found.shape[1])
        g_idx = found.reshape(-1)
        ok = g_idx >= 0
        q_idx, g_idx = q_idx[ok], g_idx[ok]
    scores = rs.scorer.pairs_index(q, g, q_idx, g_idx)
    ids, cols, vals = _best_per_id(q_idx, g_idx, scores, codes, nq, k)
    return np.where(ids >= 0, names[np.maximum(ids, 0)], ""), cols, vals


def batch_groups(rs, fq: np.ndarray, threshold: float, flag: Flagging | None = None) -> list[int | None]:
    """Per photo its group of the batch (:func:`groups_of` of the run's scores between the batch's photos; with
    ``flag``, as :meth:`Flagging.groups` reads them), None alone."""
    s = rs.matrix(fq, fq).astype(np.float32)
    return groups_of(s, threshold) if flag is None else flag.groups(s)


def groups_of(scores: np.ndarray, threshold: float) -> list[int | None]:
    """Per photo its group, None alone: photos whose every pair reaches ``threshold`` (complete linkage over the
    symmetrised ``[n, n]`` scores, ``max(s_ij, s_ji)``, in [0, 1]). Unlike linking every pair that reaches it
    (connected components), a chain of photos each like the next never joins two that are not alike: in a
    small catalogue most pairs of different whales score above a raw threshold (docs/catalogue.md).
    Groups are numbered in the order of their first photo."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    s = np.maximum(scores, scores.T).astype(np.float64)
    n = len(s)
    if n < 2:
        return [None] * n
    distance = 1.0 - np.clip(s, 0.0, 1.0)
    np.fill_diagonal(distance, 0.0)
    tree = linkage(squareform(distance, checks=False), method="complete")
    labels = fcluster(tree, t=1.0 - float(threshold), criterion="distance")
    sizes = np.bincount(labels)
    renum, out = {}, []
    for lab in labels:
        if sizes[lab] < 2:
            out.append(None)
        else:
            out.append(renum.setdefault(int(lab), len(renum)))
    return out


def check_batch_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", name or ""):
        raise DataError(f"batch name {name!r}: expected letters, digits, '.', '_' or '-' (at most 100)")
    return name


def check_batch(cat: Catalogue, photos_dir, batch: str | None = None, rematch: bool = False) -> str:
    """The batch's name (``batch``, else the folder's), checked before any model loads.

    Raises:
        DataError: a bad name, or a batch that exists already without ``rematch`` (a matched batch is
            never replaced silently: its proposals may have been reviewed and decided).
    """
    batch = check_batch_name(batch or Path(photos_dir).resolve().name)
    matched = sql.batch_matched_at(cat.conn, batch)
    if matched is not None and not rematch:
        n = sql.decision_count(cat.conn, batch)
        raise DataError(f"{cat.root}: batch {batch!r} exists already (matched {matched}, {n} decisions); "
                        "--rematch replaces its proposals and keeps its decisions, or name another --batch")
    return batch


def batch_photos(cat: Catalogue, photos_dir: Path, batch: str | None, rematch: bool, top: int,
                 boxes_csv=None) -> tuple[list[Path], dict]:
    """A batch's photos and boxes, each photo decoded, before any model or matcher loads: ``(photos, boxes by
    file name)``. Raises DataError on a bad or existing batch (:func:`check_batch`), ``top`` < 1, a photo that
    is not an image (naming it) or a bad boxes CSV."""
    check_batch(cat, photos_dir, batch, rematch)
    if int(top) < 1:
        raise DataError(f"--top {top}: expected at least 1")
    photos = list_photos(photos_dir)
    boxes = {}
    if boxes_csv is not None:
        from whale.data.competition import read_boxes

        boxes = read_boxes(boxes_csv)
    for p in photos:
        check_photo(p, boxes.get(p.name), f"{photos_dir}: photo {p.name}")
    return photos, boxes


def match_batch(cat: Catalogue, run: RunFeatures, photos_dir, batch: str | None = None, top: int = 10,
                method: str = "auto", threshold: float | None = None, boxes_csv=None,
                pool: int = DEFAULT_POOL, rematch: bool = False, log=None) -> tuple[Proposals, Path]:
    """Propose individuals for every photo of ``photos_dir``; write ``batches/<batch>/proposals-<sha>.json``
    and the proposals table (one transaction, after the JSON is on disk). Returns ``(proposals, path)``.

    The whole match holds the catalogue's write lock (:meth:`Catalogue.writing`): two matches at once
    run one after the other. An existing batch is refused unless ``rematch`` (:func:`check_batch`); a
    re-matched batch keeps its decisions (they are never deleted). ``threshold``: the probability of the same
    whale below which a photo is possibly new (None: :data:`DEFAULT_PROBABILITY`; :class:`Flagging`); ``log``:
    told how the catalogue was calibrated.

    Raises:
        DataError: a bad batch name, an existing batch, a photo that is not an image (naming it), ...
    """
    photos_dir = Path(photos_dir)
    photos, boxes = batch_photos(cat, photos_dir, batch, rematch, top, boxes_csv)
    with cat.writing():
        return _match(cat, run, photos_dir, photos, boxes, check_batch(cat, photos_dir, batch, rematch), top,
                      method, threshold, pool, log)


def _match(cat, run, photos_dir, photos, boxes, batch, top, method, threshold, pool, log) -> tuple[Proposals, Path]:
    pending = prepare_index(cat, run)  # the catalogue's new features: on disk, recorded with the proposals
    fq = run.features(photos, [boxes.get(p.name) for p in photos])
    # One transaction for the index and the proposals: a kill anywhere leaves the catalogue as before or after.
    with cat.transaction() as db:
        pending.record(db)
        return _propose(cat, db, run, photos_dir, photos, fq, batch, top, method, threshold, pool, log)


def _propose(cat, db, run, photos_dir, photos, fq, batch, top, method, threshold, pool, log) -> tuple[Proposals, Path]:
    from whale.catalogue.calibration import catalogue_calibration
    from whale.explain.match import run_threshold

    gallery = load_gallery(cat, run.fingerprint)
    names, cols, vals = propose(run.scorer, fq, gallery.features, gallery.individuals, top, method, pool,
                                index_dir=cat.root / INDEX_DIR)
    cal, how = catalogue_calibration(
        cat.root, f"run {run.fingerprint}", gallery.hashes, gallery.individuals,
        lambda rows: run.scorer.matrix(gallery.features[:, :, rows], gallery.features), log)
    flag = Flagging.of(cal, threshold, run_threshold(run.run_dir)[0] if cal is None else 0.0, how)
    if log:
        log(flag.how)
    return record_proposals(cat, db, batch, photos_dir, photos, str(run.run_dir.resolve()), run.fingerprint,
                            flag, names, cols, vals, batch_groups(run.scorer, fq, flag.threshold, flag),
                            gallery.paths, gallery.hashes)


def record_proposals(cat, db, batch, photos_dir, photos, run: str, fingerprint: str, threshold: float | Flagging,
                     names, cols, vals, groups, gallery_paths, gallery_hashes) -> tuple[Proposals, Path]:
    """Write the batch's proposals file and rows (inside ``db``'s transaction); ``(proposals, path)``.

    ``names``, ``cols``, ``vals``: ``[n_photos, k]`` candidate individuals, their best gallery image's
    column (-1: none) and score; ``threshold``: a :class:`Flagging` (each candidate's probability recorded,
    possibly new below its threshold), or a number (a score threshold, no probabilities); ``groups``: per photo
    its group or None; ``run``: what matched (a run folder, or ``keypoints``) and ``fingerprint`` its features'
    fingerprint, as the batch's row records them.
    """
    flag = threshold if isinstance(threshold, Flagging) else Flagging(None, float(threshold), "given")
    probs = flag.probabilities(np.asarray(vals, np.float32))
    hashes = [file_hash(p) for p in photos]
    out = []
    for i, p in enumerate(photos):
        cands = tuple(Candidate(str(names[i, j]), round(float(vals[i, j]), 6), str(gallery_paths[cols[i, j]]),
                                None if probs is None else round(float(probs[i, j]), 6))
                      for j in range(names.shape[1]) if cols[i, j] >= 0)
        evidence = None if not cands else cands[0].score if probs is None else cands[0].probability
        possibly_new = evidence is None or evidence < flag.threshold
        out.append(PhotoProposal(str(p.resolve()), hashes[i], possibly_new, groups[i], cands))
    threshold = flag.threshold
    proposals = Proposals(batch, run, threshold, tuple(out), flag.scale)
    path = write_proposals(cat.root / proposals_file(batch, proposals), proposals)
    by_path = {str(p): h for p, h in zip(gallery_paths, gallery_hashes)}
    # The batch's row names its proposals file: a kill before the commit leaves the old row naming the old
    # file (the new one, named by its content, is deleted as unreferenced), never old rows and a new file.
    sql.record_batch(db, batch, str(Path(photos_dir).resolve()), run, fingerprint, threshold,
                     path.relative_to(cat.root).as_posix(),
                     [(ph.photo, ph.hash, r, c.individual, c.score, by_path[c.image], int(ph.possibly_new), ph.group)
                      for ph in out for r, c in enumerate(ph.candidates, start=1)])
    return proposals, path
