"""What a run folder records as it trains: ``log.csv``, ``run.json``, ``config.yaml``, TensorBoard scalars.

``log.csv`` has one row per finished epoch (:data:`LOG_FIELDS`); a resumed run cuts it back to
its checkpoint's epoch first, so the log always matches the model. ``run.json`` keeps the
fold, seed, code revision, data folder, config hash and a ``run_id`` drawn once when the folder is
created (score files carry it, so ``ensemble.py`` can tell runs apart), with every invocation
appended to its history. :func:`claim_run_dir` keeps runs from mixing: a folder that already
holds a run is only entered with ``--resume`` (same fold and seed) or cleared with ``--overwrite``.
``run.json`` also records a fingerprint of the data (:func:`data_fingerprint`) and of its images' bytes
(:func:`images_fingerprint`, from the per-image hashes kept in ``data_images.json``; both of
:mod:`whale.data.fingerprint`), so
:func:`resume_changes` can tell a resume onto other data (other files, or the same names with other
pixels), or under another config, from the paused run.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
import time
import uuid
from pathlib import Path

from whale.config import RunConfig, config_hash, load_config
from whale.core.errors import ConfigError
from whale.core.files import atomic_write, git_revision, write_json_atomic, write_text_atomic
from whale.data.fingerprint import (data_fingerprint, data_format, image_hashes, images_fingerprint,
                                    read_data_images, write_data_images)

LOG_FIELDS = [
    "epoch", "stage", "epoch_in_stage", "image_size", "k", "lr", "freeze_branch", "dataset",
    "loss", "accuracy", "val_map5", "val_threshold", "mining_s", "epoch_s",
]
"""Columns of ``log.csv``."""


def read_log(path: Path) -> list[dict]:
    """Rows of ``log.csv`` as dicts of strings; ``[]`` when there is none yet."""
    if not Path(path).exists():
        return []
    with open(path, newline="", encoding="utf-8-sig") as f:  # a BOM (a spreadsheet's save) is no column name
        return list(csv.DictReader(f))


def write_log(path: Path, rows: list[dict]) -> None:
    """Write ``log.csv`` atomically (header + ``rows``)."""
    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=LOG_FIELDS)
            w.writeheader()
            w.writerows(rows)

    atomic_write(path, write)


def read_run_json(out_dir: Path) -> dict | None:
    """``run.json`` of a run folder, or None when there is none; a broken one is named."""
    path = Path(out_dir) / "run.json"
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable JSON ({exc}); the run folder is damaged") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(meta).__name__}")
    return meta


def describe_run_dir(out_dir: Path) -> str:
    """What a run folder holds, in a few words (for errors that refuse to mix runs)."""
    out_dir = Path(out_dir)
    parts = []
    meta = read_run_json(out_dir) if (out_dir / "run.json").is_file() else None
    if meta is not None:
        parts.append(f"run.json (fold {meta.get('fold')}, seed {meta.get('seed')})")
    rows = read_log(out_dir / "log.csv")
    if rows:
        parts.append(f"log.csv ({len(rows)} epochs)")
    if (out_dir / "checkpoints").is_dir():
        parts.append("checkpoints/")
    parts += [f"scores/{p.name}" for p in sorted((out_dir / "scores").glob("*.npz"))]
    if (out_dir / "done.json").is_file():
        parts.append("done.json (finished)")
    known = {"run.json", "log.csv", "checkpoints", "scores", "done.json"}
    others = sorted(p.name for p in out_dir.iterdir() if p.name not in known)
    if others:
        parts.append(", ".join(others[:5]) + (f" ... ({len(others)} more)" if len(others) > 5 else ""))
    return "; ".join(parts)


def claim_run_dir(out_dir: Path, fold: int | str, seed: int, resume: bool = False,
                  overwrite: bool = False, log=print, init_from: str | None = None) -> None:
    """Make sure training into ``out_dir`` cannot mix two runs.

    An empty or missing folder is fine. A non-empty one needs ``resume`` (and then must hold a
    run of the same fold and seed, started from the same ``init_from`` run id when its
    ``run.json`` records one) or ``overwrite`` (and then must hold a run, i.e. a
    ``run.json``: its contents are deleted). Raises :class:`ConfigError` otherwise, saying what
    is there and the two ways on.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir}: --out must be a folder, found a file")
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite exclude each other: continue the run or clear it")
    meta = read_run_json(out_dir)
    if overwrite:
        if meta is None:
            raise ConfigError(f"{out_dir}: --overwrite only clears run folders (with a run.json); this "
                              f"folder holds {describe_run_dir(out_dir)}: clear it yourself or choose another --out")
        log(f"--overwrite: clearing {out_dir} ({describe_run_dir(out_dir)})")
        for child in out_dir.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        return
    if not resume:
        raise ConfigError(f"{out_dir}: the run folder is not empty ({describe_run_dir(out_dir)}); "
                          "add --resume to continue that run, or --overwrite to clear it and start again "
                          "(or choose a new --out)")
    if meta is not None and (meta.get("fold") != fold or meta.get("seed") != seed):
        raise ConfigError(f"{out_dir / 'run.json'}: this run is fold {meta.get('fold')}, seed "
                          f"{meta.get('seed')}; --resume asked for fold {fold}, seed {seed}: resuming it "
                          "would mix two runs (use --overwrite or a new --out)")
    recorded = (meta or {}).get("init_from") or {}
    if meta is not None and recorded.get("run_id") != init_from:
        raise ConfigError(f"{out_dir / 'run.json'}: this run started from run {recorded.get('run_id')} "
                          f"({recorded.get('run')}); --resume asked to start from run {init_from}: resuming it "
                          "would mix two runs (use the same --init-from, --overwrite or a new --out)")
    for tmp in out_dir.rglob(".*.tmp*"):  # left by writes a kill interrupted (whale.core.files.atomic_write)
        tmp.unlink(missing_ok=True)


