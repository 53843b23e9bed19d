"""whale.data.homography: the paper's patterns and homographies, pair/triplet labels, pairs of any image."""

import numpy as np
import pytest

from whale.data import homography as hg


def test_pattern_is_a_white_square_with_disks_on_black():
    img, centres = hg.draw_pattern(np.random.default_rng(0))
    assert img.shape == (150, 150) and img.dtype == np.uint8 and centres.shape == (10, 2)
    assert set(np.unique(img)) == {0, 255}
    assert not img[:25].any() and not img[125:].any() and not img[:, :25].any() and not img[:, 125:].any()
    # Inside the square: black pixels are exactly the 10 disks of diameter 5 (21 pixels each at r = 2.5).
    inside = img[25:125, 25:125]
    assert (inside == 0).sum() == 10 * 21
    for x, y in centres.astype(int):
        assert img[y, x] == 0 and img[y, x + 3] == 255 and img[y - 3, x] == 255
        assert 25 + 2 <= x <= 124 - 2 and 25 + 2 <= y <= 124 - 2
    d = np.linalg.norm(centres[:, None] - centres[None], axis=-1)
    assert (d[~np.eye(10, dtype=bool)] > 6).all()


def test_random_homography_maps_the_square_onto_the_sampled_quadrangle():
    corners = hg.square_corners()
    np.testing.assert_allclose(corners, [[24.5, 24.5], [24.5, 124.5], [124.5, 124.5], [124.5, 24.5]])
    centre = np.array([74.5, 74.5])
    for seed in range(50):
        quad = hg.random_quadrangle(np.random.default_rng(seed), 25, 180, corners, centre)
        H = hg.random_homography(np.random.default_rng(seed), 25, 180)
        assert H.shape == (3, 3) and H.dtype == np.float64
        np.testing.assert_allclose(hg.map_points(H, corners), quad.corners, atol=1e-3)
        # Every corner shift is at most R before the rotation (the paper's definition) ...
        assert (np.linalg.norm(quad.shifts, axis=1) <= 25 + 1e-9).all()
        assert abs(quad.phi_deg) <= 180
        # ... and the quadrangle is the shifted square rotated by phi about the centre.
        a = np.deg2rad(quad.phi_deg)
        rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        np.testing.assert_allclose((corners + quad.shifts - centre) @ rot.T + centre, quad.corners, atol=1e-9)


def test_shifts_fill_the_disk_uniformly_by_area_and_angles_stay_in_bounds():
    rng = np.random.default_rng(1)
    corners, centre = hg.square_corners(), np.array([74.5, 74.5])
    quads = [hg.random_quadrangle(rng, 15, 90, corners, centre) for _ in range(2000)]
    r = np.linalg.norm(np.concatenate([q.shifts for q in quads]), axis=1)
    phi = np.array([q.phi_deg for q in quads])
    assert r.max() <= 15 and r.max() > 14.5
    # Uniform over the area: P(r <= R / 2) = 1/4 (a uniform radius would give 1/2).
    assert abs((r <= 7.5).mean() - 0.25) < 0.03
    assert np.abs(phi).max() <= 90 and np.abs(phi).max() > 85 and abs(phi.mean()) < 5


def test_a_warped_disk_centre_lands_where_the_homography_maps_it():
    rng = np.random.default_rng(2)
    img, centres = hg.draw_pattern(rng)
    H = hg.random_homography(rng, 15, 90)
    out = hg.warp(img, H)
    assert out.shape == img.shape and out.dtype == np.uint8
    mapped = hg.map_points(H, centres)
    for (x, y) in mapped:
        # The centre pixel of the warped disk is black; the local minimum sits within a pixel of H(c).
        xi, yi = int(round(x)), int(round(y))
        win = out[yi - 1:yi + 2, xi - 1:xi + 2].astype(float)
        assert win.min() < 60
        yy, xx = np.mgrid[yi - 4:yi + 5, xi - 4:xi + 5]
        dark = 255.0 - out[yi - 4:yi + 5, xi - 4:xi + 5]
        cx, cy = (dark * xx).sum() / dark.sum(), (dark * yy).sum() / dark.sum()
        assert np.hypot(cx - x, cy - y) <= 1.0


def test_warp_with_identity_is_the_image_and_outside_is_black():
    img, _ = hg.draw_pattern(np.random.default_rng(3))
    np.testing.assert_array_equal(hg.warp(img, np.eye(3)), img)
    shift = np.array([[1, 0, 200], [0, 1, 0], [0, 0, 1]], float)
    assert not hg.warp(img, shift).any()


