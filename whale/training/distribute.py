"""Multi-device training: picking a device strategy by name, on the Keras backend in use.

``"auto"`` spreads each batch over every visible GPU when there are two or more (Kaggle's
2 x T4 machines) and otherwise uses one device; ``"mirrored"`` and ``"default"`` force one or
the other. Per backend:

- TensorFlow: ``tf.distribute.MirroredStrategy`` (``"mirrored"``) or TensorFlow's default
  single-device strategy. Variables must be created under the strategy's scope, so model
  building, loading and compiling go inside :func:`strategy_scope`.
- JAX: ``keras.distribution.DataParallel`` over every JAX device (``"mirrored"``, set as the
  global distribution while the scope is open) or no distribution at all.
- Other backends (PyTorch): one device; ``"mirrored"`` raises.

``model.fit`` then splits each batch over the replicas (the config's ``batch_size`` is the
global batch; the loss is averaged over it, as on one device). TensorFlow is imported only
when it is the backend.
"""

from __future__ import annotations

import contextlib

from whale.config import STRATEGIES


class JaxStrategy:
    """The JAX counterpart of a ``tf.distribute`` strategy: ``scope()`` and ``num_replicas_in_sync``.

    ``distribution`` is a ``keras.distribution.DataParallel`` or ``None`` (one device).
    """

    def __init__(self, distribution=None):
        self.distribution = distribution
        self.devices = tuple(str(d) for d in distribution.device_mesh.devices.flat) if distribution else ()

    @property
    def num_replicas_in_sync(self) -> int:
        return max(1, len(self.devices))

    @contextlib.contextmanager
    def scope(self):
        import keras

        if self.distribution is None:
            yield self
            return
        previous = keras.distribution.distribution()
        keras.distribution.set_distribution(self.distribution)
        try:
            yield self
        finally:
            keras.distribution.set_distribution(previous)


def _tf_devices(tf) -> list[str]:
    """Devices a mirrored strategy should use: every logical GPU, else every logical CPU."""
    gpus = tf.config.list_logical_devices("GPU")
    return [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]


def get_strategy(name: str = "auto"):
    """The strategy called ``name`` (one of :data:`STRATEGIES`) on the current Keras backend.

    TensorFlow: a ``tf.distribute.Strategy``; ``"mirrored"`` uses every logical GPU, or every
    logical CPU when there is no GPU (useful for tests with
    ``tf.config.set_logical_device_configuration``). JAX: a :class:`JaxStrategy`;
    ``"mirrored"`` uses every JAX device (on CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=2``
    gives two).

    Raises:
        ValueError: an unknown name (the message lists the valid ones), or ``"mirrored"`` on
            a backend without a multi-device strategy here.
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown distribution strategy {name!r}; expected one of {', '.join(STRATEGIES)}")
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if name == "auto":
            name = "mirrored" if len(tf.config.list_logical_devices("GPU")) > 1 else "default"
        if name == "default":
            return tf.distribute.get_strategy()
        return tf.distribute.MirroredStrategy(devices=_tf_devices(tf))
    if backend == "jax":
        import jax

        if name == "auto":
            name = "mirrored" if len(_gpus(jax)) > 1 else "default"
        if name == "default":
            return JaxStrategy(None)
        return JaxStrategy(keras.distribution.DataParallel(devices=jax.devices()))
    if name == "mirrored":
        raise ValueError(f"strategy 'mirrored': not available on the {backend} backend; use 'auto' or 'default'")
    return JaxStrategy(None)


def _gpus(jax) -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:  # no GPU platform in this jaxlib
        return []


def describe(strategy) -> str:
    """One line for logs: the strategy's class and its replicas."""
    if isinstance(strategy, JaxStrategy):
        devices = strategy.devices
        kind = "DataParallel" if strategy.distribution is not None else "SingleDevice"
    else:
        try:
            devices = tuple(strategy.extended.worker_devices)
        except (AttributeError, RuntimeError):  # the default strategy does not list its device
            devices = ()
        kind = type(strategy).__name__
    return (f"{kind} with {strategy.num_replicas_in_sync} replica(s)"
            + (f" on {', '.join(devices)}" if devices else ""))


@contextlib.contextmanager
def strategy_scope(name: str = "auto"):
    """``with strategy_scope("auto") as strategy:`` build, load and compile models inside."""
    strategy = get_strategy(name)
    with strategy.scope():
        yield strategy
