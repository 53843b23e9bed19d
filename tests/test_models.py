"""Tests for whale.models: registry, preprocessing, head, siamese, weights, save/load.

Big backbones are built once per module at their smallest size; no downloads.
"""
import h5py
import keras
import numpy as np
import pytest

from whale.core.errors import ConfigError, DataError
from whale.models import (
    BRANCHES,
    Preprocess,
    adapt_first_conv,
    branch_spec,
    build_branch,
    build_head,
    build_siamese,
    compile_siamese,
    head_param_count,
    load_model,
    model_image_size,
    model_input_size,
    resize_siamese,
    save_model,
    set_branch_trainable,
    transfer_branch,
)
from whale.models.registry import branch_options
from whale.models.seresnext import PUBLISHED_PARAMS_NO_FC

pytestmark = pytest.mark.backend

FEATURES = {"densenet121": 1024, "resnet50": 2048, "inceptionv3": 2048, "seresnext50": 2048,
            "efficientnet_lite0": 1280, "efficientnet_lite1": 1280, "efficientnet_lite2": 1280,
            "convnet_v1": 512, "convnet_v2": 512, "small": 128, "tiny": 32}
PUBLISHED = {"densenet121": 7_037_504, "resnet50": 23_587_712, "inceptionv3": 21_802_784}


def _size(name):
    return 75 if name == "inceptionv3" else 64


def _images(n, size, channels=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(n, size, size, channels)).astype("float32")


def _np(x):
    return keras.ops.convert_to_numpy(x)


@pytest.fixture(scope="module")
def branches(backend):
    """Every registry branch at its smallest 3-channel size, built once."""
    return {name: build_branch(name, (_size(name), _size(name), 3)) for name in BRANCHES}


@pytest.fixture()
def tiny_siamese(backend):
    keras.utils.set_random_seed(0)
    return build_siamese(build_branch("tiny", (64, 64, 3)), build_head(32))


# ---------------------------------------------------------------- registry


def test_registry_names():
    assert set(BRANCHES) == set(FEATURES)


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_every_branch_builds_with_documented_feature_size(branches, name):
    branch = branches[name]
    s = _size(name)
    out = _np(branch(_images(2, s), training=False))
    assert branch.name == "branch"
    assert out.shape == (2, FEATURES[name]) and out.dtype == np.float32
    assert np.isfinite(out).all()
    assert branch_spec(branch) == (name, 3)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_keras_applications_param_counts_match_published(branches, name):
    # Keras counts BatchNorm moving statistics, as the published Keras figures do.
    assert branches[name].count_params() == PUBLISHED[name]


def test_seresnext50_trainable_params_match_published(branches):
    # Published (Cadene/timm) se_resnext50_32x4d: 27,559,896 with the 2048x1000 fc, i.e.
    # 25,510,896 without it. PyTorch counts BN gamma/beta but not the moving statistics,
    # which Keras adds as non-trainable weights, so compare trainable parameters.
    branch = branches["seresnext50"]
    trainable = sum(int(np.prod(w.shape)) for w in branch.trainable_weights)
    assert PUBLISHED_PARAMS_NO_FC == 25_510_896
    assert abs(trainable - PUBLISHED_PARAMS_NO_FC) <= 0.01 * PUBLISHED_PARAMS_NO_FC
    assert trainable == PUBLISHED_PARAMS_NO_FC  # exact, in fact


def test_unknown_branch_lists_valid_names():
    with pytest.raises(ValueError) as err:
        build_branch("vgg16", (64, 64, 3))
    for name in BRANCHES:
        assert name in str(err.value)


@pytest.mark.parametrize("shape", [(63, 63, 3), (1025, 1025, 3), (64, 63, 3), (64, 1025, 3), (64, 64, 2),
                                   (64, 64)])
def test_bad_input_shapes_raise(shape):
    with pytest.raises(ConfigError):
        build_branch("convnet_v1", shape)


@pytest.mark.parametrize("name", ["small", "tiny"])
def test_a_non_square_branch_transfers_its_weights_to_any_shape(name):
    """A run's ``aspect``: (H, W) inputs; the weights do not depend on the shape (global max pooling)."""
    wide = build_branch(name, (32, 64, 1))
    assert model_input_size(wide) == (32, 64) and model_image_size(wide) == 32
    x = np.random.default_rng(0).integers(0, 256, (2, 48, 96, 1)).astype("float32")
    bigger = transfer_branch(wide, (48, 96))
    square = transfer_branch(wide, 64)
    assert model_input_size(bigger) == (48, 96) and model_input_size(square) == (64, 64)
    for a, b in zip(wide.get_weights(), bigger.get_weights()):
        np.testing.assert_array_equal(a, b)
    f = _np(bigger(x))
    assert f.shape == (2, FEATURES[name]) and np.isfinite(f).all()
    with pytest.raises(ConfigError, match="accepts input sides 32..1024 px, got 32 x 31"):
        build_branch(name, (32, 31, 1))