def write_run_metadata(out_dir: Path, cfg: RunConfig, fold: int | str, data_dir: Path,
                       playground: Path | None, init_from: dict | None = None) -> None:
    """The resolved config, seed, fold, config hash, run id and git revision, next to the run's outputs.

    ``run.json`` also names the data folder, its fingerprint and its competition format
    (:mod:`whale.formats`), which ``ensemble.py`` reads when no ``--format`` is given.

    ``init_from``: what the run started from (:meth:`whale.training.pretrain.InitSource.record`:
    its folder, checkpoint, ``run_id``, config hash, epoch), or None.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / "config.yaml", cfg.to_yaml())
    old = read_run_json(out_dir) or {}
    hashes = write_data_images(out_dir, data_dir)
    meta = {"fold": fold, "seed": cfg.seed, "git_revision": git_revision(), "data": str(data_dir),
            "data_fingerprint": data_fingerprint(data_dir), "images_fingerprint": images_fingerprint(hashes),
            "format": data_format(data_dir).name,
            "config_hash": config_hash(cfg),
            "playground": str(playground) if playground else None, "init_from": init_from, "argv": sys.argv,
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    run_id = old.get("run_id") or uuid.uuid4().hex[:12]
    write_json_atomic(out_dir / "run.json", {**meta, "run_id": run_id, "history": old.get("history", []) + [meta]})


class TensorBoardLog:
    """Per-epoch scalars (loss, accuracy, validation MAP@5, K, lr) under ``run/tensorboard``.

    Written with TensorBoard's own event writer (``tensorboard.summary.writer``), which needs
    neither TensorFlow nor any other backend. Where that writer is not importable the scalars
    are skipped, with one line through ``log`` saying so.
    """

    SCALARS = ("loss", "accuracy", "val_map5", "k", "lr")

    def __init__(self, folder: Path, log=print):
        self.folder, self.log, self._writer = Path(folder), log, None

    def _open(self):
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError as err:
            self.log(f"TensorBoard: its event writer is not importable ({err}); scalars not written, log.csv has them")
            self._writer = False
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        self._writer = (EventFileWriter(str(self.folder)), event_pb2, summary_pb2)

    def write(self, row: dict) -> None:
        """Append the scalars of one ``log.csv`` row (dict of strings or numbers) at step ``epoch``."""
        if self._writer is None:
            self._open()
        if not self._writer:
            return
        writer, event_pb2, summary_pb2 = self._writer
        values = [summary_pb2.Summary.Value(tag=name, simple_value=float(row[name]))
                  for name in self.SCALARS if row.get(name) not in ("", None)]
        writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(row["epoch"]),
                                         summary=summary_pb2.Summary(value=values)))
        writer.flush()

    def close(self) -> None:
        if self._writer:
            self._writer[0].close()
        self._writer = None


def config_differences(before, after, path: str = "") -> list[str]:
    """``'KEY.PATH: OLD -> NEW'`` for every leaf where two plain configs (dicts, lists) differ."""
    if isinstance(before, dict) and isinstance(after, dict):
        out = []
        for key in list(before) + [k for k in after if k not in before]:
            where = f"{path}.{key}" if path else str(key)
            if key not in after:
                out.append(f"{where}: {before[key]!r} -> (removed)")
            elif key not in before:
                out.append(f"{where}: (absent) -> {after[key]!r}")
            else:
                out += config_differences(before[key], after[key], where)
        return out
    if isinstance(before, list) and isinstance(after, list) and all(isinstance(v, dict) for v in before + after):
        out = [d for i, (b, a) in enumerate(zip(before, after)) for d in config_differences(b, a, f"{path}[{i}]")]
        if len(before) != len(after):
            out.append(f"{path}: {len(before)} entries -> {len(after)}")
        return out
    return [] if before == after else [f"{path}: {before!r} -> {after!r}"]


def resume_changes(out_dir: Path, cfg: RunConfig, data_dir: Path) -> list[str]:
    """What differs between the paused run in ``out_dir`` and a resume of it with ``cfg`` on ``data_dir``.

    The data: the fingerprint in ``run.json`` (:func:`data_fingerprint`) against ``data_dir``'s, then the
    images' bytes (:func:`images_fingerprint`), naming the images whose bytes changed.
    The config: the resolved config in the run's ``config.yaml`` (read through the current code, so
    keys added since then take their defaults) against ``cfg`` (resolved as the trainer would
    record it, e.g. sized), key by key: every key the config has is compared. Returns one line per
    difference, ``[]`` when the resume continues the same run (or ``out_dir`` holds no run yet).
    """
    out_dir = Path(out_dir)
    meta = read_run_json(out_dir)
    if meta is None:
        return []
    changes = []
    recorded = meta.get("data_fingerprint")
    if recorded is not None and recorded != data_fingerprint(data_dir):
        changes.append(f"data: {meta.get('data')} (fingerprint {recorded}) -> {data_dir} "
                       f"(fingerprint {data_fingerprint(data_dir)}): another train.csv or other images")
    elif meta.get("images_fingerprint") is not None:
        before = read_data_images(out_dir)
        now = image_hashes(data_dir, before)
        if images_fingerprint(now) != meta["images_fingerprint"]:
            changed = [n for n in sorted(now) if (before.get(n) or [None] * 3)[2] != now[n][2]]
            shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
            changes.append(f"data: {data_dir}: the same files with other bytes since the run was started "
                           f"({len(changed)} images: {shown})" if changed else
                           f"data: {data_dir}: images with other bytes since the run was started "
                           f"(images fingerprint {meta['images_fingerprint']} -> {images_fingerprint(now)})")
    yaml_path = out_dir / "config.yaml"
    if yaml_path.is_file():
        try:
            before = load_config(yaml_path).to_dict()
        except (OSError, ValueError) as err:
            changes.append(f"config: {yaml_path} no longer reads as a config ({str(err).splitlines()[0]})")
        else:
            changes += [f"config {d}" for d in config_differences(before, cfg.to_dict())]
    return changes


def record_resume_changes(out_dir: Path, changes: list[str]) -> None:
    """Append the changes a resume accepted (``--allow-changes``) to ``run.json``'s history."""
    meta = read_run_json(out_dir) or {}
    entry = {"resumed_with_changes": list(changes), "argv": sys.argv, "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    write_json_atomic(Path(out_dir) / "run.json", {**meta, "history": meta.get("history", []) + [entry]})
