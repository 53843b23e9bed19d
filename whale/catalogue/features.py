"""``index``: the branch features of every catalogue image under one trained run, kept up to date.

Features are keyed by (image content hash, run fingerprint). The fingerprint
(:func:`run_fingerprint`) is a hash of the checkpoint's model file and the run's config, so
retraining a run, or pointing at another checkpoint, invalidates every stored feature; adding
photos scores only the new ones. Each ``index`` writes its new rows as one ``.npy`` file
(``[G, V, n, d] float32``, the layout of :meth:`whale.inference.runs.RunScorer.features`) under
``features/<fingerprint>/``, named by the sha256 of its bytes (``catalogue check`` verifies them),
flushed to disk, and only then records them in one transaction (with the removal of the rows of any
other fingerprint), all under the catalogue's write lock (two matches at once score once); ``match``
records them in its own transaction, with the batch's proposals. Files no row references (a killed
``index``, an old fingerprint) are deleted when the command ends.
"""
from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from whale.catalogue import sql
from whale.catalogue.db import Catalogue, fsync_dir, now
from whale.catalogue.ingest import image_path
from whale.core.errors import DataError
from whale.core.files import atomic_write


def _parse_box(text: str | None):
    return None if text is None else tuple(int(v) for v in text.split(","))


def run_fingerprint(run_dir, checkpoint: str = "best") -> str:
    """16 hex digits naming the weights and preprocessing a run's features come from.

    sha256 over the checkpoint's model file (``checkpoints/<tag>.json`` names it; or a ``.keras``
    path) and the run's ``config.yaml``.
    """
    from whale.models.checkpoint import read_state

    run_dir = Path(run_dir)
    if checkpoint.endswith(".keras"):
        model_file = Path(checkpoint)
    else:
        state = read_state(run_dir / "checkpoints", checkpoint)
        if state is None:
            raise DataError(f"{run_dir / 'checkpoints'}: no checkpoint {checkpoint!r} (expected {checkpoint}.json)")
        model_file = run_dir / "checkpoints" / state["model_file"]
    h = hashlib.sha256()
    for part in (model_file, run_dir / "config.yaml"):
        if not part.is_file():
            raise DataError(f"{part}: missing (a run folder holds config.yaml and its checkpoints)")
        with open(part, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    h.update(checkpoint.encode())
    return h.hexdigest()[:16]


@dataclass
class RunFeatures:
    """A run as the catalogue uses it: fingerprint, and its scorer loaded on first use."""

    run_dir: Path
    checkpoint: str = "best"
    verbose: bool = True
    fingerprint: str = field(init=False)
    _scorer: object = field(default=None, init=False, repr=False)

    def __post_init__(self):
        self.run_dir = Path(self.run_dir)
        self.fingerprint = run_fingerprint(self.run_dir, self.checkpoint)

    @property
    def scorer(self):
        """:class:`whale.inference.runs.RunScorer` of the run (loads the model once)."""
        if self._scorer is None:
            from whale.inference.runs import RunScorer, load_run_model

            model, cfg = load_run_model(self.run_dir, self.checkpoint)
            self._scorer = RunScorer.for_config(model, cfg, verbose=self.verbose)
        return self._scorer

    def features(self, paths, boxes) -> np.ndarray:
        """``[G, V, n, d] float32`` features of images (see :meth:`RunScorer.features`)."""
        return self.scorer.features(list(paths), list(boxes))

    def gallery_features(self, paths, boxes) -> np.ndarray:
        """The catalogue's own images' features: :meth:`RunScorer.gallery_features` (each image by the views its
        run trained on where the run's ``trunk.gallery_views`` asks for it, else :meth:`features`)."""
        return self.scorer.gallery_features(list(paths), list(boxes))


def update_index(cat: Catalogue, run: RunFeatures) -> dict[str, int]:
    """Score the catalogue images that have no features under ``run``; drop other fingerprints' rows.

    Returns ``{"scored": n new, "kept": n reused, "dropped": n rows of other fingerprints}``.

    Raises:
        DataError: a catalogue photo cannot be read, naming it (its hash, individual and source) and
            how to remove it.
    """
    with cat.writing():
        pending = prepare_index(cat, run)
        if pending.needed:
            with cat.transaction() as db:
                pending.record(db)
        return pending.counts


def features_file(fingerprint: str, data: bytes) -> str:
    """The relative name of a feature file holding ``data``: ``features/<fingerprint>/<sha256>.npy``."""
    return (Path("features") / fingerprint / f"{hashlib.sha256(data).hexdigest()}.npy").as_posix()


@dataclass
class PendingIndex:
    """What :func:`prepare_index` scored, written to disk, to be recorded by :meth:`record` inside a
    transaction (``index``'s own, or ``match``'s: one transaction for the catalogue's new features and
    the batch's proposals)."""

    run: RunFeatures
    hashes: list[str]
    file: str | None
    counts: dict[str, int]
    needed: bool

    def record(self, db) -> None:
        """The feature rows (other fingerprints' dropped) and the run in ``meta``, through ``db``."""
        fp = self.run.fingerprint
        sql.record_features(db, fp, self.file, self.hashes, {
            "run": str(self.run.run_dir.resolve()), "checkpoint": self.run.checkpoint, "fingerprint": fp,
            "indexed_at": now()})


def prepare_index(cat: Catalogue, run: RunFeatures) -> PendingIndex:
    """Score the catalogue images without features under ``run`` and write them (one file, flushed to
    disk); nothing recorded yet. Call under :meth:`Catalogue.writing`."""
    fp = run.fingerprint
    todo = sql.photos_without_features(cat.conn, fp)
    kept, stale = sql.feature_counts(cat.conn, fp)
    rel = None
    if todo:
        try:
            feats = run.gallery_features([image_path(cat, f) for _, f, _ in todo],
                                         [_parse_box(b) for _, _, b in todo])
        except DataError as exc:
            raise DataError(_unreadable(cat, todo, exc)) from None
        buf = io.BytesIO()
        np.save(buf, feats)
        data = buf.getvalue()
        rel = features_file(fp, data)
        atomic_write(cat.root / rel, lambda tmp: tmp.write_bytes(data), fsync=True)
        fsync_dir((cat.root / rel).parent)
    return PendingIndex(run, [h for h, _, _ in todo], rel, {"scored": len(todo), "kept": int(kept),
                                                           "dropped": int(stale)},
                        bool(todo or stale or cat.meta("fingerprint") != fp))


def _unreadable(cat: Catalogue, todo, exc: DataError) -> str:
    """``exc`` (an image that would not decode) with the catalogue photo it is and how to remove it."""
    for digest, rel, _ in todo:
        if str(image_path(cat, rel)) in str(exc) or rel in str(exc):
            individual, source = sql.photo_owner(cat.conn, digest)
            return (f"{cat.root}: catalogue photo {digest[:12]} of {individual!r} (added from {source}) cannot be "
                    f"read: {exc}; `whale catalogue remove {cat.root} {digest[:12]}` removes it "
                    f"(`whale catalogue check {cat.root}` lists every such photo)")
    return f"{cat.root}: {exc}"


@dataclass(frozen=True)
class Gallery:
    """The catalogue's images with their features under one fingerprint.

    ``hashes``, ``individuals``, ``paths``: ``[n]``; ``features``: ``[G, V, n, d] float32``.
    """

    hashes: list[str]
    individuals: np.ndarray
    paths: list[Path]
    features: np.ndarray


def load_gallery(cat: Catalogue, fingerprint: str) -> Gallery:
    """Every catalogue image with its stored features under ``fingerprint``.

    Raises:
        DataError: an image has no features under it (run ``index`` first), or the catalogue is empty.
    """
    found = sql.gallery_rows(cat.conn, fingerprint)
    if not found:
        raise DataError(f"{cat.root}: the catalogue holds no photos (add some with `whale catalogue add`)")
    missing = [r[0] for r in found if r[3] is None]
    if missing:
        raise DataError(f"{cat.root}: {len(missing)} photos have no features of run fingerprint {fingerprint} "
                        f"(run `whale catalogue index {cat.root} --run RUN`)")
    arrays = {f: np.load(cat.root / f, allow_pickle=False) for f in sorted({r[3] for r in found})}
    feats = np.stack([arrays[r[3]][:, :, r[4]] for r in found], axis=2)
    return Gallery([r[0] for r in found], np.array([r[1] for r in found], dtype=str),
                   [image_path(cat, r[2]) for r in found], feats.astype(np.float32, copy=False))
