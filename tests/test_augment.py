"""Tests for whale.data.augment: shapes, dtypes, determinism for 1- and 3-channel images."""
import pickle
import threading

import numpy as np
import pytest

from whale.data.augment import Augmenter, build_augmenter, build_plain


def image(size, channels, seed=0):
    rng = np.random.default_rng(seed)
    # smooth-ish content so blur/crop changes are visible, plus some texture
    y, x = np.mgrid[0:size, 0:size]
    base = (127 + 100 * np.sin(x / 5.0) * np.cos(y / 7.0))[:, :, None]
    noise = rng.integers(0, 40, (size, size, channels))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("size", [48, 64])
def test_shape_dtype(channels, size):
    aug = build_augmenter(size, channels)
    img = image(round(size * 1.15), channels)
    for i in range(30):
        out = aug(img, np.random.default_rng(i))
        assert out.shape == (size, size, channels) and out.dtype == np.uint8
        assert out.flags.c_contiguous


@pytest.mark.parametrize("channels", [1, 3])
def test_deterministic_given_rng(channels):
    aug = build_augmenter(64, channels)
    img = image(74, channels)
    a = aug(img, np.random.default_rng(123))
    b = build_augmenter(64, channels)(img, np.random.default_rng(123))  # a fresh pipeline too
    assert np.array_equal(a, b)
    outs = [aug(img, np.random.default_rng(s)) for s in range(8)]
    assert len({o.tobytes() for o in outs}) == 8  # different seeds differ
    # the same generator advances: two draws from it differ
    rng = np.random.default_rng(5)
    assert not np.array_equal(aug(img, rng), aug(img, rng))


def test_input_not_modified_and_checked():
    aug = build_augmenter(64, 3)
    img = image(74, 3)
    before = img.copy()
    aug(img, np.random.default_rng(0))
    assert np.array_equal(img, before)
    with pytest.raises(ValueError, match="channel"):
        aug(image(74, 1), np.random.default_rng(0))
    with pytest.raises(ValueError, match="uint8"):
        aug(img.astype(np.float32), np.random.default_rng(0))


def test_transforms_fire_independently():
    # Compose.set_random_seed would give every transform the same seed, so two transforms with
    # the same p would always fire together; ours must not: Affine, RandomBrightnessContrast and
    # ImageCompression (p = 0.5 each) fire together about a quarter of the time per pair.
    aug = Augmenter(64, 3)
    _, nodes = aug._pipeline()
    fired = {}
    for node in nodes:
        if type(node).__name__ in ("Affine", "RandomBrightnessContrast", "ImageCompression"):
            def apply(*args, _name=type(node).__name__, _apply=node.apply_with_params, **kwargs):
                fired[_name] = True
                return _apply(*args, **kwargs)
            node.apply_with_params = apply
    rng, img, both = np.random.default_rng(0), image(74, 3), []
    for _ in range(400):
        fired.clear()
        aug(img, rng)
        both.append([fired.get(n, False) for n in ("Affine", "RandomBrightnessContrast", "ImageCompression")])
    both = np.array(both)
    assert np.all(np.abs(both.mean(0) - 0.5) < 0.1)  # each fires half the time
    for i, j in ((0, 1), (0, 2), (1, 2)):
        assert abs(np.mean(both[:, i] & both[:, j]) - 0.25) < 0.08  # independent: 1/4, not 1/2


