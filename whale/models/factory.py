"""Building a branch by name: the registry's backbone, its preprocessing, and the weights asked for.

The layers stand apart as in timm: :mod:`whale.models.registry` (what each branch is, as
data), :mod:`whale.models.weights` (loading and adapting weight files) and this factory,
which uses both; neither of the other two imports it.
"""

from __future__ import annotations

import keras

from whale.errors import ConfigError
from whale.models.registry import BRANCHES, assemble_branch, check_input_shape, get_branch_def
from whale.models.weights import adapt_first_conv, load_branch_weights


def build_branch(name: str, input_shape, weights=None) -> keras.Model:
    """Build branch ``name``: float32 ``[b, S, S, C]`` raw pixels 0..255 -> ``[b, d]`` float32.

    Args:
        name: a key of :data:`BRANCHES`.
        input_shape: ``(S, S, C)``, square, ``C`` in {1, 3}, ``min_size <= S <= 1024``.
        weights: ``None`` (random init), ``"imagenet"`` (keras.applications backbones only;
            downloads; with ``C = 1`` the first convolution is adapted, see
            :func:`whale.models.adapt_first_conv`), or a path to a ``.weights.h5`` / ``.h5``
            file of the backbone or of the whole branch.

    Raises:
        ConfigError: unknown name, bad shape, ImageNet weights unavailable for this branch.
        FileNotFoundError: ``weights`` is a path that does not exist.
        DataError: the weights file does not fit (names the file and the layer).
    """
    spec = get_branch_def(name)
    shape = check_input_shape(name, input_shape)
    if weights is None:
        return assemble_branch(name, spec.backbone(shape, None))
    if isinstance(weights, str) and weights == "imagenet":
        if not spec.imagenet:
            raise ConfigError(
                f"ImageNet weights are not available for branch {name!r}; available for "
                f"{', '.join(n for n, s in BRANCHES.items() if s.imagenet)}. Use weights=None "
                "or a local weights file."
            )
        rgb = assemble_branch(name, spec.backbone(shape[:2] + (3,), "imagenet"))
        if shape[2] == 3:
            return rgb
        gray = assemble_branch(name, spec.backbone(shape, None))
        adapt_first_conv(rgb, gray)
        return gray
    branch = assemble_branch(name, spec.backbone(shape, None))
    load_branch_weights(branch, weights)
    return branch
