"""Score files: the one format that runs, ``python -m whale.inference`` and ``ensemble.py`` share.

``RUN_DIR/scores/val.npz``: the fold's validation queries (``new_whale`` included, truth in
``query_ids``) against the fold's training images with known ids.
``RUN_DIR/scores/test.npz``: the competition's test images against *every* training image
with a known id, so all folds of all models share one gallery and ``ensemble.py`` can
average them.

Arrays: ``scores`` ``[n_query, n_gallery]`` float16 or float32 (higher = more likely the same
whale), ``query``, ``gallery``, ``gallery_ids`` (1-D str) and, for validation, ``query_ids``.
Strings are stored as numpy unicode arrays so ``np.load(..., allow_pickle=False)`` reads them.

Identity: files written by this version also hold ``identity``, a ``[1]`` str array with one
JSON object describing the run that wrote them (:data:`IDENTITY_FIELDS`: ``run_id``, ``config_hash``, ``fold``,
``seed``, ``checkpoint``, ``snapshot``, ``init_from``, ``epoch``, ``git_revision``, ``backend``, ``split``; every writer
builds it with :func:`score_identity`), and validation files
``trained_on`` (``[n]`` str, the images the model trained on), so ``ensemble.py`` can refuse
mixed or leaking inputs. Files without them (older versions) still load, with ``identity`` None.
A file written alone, outside a run folder that records its data's image bytes (``whale score --matcher keypoints
--out FILE.npz``), holds them itself: ``photos``, ``[n, 2]`` str (image name as ``train/a.jpg``, digest;
:func:`file_photos`).
:func:`write_scores` writes one atomically, :func:`load_score_file` reads and checks one;
every problem raises :class:`ScoreFileError` naming the file.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from whale.core.errors import DataError
from whale.core.files import atomic_write, git_revision

SPLITS = ("val", "test")
IDENTITY_FIELDS = ("run_id", "run", "config_hash", "fold", "seed", "checkpoint", "snapshot", "init_from", "epoch",
                   "git_revision", "backend", "split")
"""The fields of a score file's ``identity`` (module docstring; a writer may add its own, :func:`score_identity`)."""
_NAMES_SHOWN = 5


class ScoreFileError(DataError):
    """A score file is missing, unreadable or malformed; the message names the file."""


@dataclass(frozen=True)
class ScoreFile:
    """One score matrix with the names that index it.

    Attributes:
        path: where it came from (for a merged matrix, the first file; ``sources`` has all).
        scores: ``[n_query, n_gallery]`` float16 or float32; higher = more likely the same whale.
        query: ``[n_query]`` str image names.
        gallery: ``[n_gallery]`` str image names.
        gallery_ids: ``[n_gallery]`` str whale ids of the gallery images.
        query_ids: ``[n_query]`` str true ids (``new_whale`` included), or None (test).
        sources: the files that were averaged into it.
        identity: the writing run's identity (see the module docstring), or None (older file).
        trained_on: ``[n]`` str images the scoring model trained on (validation files), or None.
    """

    path: Path
    scores: np.ndarray
    query: np.ndarray
    gallery: np.ndarray
    gallery_ids: np.ndarray
    query_ids: np.ndarray | None = None
    sources: tuple[Path, ...] = field(default=())
    identity: dict | None = None
    trained_on: np.ndarray | None = None

    @property
    def n_query(self) -> int:
        return len(self.query)


def score_identity(split: str, *, run_id: str | None, run: str, config_hash: str, fold: int | None, seed: int,
                   backend: str, checkpoint: str | None = None, snapshot: str | None = None,
                   init_from: str | None = None, epoch: int | None = None, **extra) -> dict:
    """The ``identity`` a score file records about its writer: every field of :data:`IDENTITY_FIELDS` (the code's
    ``git_revision`` filled in), and ``extra``, a writer's own fields (the keypoint matcher's ``matcher``).

    Raises:
        ValueError: ``split`` is not one of :data:`SPLITS`, or ``extra`` names a field of :data:`IDENTITY_FIELDS`.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    clash = sorted(set(extra) & set(IDENTITY_FIELDS))
    if clash:
        raise ValueError(f"extra identity fields {clash} are fields of every score file's identity")
    return {"run_id": run_id, "run": run, "config_hash": config_hash, "fold": fold, "seed": seed,
            "checkpoint": checkpoint, "snapshot": snapshot, "init_from": init_from, "epoch": epoch,
            "git_revision": git_revision(), "backend": backend, "split": split, **extra}


def score_path(run_dir, split: str) -> Path:
    """``RUN_DIR/scores/{split}.npz``; ``split`` is ``"val"`` or ``"test"``.

    ``run_dir`` may also be a folder of score files itself, e.g. a snapshot's ``RUN_DIR/scores/384``
    (it holds ``test.npz`` and no ``scores/``): then ``run_dir/{split}.npz``.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    run_dir = Path(run_dir)
    if not (run_dir / "scores").is_dir() and any((run_dir / f"{s}.npz").is_file() for s in SPLITS):
        return run_dir / f"{split}.npz"
    return run_dir / "scores" / f"{split}.npz"