def test_threads_and_pickle_same_result():
    aug = build_augmenter(64, 3)
    img = image(74, 3)
    expected = [aug(img, np.random.default_rng(s)) for s in range(16)]
    got = [None] * 16

    def work(offset):
        for s in range(offset, 16, 2):
            got[s] = aug(img, np.random.default_rng(s))

    threads = [threading.Thread(target=work, args=(o,)) for o in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    clone = pickle.loads(pickle.dumps(aug))
    assert np.array_equal(clone(img, np.random.default_rng(3)), expected[3])


@pytest.mark.parametrize("channels", [1, 3])
def test_plain_and_strength_zero(channels):
    img = image(90, channels)
    plain = build_plain(48, channels)
    out = plain(img)
    assert out.shape == (48, 48, channels) and out.dtype == np.uint8
    zero = build_augmenter(48, channels, strength=0)
    assert np.array_equal(zero(img, np.random.default_rng(0)), out)
    assert np.array_equal(plain(out), out)  # already the right size: unchanged


def test_weak_strength_stays_close():
    img = image(74, 3)
    weak = build_augmenter(64, 3, strength=0.1)
    plain = build_plain(64, 3)(img).astype(float)
    diffs = [np.abs(weak(img, np.random.default_rng(s)).astype(float) - plain).mean() for s in range(10)]
    strong = build_augmenter(64, 3, strength=1.0)
    diffs_strong = [np.abs(strong(img, np.random.default_rng(s)).astype(float) - plain).mean() for s in range(10)]
    assert np.mean(diffs) < np.mean(diffs_strong)


def test_koch_affine_ranges_and_identity_share():
    """Koch et al.'s distortions: each of 4 factors on with p = 0.5, within their ranges."""
    from whale.data.augment import KochAffine

    aug = KochAffine(105, channels=1)
    rng = np.random.default_rng(0)
    mats = np.stack([aug.matrix(rng) for _ in range(4000)])
    centre = np.full(2, 52.0)
    moved = np.abs(mats[:, :, :2] @ centre + mats[:, :, 2] - centre)
    assert moved.max() <= 2.0 + 1e-9  # only the translation moves the centre, by <= 2 px an axis
    identity = np.all(np.isclose(mats, np.hstack([np.eye(2), np.zeros((2, 1))])), axis=(1, 2))
    assert abs(identity.mean() - 1 / 16) < 0.015  # all four factors off
    det = np.linalg.det(mats[:, :, :2])
    # scale 0.8-1.2 per axis, shear +-0.3 each way: det = sx*sy*(1 - rho_x*rho_y)
    assert det.min() >= 0.64 * (1 - 0.09) - 1e-9 and det.max() <= 1.44 * 1.09 + 1e-9


def test_koch_affine_output_deterministic_and_blank_stays_blank():
    img = np.full((120, 120, 1), 255, np.uint8)
    img[40:80, 50:60] = 0
    aug = build_augmenter(105, channels=1, style="koch")
    a, b = aug(img, np.random.default_rng(7)), aug(img, np.random.default_rng(7))
    assert a.shape == (105, 105, 1) and a.dtype == np.uint8 and np.array_equal(a, b)
    blank = np.full((120, 120, 1), 200, np.uint8)
    assert np.all(aug(blank, np.random.default_rng(1)) == 200)  # replicated border, no black corners
    assert isinstance(build_augmenter(105, 1, strength=0, style="koch"), type(build_plain(105, 1)))
    with pytest.raises(ValueError, match="style"):
        build_augmenter(105, 1, style="nope")


@pytest.mark.parametrize("style", ["paper", "koch"])
@pytest.mark.parametrize("channels", [1, 3])
def test_non_square_sizes_keep_their_shape_and_aspect(style, channels):
    """A run's ``aspect``: ``(height, width)`` outputs from crops stored at 1.15 x each side."""
    img = np.concatenate([image(37, channels, 0), image(37, channels, 1)], axis=1)  # 37 x 74: 2:1
    aug = build_augmenter((32, 64), channels, style=style)
    outs = [aug(img, np.random.default_rng(i)) for i in range(12)]
    assert all(o.shape == (32, 64, channels) and o.dtype == np.uint8 for o in outs)
    assert np.array_equal(outs[0], build_augmenter((32, 64), channels, style=style)(img, np.random.default_rng(0)))
    assert build_plain((32, 64), channels)(img).shape == (32, 64, channels)


def test_non_square_views_take_windows_of_the_output_aspect():
    from whale.data.augment import VIEW_WINDOW, build_view

    img = np.arange(40 * 80, dtype=np.uint16).reshape(40, 80, 1).astype(np.uint8)
    left = build_view("shift_left", (40, 80), 1)(img)
    mh, mw = round(VIEW_WINDOW * 40), round(VIEW_WINDOW * 80)  # 36 x 72: the largest 2:1 window is the image
    want = build_plain((40, 80), 1)(np.ascontiguousarray(img[2:2 + mh, :mw]))
    np.testing.assert_array_equal(left, want)
    right = build_view("shift_right", (40, 80), 1)(img)
    np.testing.assert_array_equal(right, build_plain((40, 80), 1)(np.ascontiguousarray(img[2:2 + mh, 80 - mw:])))
    # A square output of the same crop keeps the paper's square window (0.9 of the shorter side).
    sq = build_view("shift_left", 16, 1)(img)
    np.testing.assert_array_equal(sq, build_plain(16, 1)(np.ascontiguousarray(img[2:38, :36])))
