"""Raw-pixel cosine baseline: normalisation, score range, blockwise equals direct."""

import numpy as np
import pytest

from whale.baseline import cosine_scores, pixel_features


def test_pixel_features_centred_unit_norm():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (6, 8, 8, 3), dtype=np.uint8)
    images[5] = 17  # constant image -> zero row
    feats = pixel_features(images)
    assert feats.dtype == np.float32 and feats.shape == (6, 8 * 8 * 3)
    np.testing.assert_allclose(np.linalg.norm(feats[:5], axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(feats[:5].mean(axis=1), 0.0, atol=1e-6)
    assert not feats[5].any()
    np.testing.assert_array_equal(pixel_features(list(images)), feats)
    # brightness and contrast changes leave the features unchanged
    brighter = (images[:1].astype(np.int32) // 2 + 60).astype(np.uint8)
    np.testing.assert_allclose(pixel_features(brighter), pixel_features(images[:1] // 2), atol=1e-6)


def test_pixel_features_errors():
    with pytest.raises(ValueError, match=r"images\[1\]"):
        pixel_features([np.zeros((4, 4, 1), np.uint8), np.zeros((5, 5, 1), np.uint8)])
    with pytest.raises(ValueError, match="uint8"):
        pixel_features(np.zeros((2, 4, 4, 1), np.float32))


def test_cosine_scores_blockwise_and_range():
    rng = np.random.default_rng(1)
    q = pixel_features(rng.integers(0, 256, (7, 6, 6, 1), dtype=np.uint8))
    g = pixel_features(rng.integers(0, 256, (11, 6, 6, 1), dtype=np.uint8))
    s = cosine_scores(q, g, block=3)
    assert s.dtype == np.float32 and s.shape == (7, 11)
    np.testing.assert_allclose(s, (q @ g.T + 1) / 2, atol=1e-6)
    assert s.min() >= 0 and s.max() <= 1
    self_scores = cosine_scores(q, q)
    np.testing.assert_allclose(np.diag(self_scores), 1.0, atol=1e-6)
    np.testing.assert_allclose(cosine_scores(q, -q).diagonal(), 0.0, atol=1e-6)
    with pytest.raises(ValueError, match="equal D"):
        cosine_scores(q, g[:, :5])