@pytest.mark.parametrize("name", ["small", "tiny"])
def test_cpu_branches_accept_32_px_but_not_less(name):
    assert build_branch(name, (32, 32, 1)).output_shape[-1] == FEATURES[name]
    with pytest.raises(ConfigError, match="32"):
        build_branch(name, (31, 31, 3))


def test_small_pool_stem_reads_a_quarter_of_the_pixels_with_the_same_weights():
    conv = build_branch("small", (64, 64, 1))
    pool = build_branch("small", (64, 64, 1), options={"stem": "pool"})
    assert branch_options(conv) == {"stem": "conv"} and branch_options(pool) == {"stem": "pool"}
    maps = [b.get_layer("backbone").output_shape[1:3] for b in (conv, pool)]
    assert maps == [(2, 2), (1, 1)]  # S/32 and S/64
    assert [w.shape for w in conv.get_weights()] == [w.shape for w in pool.get_weights()]
    assert _np(pool(_images(2, 64, 1))).shape == (2, 128)
    assert branch_options(transfer_branch(pool, 96)) == {"stem": "pool"}  # a size increase keeps it
    with pytest.raises(ConfigError, match="option stem must be one of conv, pool"):
        build_branch("small", (64, 64, 1), options={"stem": "timm"})


def test_the_config_knows_the_registry_branches_and_stems_without_importing_it():
    from whale.config import KNOWN_BRANCHES, STEMS

    assert set(KNOWN_BRANCHES) == set(BRANCHES)
    assert STEMS == {name: spec.options["stem"] for name, spec in BRANCHES.items() if "stem" in spec.options}


def test_inception_needs_75_px():
    with pytest.raises(ConfigError, match="75"):
        build_branch("inceptionv3", (74, 74, 3))


@pytest.mark.parametrize("name", ["seresnext50", "convnet_v1", "convnet_v2", "tiny"])
def test_imagenet_unavailable_is_a_clear_error(name):
    with pytest.raises(ConfigError, match="ImageNet weights are not available"):
        build_branch(name, (64, 64, 3), weights="imagenet")


def test_one_channel_branch_builds(backend):
    branch = build_branch("tiny", (64, 64, 1))
    assert _np(branch(_images(2, 64, 1))).shape == (2, 32)
    assert branch_spec(branch) == ("tiny", 1)


# ---------------------------------------------------------------- preprocessing


