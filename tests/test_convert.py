"""PyTorch state dicts -> branch weights (whale.models.convert), without torch.

The state dicts are generated here with timm's, Cadene's and torchvision's parameter names
and shapes (written out from their model definitions, not from the converter's tables); a
numpy forward pass in PyTorch's NCHW conventions is the reference for the converted branch.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from whale.core.errors import ConfigError, DataError

BLOCKS = (3, 4, 6, 3)


def seresnext_state(flavour: str, seed: int = 0) -> dict[str, np.ndarray]:
    """timm ``seresnext50_32x4d`` or Cadene ``se_resnext50_32x4d`` names and shapes, random
    values (He-scaled kernels, non-trivial BatchNorm statistics)."""
    rng = np.random.default_rng(seed)
    s: dict[str, np.ndarray] = {}

    def conv(name, out, inp, k, bias=False):
        s[f"{name}.weight"] = (rng.standard_normal((out, inp, k, k)) * np.sqrt(2 / (inp * k * k))).astype(np.float32)
        if bias:
            s[f"{name}.bias"] = rng.normal(0, 0.1, out).astype(np.float32)

    def bn(name, c):
        s[f"{name}.weight"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        s[f"{name}.bias"] = rng.normal(0, 0.1, c).astype(np.float32)
        s[f"{name}.running_mean"] = rng.normal(0, 0.2, c).astype(np.float32)
        s[f"{name}.running_var"] = rng.uniform(0.5, 2.0, c).astype(np.float32)
        s[f"{name}.num_batches_tracked"] = np.array(7, dtype=np.int64)

    top, se, fc = ("", "se", "fc") if flavour == "timm" else ("layer0.", "se_module", "last_linear")
    conv(f"{top}conv1", 64, 3, 7)
    bn(f"{top}bn1", 64)
    inp = 64
    for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), BLOCKS), start=1):
        width, out = planes * 2, planes * 4  # 32 groups x (planes / 16) channels
        for b in range(blocks):
            p = f"layer{stage}.{b}"
            conv(f"{p}.conv1", width, inp, 1), bn(f"{p}.bn1", width)
            conv(f"{p}.conv2", width, width // 32, 3), bn(f"{p}.bn2", width)
            conv(f"{p}.conv3", out, width, 1), bn(f"{p}.bn3", out)
            conv(f"{p}.{se}.fc1", out // 16, out, 1, bias=True)
            conv(f"{p}.{se}.fc2", out, out // 16, 1, bias=True)
            if b == 0:
                conv(f"{p}.downsample.0", out, inp, 1), bn(f"{p}.downsample.1", out)
            inp = out
    s[f"{fc}.weight"] = rng.normal(0, 0.01, (1000, 2048)).astype(np.float32)
    s[f"{fc}.bias"] = np.zeros(1000, np.float32)
    return s


# --- a numpy SE-ResNeXt50 in PyTorch's conventions (NCHW, OIHW, eps 1e-5) ------------------

def _conv(x, w, stride=1, pad=0, groups=1, bias=None):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    xg = x.reshape(n, groups, cg, *x.shape[2:])
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    y = np.zeros((n, groups, o // groups, oh, ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xg[:, :, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            y += np.einsum("ngchw,goc->ngohw", patch, wg[:, :, :, i, j])
    y = y.reshape(n, o, oh, ow)
    return y if bias is None else y + bias[None, :, None, None]


def _bn(x, s, p):
    scale = s[f"{p}.weight"] / np.sqrt(s[f"{p}.running_var"].astype(np.float64) + 1e-5)
    return (x - s[f"{p}.running_mean"][None, :, None, None]) * scale[None, :, None, None] \
        + s[f"{p}.bias"][None, :, None, None]


def _maxpool(x, flavour):
    h = x.shape[2]
    if flavour == "timm":  # MaxPool2d(3, 2, padding=1)
        x = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
        oh = (h + 2 - 3) // 2 + 1
    else:  # MaxPool2d(3, 2, ceil_mode=True)
        oh = -(-(h - 3) // 2) + 1
        x = np.pad(x, ((0, 0), (0, 0), (0, 2), (0, 2)), constant_values=-np.inf)
    return np.max([x[:, :, i:i + 2 * oh:2, j:j + 2 * oh:2] for i in range(3) for j in range(3)], axis=0)


def reference_features(s, x, flavour):
    """``[n, 3, S, S]`` -> the last feature map ``[n, 2048, s, s]`` (float64)."""
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    top, se = ("", "se") if flavour == "timm" else ("layer0.", "se_module")
    x = relu(_bn(_conv(x, s[f"{top}conv1.weight"], 2, 3), s, f"{top}bn1"))
    x = _maxpool(x, flavour)
    for stage, blocks in enumerate(BLOCKS, start=1):
        for b in range(blocks):
            p, stride = f"layer{stage}.{b}", (2 if b == 0 and stage > 1 else 1)
            y = relu(_bn(_conv(x, s[f"{p}.conv1.weight"]), s, f"{p}.bn1"))
            y = relu(_bn(_conv(y, s[f"{p}.conv2.weight"], stride, 1, groups=32), s, f"{p}.bn2"))
            y = _bn(_conv(y, s[f"{p}.conv3.weight"]), s, f"{p}.bn3")
            g = y.mean(axis=(2, 3), keepdims=True)
            g = relu(_conv(g, s[f"{p}.{se}.fc1.weight"], bias=s[f"{p}.{se}.fc1.bias"]))
            g = 1 / (1 + np.exp(-_conv(g, s[f"{p}.{se}.fc2.weight"], bias=s[f"{p}.{se}.fc2.bias"])))
            short = x if b else _bn(_conv(x, s[f"{p}.downsample.0.weight"], stride), s, f"{p}.downsample.1")
            x = relu(y * g + short)
    return x


def _convert(tmp_path, state, name="seresnext50"):
    from whale.models.convert import main

    src, out = tmp_path / "ckpt.npz", tmp_path / "out" / f"{name}.weights.h5"
    np.savez(src, **state)
    assert main(["--branch", name, "--from", str(src), "--out", str(out)]) == 0
    return out


def _landed(backbone, state, ignore):
    """Every state-dict tensor (conv kernels transposed OIHW -> HWIO) equals exactly one
    backbone variable, and every backbone variable got one tensor."""
    variables = {v.path: np.asarray(v.numpy()) for v in backbone.weights}
    unmatched = dict(variables)
    for name, value in state.items():
        if any(part in name for part in ignore):
            continue
        want = value.transpose(2, 3, 1, 0) if value.ndim == 4 else value
        hits = [p for p, v in variables.items() if v.shape == want.shape and np.array_equal(v, want)]
        assert len(hits) == 1, (name, hits)
        unmatched.pop(hits[0], None)
    assert not unmatched, sorted(unmatched)[:5]
    return variables


@pytest.mark.parametrize("flavour,size", [("timm", 64), ("cadene", 64), ("cadene", 66)])
def test_converted_seresnext50_equals_the_pytorch_model(flavour, size, tmp_path):
    from whale.models import branch_spec, build_branch
    from whale.models.registry import branch_options

    state = seresnext_state(flavour)
    out = _convert(tmp_path, state)
    branch = build_branch("seresnext50", (size, size, 3), weights=str(out))
    assert branch_spec(branch) == ("seresnext50", 3)
    assert branch_options(branch) == {"stem": flavour}  # read from the file
    backbone = branch.get_layer("backbone")
    variables = _landed(backbone, state, ("num_batches_tracked", "fc.", "last_linear."))
    se = "se" if flavour == "timm" else "se_module"
    # named spot checks: grouped conv kernel, SE bias, BN variance of a downsample
    path = {v.path.split("/")[-2] + "/" + v.path.split("/")[-1]: v.path for v in backbone.weights}
    np.testing.assert_array_equal(variables[path["stage2_block1_conv2/kernel"]],
                                  state["layer2.0.conv2.weight"].transpose(2, 3, 1, 0))
    np.testing.assert_array_equal(variables[path["stage3_block4_se_fc1/bias"]], state[f"layer3.3.{se}.fc1.bias"])
    np.testing.assert_array_equal(variables[path["stage4_block1_down_bn/moving_variance"]],
                                  state["layer4.0.downsample.1.running_var"])
    x = np.random.default_rng(1).standard_normal((2, size, size, 3)).astype(np.float32)
    got = np.asarray(backbone(x, training=False)).transpose(0, 3, 1, 2)
    want = reference_features(state, x.transpose(0, 3, 1, 2).astype(np.float64), flavour)
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))


def test_the_two_stems_differ_and_a_conflicting_stem_is_refused(tmp_path):
    from whale.models import build_branch, transfer_branch
    from whale.models.registry import branch_options

    out = _convert(tmp_path, seresnext_state("timm"))
    timm = build_branch("seresnext50", (64, 64, 3), weights=str(out))
    cadene = build_branch("seresnext50", (64, 64, 3), weights=None, options={"stem": "cadene"})
    cadene.set_weights(timm.get_weights())
    x = np.random.default_rng(2).uniform(0, 255, (2, 64, 64, 3)).astype(np.float32)
    assert not np.allclose(np.asarray(timm(x)), np.asarray(cadene(x)), rtol=1e-3)
    grown = transfer_branch(timm, 96)  # a size increase keeps the stem
    assert branch_options(grown) == {"stem": "timm"}
    with pytest.raises(DataError, match="stem='timm'.*stem='cadene'"):
        build_branch("seresnext50", (64, 64, 3), weights=str(out), options={"stem": "cadene"})
    with pytest.raises(DataError, match="converted for branch 'seresnext50', not 'densenet121'"):
        build_branch("densenet121", (64, 64, 3), weights=str(out))
    with pytest.raises(ConfigError, match="option stem must be one of cadene, timm"):
        build_branch("seresnext50", (64, 64, 3), options={"stem": "caffe"})


def test_missing_weights_file_names_it_and_the_converter_command(tmp_path):
    from whale.models import build_branch

    missing = tmp_path / "weights" / "seresnext50_32x4d.weights.h5"
    with pytest.raises(FileNotFoundError) as err:
        build_branch("seresnext50", (64, 64, 3), weights=str(missing))
    assert str(missing) in str(err.value)
    assert "python -m whale.models.convert --branch seresnext50 --from" in str(err.value)
    assert f"--out {missing}" in str(err.value)


@pytest.mark.parametrize("change,match", [
    ("drop", r"1 weights missing \(layer3\.2\.bn2\.running_var\)"),
    ("extra", r"1 names not mapped \(layer5\.0\.conv1\.weight\)"),
    ("shape", r"layer1\.0\.se\.fc1\.weight has shape \(8, 256, 1, 1\).*stage1_block1_se_fc1"),
    ("foreign", r"expected timm's 'conv1\.weight' or Cadene's 'layer0\.conv1\.weight'"),
])
def test_unmapped_missing_and_misshapen_tensors_are_named(change, match):
    from whale.models.convert import convert_state_dict

    state = seresnext_state("timm")
    if change == "drop":
        del state["layer3.2.bn2.running_var"]
    elif change == "extra":
        state["layer5.0.conv1.weight"] = np.zeros((8, 8, 1, 1), np.float32)
    elif change == "shape":
        state["layer1.0.se.fc1.weight"] = np.zeros((8, 256, 1, 1), np.float32)
    else:
        state = {f"backbone.{k}": v for k, v in state.items()}
    with pytest.raises(DataError, match=match):
        convert_state_dict("seresnext50", state)


def test_checkpoint_formats_and_missing_packages(tmp_path, monkeypatch):
    from whale.models.convert import main, read_state_dict

    state = {"module.layer0.conv1.weight": np.ones((2, 3, 1, 1), np.float32)}
    np.savez(tmp_path / "a.npz", **state)
    assert list(read_state_dict(tmp_path / "a.npz")) == ["layer0.conv1.weight"]  # module. unwrapped
    (tmp_path / "b.pth").write_bytes(b"not really")
    (tmp_path / "c.safetensors").write_bytes(b"not really")
    monkeypatch.setitem(sys.modules, "torch", None)  # as on a machine without torch
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    with pytest.raises(DataError, match="b.pth: not a PyTorch checkpoint"):  # read without torch
        read_state_dict(tmp_path / "b.pth")
    with pytest.raises(DataError, match="needs the 'safetensors' package"):
        read_state_dict(tmp_path / "c.safetensors")
    with pytest.raises(DataError, match="expected a .npz, .safetensors or .pth"):
        (tmp_path / "d.ckpt.txt").write_text("x")
        read_state_dict(tmp_path / "d.ckpt.txt")
    with pytest.raises(ConfigError, match="ending in .weights.h5"):
        main(["--branch", "seresnext50", "--from", str(tmp_path / "a.npz"), "--out", str(tmp_path / "x.h5")])


def test_torchvision_densenet121_lands_on_keras_densenet(tmp_path):
    from whale.models import build_branch

    rng = np.random.default_rng(3)
    s: dict[str, np.ndarray] = {}

    def bn(name, c):
        for i, part in enumerate(("weight", "bias", "running_mean", "running_var")):
            s[f"{name}.{part}"] = rng.uniform(0.5, 1.5, c).astype(np.float32) + i

    s["features.conv0.weight"] = rng.standard_normal((64, 3, 7, 7)).astype(np.float32)
    bn("features.norm0", 64)
    c = 64
    for block, layers in enumerate((6, 12, 24, 16), start=1):
        for i in range(1, layers + 1):
            p = f"features.denseblock{block}.denselayer{i}"
            # the pre-0.4 torchvision names ("norm.1") are still found in old checkpoints
            bn(f"{p}.norm.1" if block == 1 else f"{p}.norm1", c)
            s[f"{p}.conv1.weight"] = rng.standard_normal((128, c, 1, 1)).astype(np.float32)
            bn(f"{p}.norm2", 128)
            s[f"{p}.conv2.weight"] = rng.standard_normal((32, 128, 3, 3)).astype(np.float32)
            c += 32
        if block < 4:
            bn(f"features.transition{block}.norm", c)
            s[f"features.transition{block}.conv.weight"] = rng.standard_normal((c // 2, c, 1, 1)).astype(np.float32)
            c //= 2
    bn("features.norm5", c)
    s["classifier.weight"], s["classifier.bias"] = np.zeros((1000, c), np.float32), np.zeros(1000, np.float32)
    out = _convert(tmp_path, s, "densenet121")
    branch = build_branch("densenet121", (64, 64, 3), weights=str(out))
    renamed = {k.replace(".norm.1.", ".norm1."): v for k, v in s.items()}
    _landed(branch.get_layer("backbone"), renamed, ("classifier.",))
