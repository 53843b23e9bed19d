"""Steps ``flukes_lite0`` and ``flukes_lite0_seeds``: EfficientNet-Lite0 from ImageNet fine-tuned on the real flukes."""
from __future__ import annotations

FLUKES_TRAIN_S = 360.0          # each flukes_lite0 training's budget (benchmarks/gpu/gpu_flukes.py)
FLUKES_SEEDS_TRAIN_S = 240.0    # flukes_lite0_seeds': what a second call of the session leaves


def step_flukes(ctx, train_s: float = FLUKES_TRAIN_S, quick: bool = False, part: str = "first") -> dict:
    """:func:`benchmarks.gpu.gpu_flukes.step`: the pretrained branch fine-tuned on the carried flukes."""
    from benchmarks.gpu import gpu_flukes

    return gpu_flukes.step(ctx, train_s, quick, part)
