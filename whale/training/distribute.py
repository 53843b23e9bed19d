"""Multi-GPU training: picking a ``tf.distribute`` strategy by name.

``"auto"`` mirrors the model over every visible GPU when there are two or more (Kaggle's
2 x T4 machines) and otherwise keeps TensorFlow's default (single-device) strategy;
``"mirrored"`` and ``"default"`` force one or the other. Variables must be created under the
strategy's scope, so model building, loading and compiling go inside
:func:`strategy_scope`; ``model.fit`` then splits each batch over the replicas (the config's
``batch_size`` is the global batch; the loss is averaged over it, as on one device).
"""

from __future__ import annotations

import contextlib

from whale.config import STRATEGIES


def _devices(tf) -> list[str]:
    """Devices a mirrored strategy should use: every logical GPU, else every logical CPU."""
    gpus = tf.config.list_logical_devices("GPU")
    return [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]


def get_strategy(name: str = "auto"):
    """The ``tf.distribute.Strategy`` called ``name`` (one of :data:`STRATEGIES`).

    ``"mirrored"`` uses every logical GPU, or every logical CPU when there is no GPU (useful
    for tests with ``tf.config.set_logical_device_configuration``).

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown distribution strategy {name!r}; expected one of {', '.join(STRATEGIES)}")
    import tensorflow as tf

    if name == "auto":
        name = "mirrored" if len(tf.config.list_logical_devices("GPU")) > 1 else "default"
    if name == "default":
        return tf.distribute.get_strategy()
    return tf.distribute.MirroredStrategy(devices=_devices(tf))


def describe(strategy) -> str:
    """One line for logs: the strategy's class and its replicas."""
    try:
        devices = tuple(strategy.extended.worker_devices)
    except (AttributeError, RuntimeError):  # the default strategy does not list its device
        devices = ()
    return (f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replica(s)"
            + (f" on {', '.join(devices)}" if devices else ""))


@contextlib.contextmanager
def strategy_scope(name: str = "auto"):
    """``with strategy_scope("auto") as strategy:`` build, load and compile models inside."""
    strategy = get_strategy(name)
    with strategy.scope():
        yield strategy
