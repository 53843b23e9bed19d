"""What a run folder records as it trains: ``log.csv``, ``run.json``, ``config.yaml``, TensorBoard scalars.

``log.csv`` has one row per finished epoch (:data:`LOG_FIELDS`); a resumed run cuts it back to
its checkpoint's epoch first, so the log always matches the model. ``run.json`` keeps the
fold, seed, code revision and data folder, with every invocation appended to its history.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

from whale.config import RunConfig
from whale.files import atomic_write, git_revision, write_json_atomic, write_text_atomic

LOG_FIELDS = [
    "epoch", "stage", "epoch_in_stage", "image_size", "k", "lr", "freeze_branch", "dataset",
    "loss", "accuracy", "val_map5", "val_threshold", "mining_s", "epoch_s",
]
"""Columns of ``log.csv``."""


def read_log(path: Path) -> list[dict]:
    """Rows of ``log.csv`` as dicts of strings; ``[]`` when there is none yet."""
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_log(path: Path, rows: list[dict]) -> None:
    """Write ``log.csv`` atomically (header + ``rows``)."""
    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=LOG_FIELDS)
            w.writeheader()
            w.writerows(rows)

    atomic_write(path, write)


def write_run_metadata(out_dir: Path, cfg: RunConfig, fold: int, data_dir: Path,
                       playground: Path | None) -> None:
    """The resolved config, seed, fold and git revision, next to the run's outputs."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_dir / "config.yaml", cfg.to_yaml())
    meta = {"fold": fold, "seed": cfg.seed, "git_revision": git_revision(), "data": str(data_dir),
            "playground": str(playground) if playground else None, "argv": sys.argv,
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    runs_path = out_dir / "run.json"
    history = json.loads(runs_path.read_text()).get("history", []) if runs_path.exists() else []
    write_json_atomic(runs_path, {**meta, "history": history + [meta]})


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
