"""Steps ``flukes_lite0`` and ``flukes_lite0_head``: EfficientNet-Lite0 from ImageNet fine-tuned on the real flukes
(:mod:`benchmarks.gpu.gpu_flukes`)."""
from __future__ import annotations

FLUKES_TRAIN_S = 420.0          # ArcFace on the 3 split seeds at once: 30 epochs, compiles and validations (one call)
FLUKES_HEAD_TRAIN_S = 240.0     # the paper's head on split 0, where a session has time left


def step_flukes(ctx, train_s: float = FLUKES_TRAIN_S, quick: bool = False, part: str = "first") -> dict:
    """:func:`benchmarks.gpu.gpu_flukes.step`: the pretrained branch fine-tuned on the carried flukes."""
    from benchmarks.gpu import gpu_flukes

    return gpu_flukes.step(ctx, train_s, quick, part)