@pytest.mark.parametrize("equivalence", ["pattern", "transformation"])
def test_pair_labels_follow_the_equivalence_definition(equivalence):
    p, t, y = hg.sample_pairs(np.random.default_rng(4), 7, 5, 1001, equivalence)
    assert p.shape == t.shape == (1001, 2) and y.shape == (1001,)
    assert (y == 0).sum() == 500 and (y == 1).sum() == 501
    assert p.min() >= 0 and p.max() < 7 and t.min() >= 0 and t.max() < 5
    cls, nui = (p, t) if equivalence == "pattern" else (t, p)
    # Brute force: positive <=> same class; a positive pair shows two different views.
    for (c1, c2), (v1, v2), label in zip(cls, nui, y):
        assert label == int(c1 != c2)
        if label == 0:
            assert v1 != v2


@pytest.mark.parametrize("equivalence", ["pattern", "transformation"])
def test_triplet_labels_follow_the_equivalence_definition(equivalence):
    p, t, y = hg.sample_triplets(np.random.default_rng(5), 6, 4, 800, equivalence)
    assert p.shape == t.shape == (800, 3) and y.shape == (800, 2)
    cls, nui = (p, t) if equivalence == "pattern" else (t, p)
    for c, v, label in zip(cls, nui, y):
        assert tuple(label) == (int(c[0] != c[1]), int(c[0] != c[2]))
        assert sorted(label) == [0, 1]
        pos = 1 if label[0] == 0 else 2
        assert v[pos] != v[0]  # the positive is another view of the anchor's class
    assert 0.4 < (y[:, 0] == 1).mean() < 0.6  # the swap happens about half the time


def test_sampling_and_drawing_are_deterministic_for_a_seed():
    def draw(seed):
        rng = np.random.default_rng(seed)
        img, c = hg.draw_pattern(rng, size=64, square=43, diameter=3)
        return img, c, hg.random_homography(rng, 10, 180, 64, 43), hg.sample_triplets(rng, 5, 5, 20)

    a, b, c = draw(9), draw(9), draw(10)
    for x, y in zip(a[:3] + a[3], b[:3] + b[3]):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])


def test_render_warps_each_pattern_by_its_homography():
    rng = np.random.default_rng(6)
    pats = np.stack([hg.draw_pattern(rng, 48, 32, 4, 3)[0] for _ in range(3)])
    homs = np.stack([hg.random_homography(rng, 5, 30, 48, 32) for _ in range(4)])
    p, t, _ = hg.sample_pairs(rng, 3, 4, 6)
    out = hg.render(pats, homs, p, t)
    assert out.shape == (6, 2, 48, 48) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[4, 1], hg.warp(pats[p[4, 1]], homs[t[4, 1]]))


def test_homography_pair_on_a_non_square_photo():
    rng = np.random.default_rng(7)
    photo = rng.integers(0, 256, (60, 90, 3), dtype=np.uint8)
    a, b = hg.homography_pair(photo, np.random.default_rng(8), R_frac=0.1, phi_max_deg=20)
    assert a.shape == b.shape == photo.shape and a.dtype == np.uint8
    assert not np.array_equal(a, b)
    # The views are the frame homographies drawn from the same generator, in order.
    g = np.random.default_rng(8)
    ha, hb = hg.frame_homography(g, photo.shape, 0.1, 20), hg.frame_homography(g, photo.shape, 0.1, 20)
    np.testing.assert_array_equal(a, hg.warp(photo, ha))
    np.testing.assert_array_equal(b, hg.warp(photo, hb))
    # Frame corners move at most R = 0.1 * 60 = 6 px before a rotation of at most 20 degrees.
    frame = np.array([[-0.5, -0.5], [-0.5, 59.5], [89.5, 59.5], [89.5, -0.5]])
    centre = np.array([44.5, 29.5])
    moved = hg.map_points(ha, frame)
    bound = np.linalg.norm(frame - centre, axis=1) * 2 * np.sin(np.deg2rad(10)) + 6
    assert (np.linalg.norm(moved - frame, axis=1) <= bound + 1e-6).all()
    # R = 0 and phi = 0 give the image back; gray images work too.
    same, _ = hg.homography_pair(photo[..., 0], rng, 0.0, 0.0)
    np.testing.assert_array_equal(same, photo[..., 0])


def test_bad_arguments_say_what_was_expected():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="phi_max_deg"):
        hg.random_homography(rng, 15, 200)
    with pytest.raises(ValueError, match="R:"):
        hg.random_homography(rng, -1, 90)
    with pytest.raises(ValueError, match="square"):
        hg.draw_pattern(rng, size=50, square=60)
    with pytest.raises(ValueError, match="could not place"):
        hg.draw_pattern(rng, size=20, square=10, disks=30)
    with pytest.raises(ValueError, match="equivalence"):
        hg.sample_pairs(rng, 5, 5, 10, "viewpoint")
    with pytest.raises(ValueError, match="image"):
        hg.homography_pair(np.zeros(5), rng)
