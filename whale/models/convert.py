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

Layouts: convolution kernels ``[out, in/groups, kh, kw]`` -> ``[kh, kw, in/groups, out]``
(grouped convolutions keep their group order); BatchNorm ``weight, bias, running_mean,
running_var`` -> ``gamma, beta, moving_mean, moving_variance``; the squeeze-and-excitation
fully connected layers are 1x1 convolutions with bias on both sides. The classifier and
``num_batches_tracked`` are dropped; any other name left over, or any weight not found,
is an error that lists them.

Checkpoint formats: ``.npz`` (a numpy archive of name -> array; make one anywhere with
``np.savez(out, **{k: v.numpy() for k, v in model.state_dict().items()})``), ``.safetensors``
(needs the ``safetensors`` package) and ``.pth``/``.pt``/``.bin`` (needs ``torch``). A state
dict nested under ``state_dict``/``model`` and a ``module.`` prefix are unwrapped.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

from whale.core.errors import ConfigError, DataError, run_cli
from whale.core.files import atomic_write

CONVERTIBLE = ("seresnext50", "densenet121")
_IGNORED = re.compile(r"(^|\.)num_batches_tracked$|^(fc|last_linear|classifier)\.")


# --------------------------------------------------------------------------------------------
# reading checkpoints


def read_state_dict(path) -> dict[str, np.ndarray]:
    """Parameter name -> float32 array from a ``.npz``, ``.safetensors`` or ``.pth`` file.

    Raises:
        FileNotFoundError: no such file.
        DataError: unknown suffix, a package needed for the format is missing (named), or
            the file holds no state dict.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        with np.load(path, allow_pickle=False) as archive:
            state = {k: archive[k] for k in archive.files}
    elif suffix == ".safetensors":
        numpy_io = _import(path, "safetensors.numpy", "safetensors")
        state = numpy_io.load_file(str(path))
    elif suffix in (".pth", ".pt", ".bin", ".ckpt"):
        torch = _import(path, "torch", "torch")
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    else:
        raise DataError(f"{path}: expected a .npz, .safetensors or .pth checkpoint")
    for key in ("state_dict", "model_state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not state:
        raise DataError(f"{path}: holds no state dict (name -> tensor)")
    out = {}
    for name, value in state.items():
        name = name[len("module."):] if name.startswith("module.") else name
        if hasattr(value, "detach"):  # a torch tensor (bfloat16 has no numpy twin)
            value = value.detach().cpu().float().numpy()
        out[name] = np.asarray(value, dtype=np.float32)
    return out


def _import(path: Path, module: str, package: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise DataError(f"{path}: reading this format needs the {package!r} package, which is not "
                        f"installed (pip install {package}); or save the state dict as .npz") from None


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


_MAPS = {"seresnext50": seresnext50_map, "densenet121": densenet121_map}
_SUFFIXES = {"conv": ("weight",), "conv_bias": ("weight", "bias"),
             "bn": ("weight", "bias", "running_mean", "running_var")}


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
    backbone = branch.get_layer("backbone")
    used, missing = set(), []
    for layer_name, kind, prefix in table:
        names = [f"{prefix}.{s}" for s in _SUFFIXES[kind]]
        if any(n not in state for n in names):
            missing += [n for n in names if n not in state]
            continue
        arrays = [state[n] for n in names]
        if kind != "bn":
            arrays[0] = arrays[0].transpose(2, 3, 1, 0)  # [out, in/g, kh, kw] -> [kh, kw, in/g, out]
        layer = backbone.get_layer(layer_name)
        for name, array, variable in zip(names, arrays, layer.weights):
            if tuple(array.shape) != tuple(variable.shape):
                raise DataError(f"{source}: {name} has shape {tuple(state[name].shape)}, which does "
                                f"not fit {branch_name} layer {layer_name} ({tuple(variable.shape)} "
                                "after the layout change)")
        if len(layer.weights) != len(arrays):
            raise DataError(f"{source}: layer {layer_name} has {len(layer.weights)} weights, "
                            f"{prefix} gives {len(arrays)}")
        layer.set_weights(arrays)
        used.update(names)
    left = sorted(k for k in state if k not in used and not _IGNORED.search(k))
    ignored = sorted(k for k in state if _IGNORED.search(k))
    if missing or left:
        parts = []
        if missing:
            parts.append(f"{len(missing)} weights missing ({', '.join(missing[:5])}"
                         f"{', ...' if len(missing) > 5 else ''})")
        if left:
            parts.append(f"{len(left)} names not mapped ({', '.join(left[:5])}"
                         f"{', ...' if len(left) > 5 else ''})")
        raise DataError(f"{source}: not a {branch_name} state dict we can map: {'; '.join(parts)}")
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
                   help="PyTorch checkpoint: .pth/.pt/.bin (needs torch), .safetensors, .npz")
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
