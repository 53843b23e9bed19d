"""Mixed precision: the Keras dtype policy models are built and loaded under.

``precision`` in a config is ``float32``, ``mixed_float16`` or ``mixed_bfloat16``
(:data:`whale.config.PRECISIONS`). Under a mixed policy layers keep float32 variables and
compute in float16/bfloat16; the head's output layer is float32 whatever the policy
(:func:`whale.models.build_head`), so the siamese output, the loss and every score are float32.
A saved model stores each layer's policy, so a checkpoint loads back with the precision it was
trained under; ``mixed_float16`` models compile with a ``LossScaleOptimizer`` (Keras does that
in ``compile``), whose scale is part of the optimizer state a checkpoint keeps.
"""

from __future__ import annotations

import contextlib

from whale.config import PRECISIONS

__all__ = ["precision_scope"]


@contextlib.contextmanager
def precision_scope(precision: str = "float32"):
    """``with precision_scope("mixed_bfloat16"):`` build, resize and load models inside.

    Sets Keras's global dtype policy and restores the previous one on exit.

    Raises:
        ValueError: ``precision`` is not one of :data:`whale.config.PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, received {precision!r}")
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision)
    try:
        yield precision
    finally:
        keras.mixed_precision.set_global_policy(previous)