def run_folder(path: Path) -> Path:
    """The folder of the run that wrote a score file: ``RUN`` of ``RUN/scores/[SIZE/]SPLIT.npz``, else the file's."""
    folder = Path(path).parent
    if folder.name.isdigit() and folder.parent.name == "scores":
        folder = folder.parent
    return folder.parent if folder.name == "scores" else folder


def first_names(names, n: int = _NAMES_SHOWN) -> str:
    """The first ``n`` names, comma-separated, with the total when there are more (for error messages)."""
    names = [str(x) for x in names]
    more = f" ... ({len(names)} in all)" if len(names) > n else ""
    return ", ".join(names[:n]) + more


def _str_array(z, key: str, path: Path) -> np.ndarray:
    arr = z[key]
    if arr.ndim != 1 or arr.dtype.kind != "U":
        raise ScoreFileError(f"{path}: array {key!r} must be 1-D str, got shape {arr.shape} dtype {arr.dtype}")
    return arr


def _check_unique(names: np.ndarray, what: str, path: Path) -> None:
    uniq, counts = np.unique(names, return_counts=True)
    if len(uniq) != len(names):
        raise ScoreFileError(f"{path}: {what} names must be unique; repeated: {first_names(uniq[counts > 1])}")


def _open_npz(path: Path):
    if not path.is_file():
        hint = ""
        run = path.parent.parent
        if path.parent.name == "scores" and path.stem in SPLITS and (run / "train.csv").is_file():
            hint = (f" ({run} is a competition folder, not a run folder: give run folders written by "
                    "run_fold.py, or score folders holding test.npz)")
        elif path.parent.name == "scores" and path.stem in SPLITS:
            config = run / "config.yaml" if (run / "config.yaml").is_file() else "CONFIG.yaml"
            hint = (f" (a run that stopped early, e.g. with --max-epochs or --time-budget, has none yet: "
                    f"write them with `run_fold.py --config {config} --fold FOLD --data DATA "
                    f"--out {run} --score-only --checkpoint last`, or resume the run to its end)")
        raise ScoreFileError(f"{path}: score file not found{hint}")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise ScoreFileError(f"{path}: not a readable .npz score file ({e})") from None


def different_writers(*identities: dict | None) -> list[tuple] | None:
    """Each score file identity's writer ``(run_id, fold)`` where every one is recorded and they differ; else None."""
    if any(i is None for i in identities):
        return None
    who = [(i.get("run_id"), i.get("fold")) for i in identities]
    return who if len(set(who)) > 1 else None


def read_header(path: Path, need_query_ids: bool) -> dict:
    """The name arrays of a score file and the shape of its matrix, without loading the matrix."""
    with _open_npz(path) as z:
        need = ["scores", "query", "gallery", "gallery_ids"] + (["query_ids"] if need_query_ids else [])
        missing = [k for k in need if k not in z.files]
        if missing:
            raise ScoreFileError(f"{path}: missing arrays {missing}; expected {need}, found {sorted(z.files)}")
        try:
            out = {k: _str_array(z, k, path) for k in need if k != "scores"}
            if not need_query_ids and "query_ids" in z.files:
                out["query_ids"] = _str_array(z, "query_ids", path)
            if "trained_on" in z.files:
                out["trained_on"] = _str_array(z, "trained_on", path)
            out["identity"] = _identity(z, path) if "identity" in z.files else None
            # The matrix's header only: NpzFile gives no shape without loading the array.
            with z.zip.open("scores.npy") as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    shape, dtype = z["scores"].shape, z["scores"].dtype
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise ScoreFileError(f"{path}: truncated or corrupt ({type(e).__name__}: {e})") from None
    if len(shape) != 2 or np.dtype(dtype).kind != "f":
        raise ScoreFileError(f"{path}: 'scores' must be a 2-D float array, got shape {shape} dtype {dtype}")
    nq, ng = shape
    if len(out["query"]) != nq or len(out["gallery"]) != ng or len(out["gallery_ids"]) != ng:
        raise ScoreFileError(
            f"{path}: 'scores' is {nq} x {ng} but there are {len(out['query'])} query, "
            f"{len(out['gallery'])} gallery and {len(out['gallery_ids'])} gallery_ids names"
        )
    if "query_ids" in out and len(out["query_ids"]) != nq:
        raise ScoreFileError(f"{path}: {len(out['query_ids'])} query_ids for {nq} queries")
    _check_unique(out["query"], "query", path)
    _check_unique(out["gallery"], "gallery", path)
    out["shape"] = (nq, ng)
    return out