def test_preprocess_modes_numerically(backend):
    x = _images(2, 4, 3)
    caffe = _np(Preprocess("caffe")(x))
    np.testing.assert_allclose(caffe, x[..., ::-1] - np.array([103.939, 116.779, 123.68]),
                               rtol=1e-5, atol=1e-4)
    torch = _np(Preprocess("torch")(x))
    np.testing.assert_allclose(
        torch, (x / 255 - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225]),
        rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(Preprocess("tf")(x)), x / 127.5 - 1, atol=1e-6)
    std = _np(Preprocess("standardize")(x))
    np.testing.assert_allclose(std.mean(axis=(1, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(std.std(axis=(1, 2, 3)), 1, atol=1e-4)
    gray = _np(Preprocess("torch")(x[..., :1]))
    assert gray.shape == (2, 4, 4, 1) and np.isfinite(gray).all()


def test_preprocess_config_round_trip():
    layer = Preprocess("caffe", branch="resnet50", name="preprocess")
    clone = Preprocess.from_config(layer.get_config())
    assert (clone.mode, clone.branch, clone.name) == ("caffe", "resnet50", "preprocess")
    with pytest.raises(ValueError):
        Preprocess("bogus")


# ---------------------------------------------------------------- head


@pytest.mark.parametrize("d,mid,hidden", [(32, 32, 0), (1024, 32, 0), (64, 8, 16)])
def test_head_param_count(backend, d, mid, hidden):
    head = build_head(d, mid=mid, hidden=hidden)
    expected = head_param_count(d, mid, hidden)
    if hidden == 0:
        assert expected == (4 * mid + mid) + (mid + 1) + (d + 1)
    else:
        assert expected == (4 * mid + mid) + (mid + 1) + (d * hidden + hidden) + (hidden + 1)
    assert head.count_params() == expected


def test_head_is_exactly_symmetric(backend):
    keras.utils.set_random_seed(1)
    head = build_head(48, mid=8, hidden=4)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 48)).astype("float32")
    y = rng.normal(size=(16, 48)).astype("float32")
    gxy, gyx = _np(head([x, y])), _np(head([y, x]))
    assert gxy.shape == (16, 1)
    np.testing.assert_array_equal(gxy, gyx)
    assert ((gxy > 0) & (gxy < 1)).all()


# ---------------------------------------------------------------- siamese


def test_siamese_layers_are_retrievable(tiny_siamese):
    assert tiny_siamese.get_layer("branch").name == "branch"
    assert tiny_siamese.get_layer("head").name == "head"
    out = _np(tiny_siamese([_images(3, 64), _images(3, 64, seed=1)]))
    assert out.shape == (3, 1)


def test_freezing_branch_takes_effect_after_recompile(tiny_siamese):
    model = tiny_siamese
    compile_siamese(model, lr=1e-2)
    n_all = len(model.trainable_weights)
    set_branch_trainable(model, False)
    compile_siamese(model, lr=1e-2)
    assert len(model.trainable_weights) < n_all
    branch_before = [w.copy() for w in model.get_layer("branch").get_weights()]
    head_before = [w.copy() for w in model.get_layer("head").get_weights()]
    a, b = _images(4, 64), _images(4, 64, seed=1)
    model.fit([a, b], np.array([[1], [0], [1], [0]], "float32"), batch_size=4, epochs=1,
              verbose=0)
    for before, after in zip(branch_before, model.get_layer("branch").get_weights()):
        np.testing.assert_array_equal(before, after)  # BN moving stats included
    head_after = model.get_layer("head").get_weights()
    assert any(not np.array_equal(x, y) for x, y in zip(head_before, head_after))
    set_branch_trainable(model, True)
    compile_siamese(model, lr=1e-2)
    assert len(model.trainable_weights) == n_all


def test_compile_l2_adds_penalty(tiny_siamese):
    compile_siamese(tiny_siamese, lr=1e-3, l2=1e-3)
    assert len(tiny_siamese.losses) > 0
    compile_siamese(tiny_siamese, lr=1e-3, l2=0.0)
    assert len(tiny_siamese.losses) == 0


def test_transfer_branch_copies_all_weights(backend):
    keras.utils.set_random_seed(2)
    small = build_branch("tiny", (64, 64, 3))
    big = transfer_branch(small, 96)
    assert big.input_shape == (None, 96, 96, 3)
    assert branch_spec(big) == ("tiny", 3)
    for x, y in zip(small.get_weights(), big.get_weights()):
        np.testing.assert_array_equal(x, y)
    # No weight depends on the size: transferring back reproduces the features exactly.
    back = transfer_branch(big, 64)
    img = _images(2, 64)
    np.testing.assert_array_equal(_np(small(img)), _np(back(img)))
    assert _np(big(_images(2, 96))).shape == (2, 32)


def test_resize_siamese_keeps_weights(tiny_siamese):
    bigger = resize_siamese(tiny_siamese, 96)
    assert bigger.input_shape[0] == (None, 96, 96, 3)
    for part in ("branch", "head"):
        for x, y in zip(tiny_siamese.get_layer(part).get_weights(),
                        bigger.get_layer(part).get_weights()):
            np.testing.assert_array_equal(x, y)
    assert bigger.get_layer("head") is not tiny_siamese.get_layer("head")
    assert _np(bigger([_images(1, 96), _images(1, 96, seed=3)])).shape == (1, 1)


# ---------------------------------------------------------------- save / load


def test_save_load_round_trip_identical_outputs(tiny_siamese, tmp_path):
    path = save_model(tiny_siamese, tmp_path / "model.keras")
    assert path.is_file() and [p.name for p in tmp_path.iterdir()] == ["model.keras"]
    loaded = load_model(path, expect=tiny_siamese)
    a, b = _images(3, 64), _images(3, 64, seed=1)
    np.testing.assert_array_equal(_np(tiny_siamese([a, b])), _np(loaded([a, b])))
    assert branch_spec(loaded.get_layer("branch")) == ("tiny", 3)


def test_load_wrong_architecture_fails_clearly(tiny_siamese, tmp_path):
    path = save_model(tiny_siamese, tmp_path / "model.keras")
    other = build_siamese(build_branch("tiny", (64, 64, 3)), build_head(32, mid=16))
    with pytest.raises(DataError, match="model.keras.*architecture"):
        load_model(path, expect=other)


def test_load_non_keras_file_fails_clearly(tmp_path):
    bogus = tmp_path / "bogus.keras"
    bogus.write_text("not a model")
    with pytest.raises(DataError, match="bogus.keras"):
        load_model(bogus)
    with pytest.raises(FileNotFoundError, match="absent.keras"):
        load_model(tmp_path / "absent.keras")


# ---------------------------------------------------------------- weights files


def test_missing_weights_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.weights.h5"):
        build_branch("tiny", (64, 64, 3), weights=str(tmp_path / "nothere.weights.h5"))


def test_weights_files_whole_branch_and_backbone(backend, tmp_path):
    keras.utils.set_random_seed(3)
    src = build_branch("tiny", (64, 64, 3))
    img = _images(2, 64)
    want = _np(src(img))
    src.save_weights(tmp_path / "branch.weights.h5")
    src.get_layer("backbone").save_weights(tmp_path / "backbone.weights.h5")
    from keras.src.legacy.saving import legacy_h5_format  # the keras.applications format

    with h5py.File(tmp_path / "backbone_notop.h5", "w") as f:
        legacy_h5_format.save_weights_to_hdf5_group(f, src.get_layer("backbone"))
    for name in ("branch.weights.h5", "backbone.weights.h5", "backbone_notop.h5"):
        got = build_branch("tiny", (96, 96, 3), weights=tmp_path / name)
        got64 = transfer_branch(got, 64)
        np.testing.assert_allclose(_np(got64(img)), want, rtol=1e-6, err_msg=name)


def test_weights_file_shape_mismatch_names_file_and_layer(backend, tmp_path):
    build_branch("convnet_v1", (64, 64, 3)).save_weights(tmp_path / "v1.weights.h5")
    with pytest.raises(DataError) as err:
        build_branch("tiny", (64, 64, 3), weights=tmp_path / "v1.weights.h5")
    msg = str(err.value)
    assert "v1.weights.h5" in msg and ("variable" in msg or "layer" in msg)


def test_three_channel_weights_file_into_gray_branch(backend, tmp_path):
    keras.utils.set_random_seed(4)
    rgb = build_branch("tiny", (64, 64, 3))
    rgb.save_weights(tmp_path / "rgb.weights.h5")
    gray = build_branch("tiny", (64, 64, 1), weights=tmp_path / "rgb.weights.h5")
    g = _images(2, 64, 1)
    np.testing.assert_allclose(_np(gray(g)), _np(rgb(np.repeat(g, 3, axis=-1))),
                               rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- 1-channel adaptation


def test_adapt_first_conv_gray_equals_replicated_rgb(backend):
    keras.utils.set_random_seed(5)
    rgb = build_branch("tiny", (64, 64, 3))
    gray = build_branch("tiny", (64, 64, 1))
    adapt_first_conv(rgb, gray)
    k3, k1 = rgb.weights[0].numpy(), gray.weights[0].numpy()
    np.testing.assert_allclose(k1, k3.sum(axis=2, keepdims=True), rtol=1e-6)
    g = _images(3, 64, 1)
    np.testing.assert_allclose(_np(gray(g)), _np(rgb(np.repeat(g, 3, axis=-1))),
                               rtol=1e-4, atol=1e-4)


def test_adapt_first_conv_densenet(branches):
    rgb = branches["densenet121"]
    gray = build_branch("densenet121", (64, 64, 1))
    adapt_first_conv(rgb, gray)
    first = [i for i, w in enumerate(rgb.weights) if len(w.shape) == 4][0]
    for i, (s, d) in enumerate(zip(rgb.get_weights(), gray.get_weights())):
        if i == first:
            assert s.shape[2] == 3 and d.shape[2] == 1
            np.testing.assert_allclose(d, s.sum(axis=2, keepdims=True), rtol=1e-5, atol=1e-7)
        else:
            np.testing.assert_array_equal(s, d)
    assert gray.count_params() == PUBLISHED["densenet121"] - 7 * 7 * 2 * 64


def test_adapt_first_conv_rejects_other_architectures(backend):
    with pytest.raises(ValueError, match="adapt_first_conv"):
        adapt_first_conv(build_branch("tiny", (64, 64, 3)), build_branch("convnet_v1",
                                                                         (64, 64, 1)))


def test_set_l2_takes_effect_on_the_next_traced_step(tiny_siamese):
    from whale.models import set_l2

    compile_siamese(tiny_siamese, 1e-3)
    x = [_images(4, 64), _images(4, 64, seed=1)]
    y = np.ones((4, 1), np.float32)
    plain = tiny_siamese.fit(x, y, epochs=1, verbose=0).history["loss"][0]
    set_l2(tiny_siamese, 10.0)
    tiny_siamese.make_train_function(force=True)
    penalised = tiny_siamese.fit(x, y, epochs=1, verbose=0).history["loss"][0]
    assert penalised > 10 * plain  # the L2 term dominates the cross-entropy
