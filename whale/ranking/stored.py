"""A tuned ``new_whale`` threshold kept as a file: tuned once where the scores are made, read where it is used.

Two writers: a run's scoring (:func:`whale.inference.runs.score_run`) tunes the threshold on the
``val.npz`` it writes and keeps it beside it as ``scores/threshold.json`` (:data:`THRESHOLD_FILE`);
``ensemble.py --tune`` keeps the threshold it chose as ``NAME.threshold.json`` beside the submission.
Readers: the explain and catalogue commands (a run's threshold, :func:`whale.explain.match.run_threshold`)
and every ``--threshold`` flag, which takes a number or such a file (:func:`threshold_arg`).

Format (JSON object): ``threshold`` (float), ``map5`` (validation MAP@5 at it, or null), ``open_label``
(the open-set label it was tuned for), ``tuned_on`` (the scores it was tuned on, a path or a description),
``scores_hash`` (:func:`whale.core.files.file_hash` of those scores when they are one file, else null),
``rule`` (how it was chosen), ``scale`` (``score``: a threshold on the runs' (averaged) scores; ``probability``: on
P(same whale) of calibrated fusion, :mod:`whale.ensemble.fusion`; files without it are ``score``).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

from whale import NEW_WHALE
from whale.core.errors import DataError
from whale.core.files import write_json_atomic

THRESHOLD_FILE = "threshold.json"
SCALES = ("score", "probability")
"""A run's stored threshold, in its ``scores/`` folder beside ``val.npz``."""


@dataclass(frozen=True)
class StoredThreshold:
    """A threshold read from a file (:func:`read_threshold`); ``path``: that file."""

    threshold: float
    map5: float | None
    open_label: str
    tuned_on: str | None
    scores_hash: str | None
    rule: str
    path: Path
    scale: str = "score"


def write_threshold(path, threshold: float, *, map5: float | None = None, open_label: str = NEW_WHALE,
                    tuned_on: str | None = None, scores_hash: str | None = None,
                    rule: str = "tuned on validation MAP@5", scale: str = "score") -> Path:
    """Keep ``threshold`` in ``path`` (JSON, written atomically); returns ``path``. ``scale``: one of
    :data:`SCALES`."""
    if scale not in SCALES:
        raise ValueError(f"scale: expected one of {', '.join(SCALES)}, got {scale!r}")
    return write_json_atomic(path, {"threshold": float(threshold), "map5": None if map5 is None else float(map5),
                                    "open_label": str(open_label), "tuned_on": tuned_on, "scores_hash": scores_hash,
                                    "rule": str(rule), "scale": scale})


def read_threshold(path) -> StoredThreshold:
    """The threshold stored in ``path``.

    Raises:
        DataError: naming ``path``: it is missing, not JSON, or has no finite number ``threshold``.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no stored threshold (expected a JSON file written by run scoring as "
                        f"scores/{THRESHOLD_FILE}, or by ensemble.py --tune as NAME.threshold.json)")
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DataError(f"{path}: a stored threshold must be a JSON object; it does not read as JSON ({err})") from None
    t = raw.get("threshold") if isinstance(raw, dict) else None
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        raise DataError(f"{path}: expected a JSON object with a finite number 'threshold', "
                        f"received {json.dumps(raw)[:200]}")
    m = raw.get("map5")
    scale = raw.get("scale", "score")
    if scale not in SCALES:
        raise DataError(f"{path}: scale: expected one of {', '.join(SCALES)}, received {scale!r}")
    return StoredThreshold(float(t), float(m) if isinstance(m, (int, float)) and not isinstance(m, bool) else None,
                           str(raw.get("open_label") or NEW_WHALE), raw.get("tuned_on"), raw.get("scores_hash"),
                           str(raw.get("rule") or "stored"), path, scale)


class StoredValue(float):
    """A threshold read from a file by :func:`threshold_arg`: a float that remembers its ``scale`` and ``path``."""

    scale: str
    path: Path

    def __new__(cls, stored: StoredThreshold) -> "StoredValue":
        value = super().__new__(cls, stored.threshold)
        value.scale, value.path = stored.scale, stored.path
        return value


def threshold_arg(text: str) -> float:
    """``--threshold``'s type: a number, or a stored threshold file (:func:`read_threshold`) whose value it takes
    (a :class:`StoredValue`: its scale is checked against the runs' fusion by the ensemble).

    Raises:
        argparse.ArgumentTypeError: neither a number nor a readable threshold file (the message names the file).
    """
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return StoredValue(read_threshold(text))
    except DataError as err:
        raise argparse.ArgumentTypeError(f"expected a number or a stored threshold file: {err}") from None


def probability_arg(text: str) -> float:
    """A probability threshold's type (``whale catalogue match --threshold``): a number in [0, 1], or a stored
    threshold file of scale ``probability`` (an ensemble's ``NAME.threshold.json`` of calibrated fusion).

    Raises:
        argparse.ArgumentTypeError: anything else; a file holding a threshold on a run's scores (every one
            written before calibrated fusion) is refused naming it, since a score is not a probability.
    """
    try:
        p = float(text)
    except ValueError:
        try:
            stored = read_threshold(text)
        except DataError as err:
            raise argparse.ArgumentTypeError(f"expected a probability or a stored threshold file: {err}") from None
        if stored.scale != "probability":
            raise argparse.ArgumentTypeError(
                f"{text}: holds a threshold on a run's scores ({stored.threshold:g}, {stored.rule}), not a probability "
                "of the same whale; give a probability in [0, 1] (default 0.5), or the NAME.threshold.json of "
                "`whale ensemble --tune` with calibrated fusion") from None
        p = stored.threshold
    if not 0.0 <= p <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability of the same whale in [0, 1], received {text}")
    return p