def _identity(z, path: Path) -> dict:
    arr = _str_array(z, "identity", path)
    try:
        identity = json.loads(str(arr[0])) if arr.shape == (1,) else None
    except ValueError:
        identity = None
    if not isinstance(identity, dict):
        raise ScoreFileError(f"{path}: array 'identity' must hold one JSON object, got {arr[:1]!r}")
    return identity


def load_score_file(path, need_query_ids: bool = False) -> ScoreFile:
    """Load and check one score file (``allow_pickle=False``).

    Args:
        path: a ``.npz`` with ``scores`` [n_query, n_gallery] float, ``query``, ``gallery``,
            ``gallery_ids`` (1-D str) and, for validation, ``query_ids`` (1-D str).
        need_query_ids: require ``query_ids`` (validation files).

    Returns:
        A :class:`ScoreFile` whose ``scores`` keep the stored dtype.

    Raises:
        DataError: missing file or array, wrong shapes or dtypes, repeated names, non-finite scores.
    """
    path = Path(path)
    names = read_header(path, need_query_ids)
    with _open_npz(path) as z:
        try:
            scores = z["scores"]
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise ScoreFileError(f"{path}: 'scores' is truncated or corrupt ({type(e).__name__}: {e})") from None
    if not np.isfinite(scores).all():
        bad = np.argwhere(~np.isfinite(scores))[0]
        raise ScoreFileError(f"{path}: scores must be finite; query {str(names['query'][bad[0]])!r} vs "
                        f"gallery {str(names['gallery'][bad[1]])!r} is {scores[bad[0], bad[1]]}")
    return ScoreFile(path, scores, names["query"], names["gallery"], names["gallery_ids"],
                     names.get("query_ids"), (path,), names["identity"], names.get("trained_on"))


def write_scores(path, scores: np.ndarray, query, gallery, gallery_ids, query_ids=None,
                 identity: dict | None = None, trained_on=None, photos: dict[str, str] | None = None) -> Path:
    """Write a score file atomically; float64 scores are stored as float16, float16/32 as they are.

    Args:
        path: the ``.npz`` to write.
        scores: ``[n_query, n_gallery]`` float.
        query, gallery, gallery_ids, query_ids: sequences of str (``query_ids`` for validation).
        identity: JSON-able dict describing the run (module docstring), stored as ``identity``.
        trained_on: sequence of str, the images the model trained on (validation files).
        photos: ``{name: digest}`` of the data's images (:func:`whale.data.fingerprint.image_hashes`' digests), for a
            file written alone (:func:`file_photos`).

    Raises:
        ScoreFileError: the matrix does not have one row per query and one column per gallery image.
    """
    path = Path(path)
    scores = np.asarray(scores)
    if scores.shape != (len(query), len(gallery)):
        raise ScoreFileError(f"{path}: scores have shape {scores.shape}, expected "
                             f"({len(query)}, {len(gallery)}) = (queries, gallery images)")
    arrays = {"scores": scores.astype(np.float16) if scores.dtype == np.float64 else scores,
              "query": np.asarray(list(query), dtype=str),
              "gallery": np.asarray(list(gallery), dtype=str),
              "gallery_ids": np.asarray(list(gallery_ids), dtype=str)}
    if query_ids is not None:
        arrays["query_ids"] = np.asarray(list(query_ids), dtype=str)
    if identity is not None:
        arrays["identity"] = np.asarray([json.dumps(identity, sort_keys=True)], dtype=str)
    if trained_on is not None:
        arrays["trained_on"] = np.asarray(list(trained_on), dtype=str)
    if photos is not None:
        arrays["photos"] = np.asarray(sorted(photos.items()), dtype=str).reshape(-1, 2)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:  # a file object: np.savez appends .npz to a path without it
            np.savez(fh, **arrays)

    return atomic_write(path, write)


def file_photos(path) -> dict[str, str]:
    """``{name: digest}`` of the data's images a score file written alone records (:func:`write_scores`'
    ``photos``); ``{}`` for a file without them (its run folder's ``data_images.json`` records them, or nothing does).

    Raises:
        ScoreFileError: the file is unreadable, or its ``photos`` is not ``[n, 2]`` str.
    """
    path = Path(path)
    with _open_npz(path) as z:
        if "photos" not in z.files:
            return {}
        try:
            arr = z["photos"]
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise ScoreFileError(f"{path}: 'photos' is truncated or corrupt ({type(e).__name__}: {e})") from None
    if arr.dtype.kind != "U" or arr.ndim != 2 or arr.shape[1] != 2:
        raise ScoreFileError(f"{path}: 'photos' must be [n, 2] str (image name, digest), got shape {arr.shape} "
                             f"dtype {arr.dtype}")
    return dict(arr.tolist())
