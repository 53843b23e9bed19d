"""How long the next epoch will take: the estimate behind a run's deadline (``--time-budget``, Kaggle's kernels).

An epoch's seconds are its steady work plus the one-off costs of the functions it calls for the first time: the
train step traced and compiled at a call's first epoch and again at each new image size, freezing or weight decay,
and the feature pass of mining and validation after each fresh compile. On a GPU these compiles take a minute or
more each for a network such as EfficientNet-Lite0 at 224 x 448 (docs/gpu.md), against seconds of steady work: an
estimate that counted them in every epoch would stop a run minutes early. They are measured as the first batch's
excess over the median of the others (:func:`whale.inference.features.first_batch_excess`): by
:class:`FirstStepClock` for ``fit``, by :func:`whale.inference.features.compute_features` for the feature passes.
"""
from __future__ import annotations

import time

import keras

from whale.inference.features import first_batch_excess


def next_epoch_estimate(history: list[tuple[bool, float, float]], compiles: bool) -> float:
    """Seconds the next epoch should take, from this call's epochs ``(compiled, seconds, first-call seconds)``.

    The longest steady work seen (an epoch's seconds less its first-call seconds) plus, when the next epoch
    ``compiles`` its train step again, the longest first-call cost seen in an epoch that did; 0 before any epoch.
    """
    steady = max((s - c for _, s, c in history), default=0.0)
    compile_s = max((c for compiled, _, c in history if compiled), default=0.0)
    return steady + (compile_s if compiles else 0.0)


class FirstStepClock(keras.callbacks.Callback):
    """Adds the first training step's excess over the median step of a ``fit`` (its trace and compile) to
    ``timing["compile_s"]``."""

    def __init__(self, timing: dict):
        super().__init__()
        self.timing, self.seconds, self.t0 = timing, [], 0.0

    def on_train_begin(self, logs=None):
        self.seconds, self.t0 = [], time.time()

    def on_train_batch_end(self, batch, logs=None):
        now = time.time()
        self.seconds.append(now - self.t0)
        self.t0 = now

    def on_train_end(self, logs=None):
        self.timing["compile_s"] = self.timing.get("compile_s", 0.0) + first_batch_excess(self.seconds)
