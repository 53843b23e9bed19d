"""The learned local descriptor (real-whale issue, item 5): patches at keypoints, self-supervised homography
pairs, the ConvNet's output, training into a folder, and the matcher's features through it."""
import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from whale.core.errors import DataError  # noqa: E402
from whale.keypoints import FeatureStore, KeypointMatcher, extract, load_keypoint_config  # noqa: E402
from whale.keypoints.patches import PATCH_SCALE, homography_pairs, local_scale, patches, photo_homography  # noqa: E402
from tests.test_keypoints import pattern, warp, write  # noqa: E402


def test_a_patch_is_the_image_around_its_keypoint_scaled_to_its_size():
    img = np.zeros((100, 100), np.uint8)
    img[40:60, 30:50] = 200  # a 20 px square centred at (40, 50)
    out = patches(img, np.float32([[40, 50], [90, 10]]), np.float32([20 / PATCH_SCALE, 8]), size=16)
    assert out.shape == (2, 16, 16) and out.dtype == np.uint8
    assert out[0, 2:14, 2:14].min() == 200  # the square fills the patch of its own size
    assert out[1].max() == 0
    grown = patches(img, np.float32([[40, 50]]), np.float32([40 / PATCH_SCALE]), size=16)[0]
    assert grown[8, 8] == 200 and grown[0, 0] == 0  # twice the diameter: the square and its surroundings


def test_local_scale_of_a_scaling_and_pairs_of_the_same_points():
    H = np.diag([2.0, 2.0, 1.0])
    assert np.allclose(local_scale(H, np.float32([[3, 4], [50, 7]])), 2.0)
    rng = np.random.default_rng(0)
    assert np.allclose(photo_homography(rng, 60, 80, 0.0), np.eye(3), atol=1e-9)
    img = pattern(3)
    a, b = homography_pairs(img, np.random.default_rng(1), 300, 0.04, 1.2, shift=0.0, per_photo=20)
    assert a.shape == b.shape and 0 < len(a) <= 20
    assert np.abs(a.astype(int) - b.astype(int)).mean() < 2  # no warp: the same patches
    a, b = homography_pairs(img, np.random.default_rng(1), 300, 0.04, 1.2, shift=0.1, per_photo=20)
    other = np.abs(a[:, None].astype(int) - b[None].astype(int)).mean(axis=(2, 3))
    assert (other.argmin(axis=1) == np.arange(len(a))).mean() > 0.5  # its own warped patch looks most alike


def test_the_descriptor_is_a_non_negative_unit_vector_and_trains_into_a_folder(tmp_path):
    from whale.keypoints import descriptor, learn

    net = descriptor.build_net(width=4, dim=128)
    out = np.asarray(net(descriptor.standardise(np.random.default_rng(0).integers(0, 255, (5, 32, 32), np.uint8))))
    assert out.shape == (5, 128) and (out >= 0).all() and np.allclose((out * out).sum(1), 1, atol=1e-4)
    photos = [write(tmp_path / "photos" / f"p{i}.png", pattern(i)) for i in range(6)]
    cfg = load_keypoint_config()
    spec = learn.train(photos, tmp_path / "desc", cfg.features, epochs=2, n_pairs=200, pairs_per_batch=16,
                            width=4, progress=False, log=lambda *_: None)
    assert spec["pairs"] > 16 and len(spec["loss_by_epoch"]) == 2 and all(np.isfinite(spec["loss_by_epoch"]))
    learned = load_keypoint_config(overrides={"features.descriptor": str(tmp_path / "desc")})
    assert learned.fingerprint() != cfg.fingerprint()
    f_root, f_learned = extract(photos[0], cfg.features), extract(photos[0], learned.features)
    assert np.array_equal(f_root.xy, f_learned.xy)  # the same keypoints, other numbers
    assert f_learned.desc.dtype == np.uint8 and not np.array_equal(f_root.desc, f_learned.desc)
    gallery = FeatureStore(learned, tmp_path / "store").features(photos, workers=1, progress=False)
    query = FeatureStore(learned, tmp_path / "store").features(
        [write(tmp_path / "q.png", warp(pattern(2), 7))], workers=1, progress=False)
    result = KeypointMatcher(learned, gallery).match(query, progress=False)
    assert result.scores.shape == (1, 6) and np.isfinite(result.scores).all()
    with pytest.raises(DataError, match="not a trained descriptor"):
        extract(photos[0], load_keypoint_config(overrides={"features.descriptor": str(tmp_path / "none")}).features)


def test_settings_added_later_keep_the_stored_features_valid():
    cfg = load_keypoint_config()
    assert cfg.fingerprint() == load_keypoint_config(overrides={"features.min_side": 0,
                                                                "features.descriptor": "rootsift"}).fingerprint()
    assert cfg.fingerprint() != load_keypoint_config(overrides={"features.min_side": 600}).fingerprint()
