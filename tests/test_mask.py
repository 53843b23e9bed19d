"""The fluke mask (``features.mask: grabcut``, :mod:`whale.keypoints.mask`): the fluke kept, water and sky dropped,
the same mask whatever ran before, the whole photo where GrabCut cannot tell, and keypoints only on the fluke."""
import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from whale.core.errors import ConfigError  # noqa: E402
from whale.keypoints import extract, load_keypoint_config  # noqa: E402
from whale.keypoints.mask import fluke_mask  # noqa: E402
from tests.test_keypoints import pattern  # noqa: E402


def fluke_photo(seed: int = 0, size=(240, 400)) -> tuple[np.ndarray, np.ndarray]:
    """``(rgb, fluke)``: a dark textured fluke (two lobes) on blue rippled water, and where the fluke is."""
    rng = np.random.default_rng(seed)
    h, w = size
    water = np.empty((h, w, 3), np.uint8)
    water[..., 0], water[..., 1], water[..., 2] = 40, 90, 150  # RGB
    ripples = rng.normal(0, 12, (h, w, 1))
    rgb = np.clip(water + ripples, 0, 255).astype(np.uint8)
    fluke = np.zeros((h, w), np.uint8)
    lobes = np.int32([[w * 0.12, h * 0.25], [w * 0.5, h * 0.6], [w * 0.88, h * 0.25], [w * 0.8, h * 0.55],
                      [w * 0.55, h * 0.8], [w * 0.45, h * 0.8], [w * 0.2, h * 0.55]])
    cv2.fillPoly(fluke, [lobes], 1)
    texture = pattern(seed, size)[..., None] // 3 + 10  # dark skin with lighter scars
    rgb = np.where(fluke[..., None] > 0, np.repeat(texture, 3, axis=2), rgb)
    return rgb, fluke.astype(bool)


def test_the_mask_keeps_the_fluke_and_drops_the_water():
    rgb, fluke = fluke_photo()
    mask = fluke_mask(rgb)
    assert mask.shape == fluke.shape and mask.dtype == bool
    assert mask[fluke].mean() > 0.95
    assert mask[~fluke].mean() < 0.2


def test_the_outline_kept_as_it_is_lies_inside_the_grown_mask():
    """``grow=0`` (the trailing-edge benchmark's setting) drops the band the default grows around the fluke."""
    rgb, fluke = fluke_photo(3)
    grown, tight = fluke_mask(rgb), fluke_mask(rgb, grow=0)
    assert tight[fluke].mean() > 0.9 and not (tight & ~grown).any()
    assert tight.sum() < grown.sum()


def test_the_mask_is_the_same_whatever_ran_before():
    rgb, _ = fluke_photo(1)
    first = fluke_mask(rgb)
    cv2.setRNGSeed(12345)
    cv2.randu(np.zeros((50, 50), np.float32), 0, 1)
    np.testing.assert_array_equal(fluke_mask(rgb), first)


def test_a_photo_grabcut_cannot_segment_keeps_everything():
    assert fluke_mask(np.full((120, 200, 3), 128, np.uint8)).all()  # flat
    assert fluke_mask(np.zeros((6, 9, 3), np.uint8)).all()  # too small to start from a rectangle inside it


def test_masked_extraction_keeps_only_the_fluke_s_keypoints_in_the_photo_s_pixels(tmp_path):
    rgb, fluke = fluke_photo(2)
    padded = np.full((280, 460, 3), 255, np.uint8)
    padded[20:260, 30:430] = rgb  # white padding the matcher trims: positions stay in the padded photo's pixels
    cv2.imwrite(str(tmp_path / "p.png"), cv2.cvtColor(padded, cv2.COLOR_RGB2BGR))
    plain = extract(tmp_path / "p.png", load_keypoint_config().features)
    masked = extract(tmp_path / "p.png", load_keypoint_config(None, {"features.mask": "grabcut"}).features)
    assert 20 < len(masked) < len(plain)
    grown = cv2.dilate(fluke.astype(np.uint8), np.ones((15, 15), np.uint8)) > 0
    x, y = masked.xy[:, 0].astype(int) - 30, masked.xy[:, 1].astype(int) - 20
    assert grown[y, x].all()
    x, y = plain.xy[:, 0].astype(int) - 30, plain.xy[:, 1].astype(int) - 20
    assert not grown[y, x].all()  # the water had keypoints to drop
    kept = {tuple(p) for p in np.round(plain.xy, 1)}
    assert all(tuple(p) in kept for p in np.round(masked.xy, 1))  # the same keypoints, fewer


def test_the_mask_setting_is_checked_and_named_only_when_on():
    plain, masked = load_keypoint_config(), load_keypoint_config(None, {"features.mask": "grabcut"})
    assert masked.fingerprint() != plain.fingerprint() and masked.config_hash() != plain.config_hash()
    assert load_keypoint_config(None, {"features.mask": "none"}).fingerprint() == plain.fingerprint()
    with pytest.raises(ConfigError, match="features.mask"):
        load_keypoint_config(None, {"features.mask": "otsu"})


@pytest.mark.parametrize("name", ["colour.jpg", "gray.png"])
def test_the_masked_path_decodes_once_into_the_same_gray_pixels(tmp_path, name):
    """With the mask on, the photo is decoded once in colour and turned gray there: the same pixels as
    :func:`whale.keypoints.extract.read_gray` reads, so the masked keypoints are a subset of the plain ones."""
    from whale.data.images import load_image
    from whale.keypoints.extract import read_gray

    rgb, _ = fluke_photo(3)
    path = tmp_path / name
    cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR) if name.endswith("jpg") else rgb[..., 1])
    np.testing.assert_array_equal(cv2.cvtColor(load_image(path, channels=3), cv2.COLOR_RGB2GRAY), read_gray(path))
