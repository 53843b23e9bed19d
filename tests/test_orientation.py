"""EXIF orientation: a camera's photo saved sideways (``Orientation 6``) is read upright wherever a photo is
read: decoding, box labels, keypoint features and scores, the catalogue's review page."""

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
from PIL import Image, ImageOps  # noqa: E402

from whale.data.images import load_image, orientation  # noqa: E402

STORED = {1: lambda a: a, 2: lambda a: a[:, ::-1], 3: lambda a: a[::-1, ::-1], 4: lambda a: a[::-1],
          5: lambda a: a.swapaxes(0, 1), 6: lambda a: np.rot90(a, 1), 7: lambda a: np.rot90(a.swapaxes(0, 1), 2),
          8: lambda a: np.rot90(a, -1)}
"""Per orientation, the stored pixels of an upright picture (the turn a camera's file undoes when shown)."""


def save(path, pixels: np.ndarray, value: int | None, fmt: str = "PNG"):
    """``pixels`` (uint8 RGB, as stored) saved at ``path`` with EXIF Orientation ``value`` (None: no EXIF)."""
    kwargs = {"quality": 100} if fmt == "JPEG" else {}
    if value is not None:
        exif = Image.Exif()
        exif[0x0112] = value
        kwargs["exif"] = exif
    Image.fromarray(np.ascontiguousarray(pixels)).save(path, format=fmt, **kwargs)
    return path


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "TIFF", "WEBP"])
def test_every_orientation_is_read_as_pillow_shows_it(tmp_path, fmt):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 255, (5, 7, 3), dtype=np.uint8)
    for value in range(1, 9):
        path = save(tmp_path / f"o{value}.{fmt.lower()}", pixels, value, fmt)
        with Image.open(path) as im:
            shown = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        np.testing.assert_array_equal(load_image(path), shown, err_msg=f"{fmt} orientation {value}")
        assert load_image(path, channels=1).shape[:2] == shown.shape[:2]
        if fmt != "TIFF":
            assert orientation(path.read_bytes()) == value
    plain = save(tmp_path / f"plain.{fmt.lower()}", pixels, None, fmt)
    assert orientation(plain.read_bytes()) == 1 and load_image(plain).shape == (5, 7, 3)


def _fluke(tmp_path):
    """An upright synthetic fluke photo's pixels (RGB) and the same photo as a camera saves it sideways:
    pixels turned a quarter left, ``Orientation 6`` (shown turned a quarter right)."""
    from whale.data.synth import generate

    data = generate(tmp_path / "data", n_ids=6, seed=1, size=128, progress=False)
    first = sorted((data / "train").iterdir())[0]
    upright = load_image(first)
    return data, upright


def test_a_sideways_photo_gives_the_upright_photos_keypoints_box_size_and_thumbnail(tmp_path):
    from whale.boxes.labels import image_size
    from whale.catalogue.thumbs import ReviewImages
    from whale.keypoints import extract
    from whale.keypoints.config import FeatureConfig

    _, upright = _fluke(tmp_path)
    a = save(tmp_path / "upright.png", upright, None)
    for value in (3, 6, 8):
        b = save(tmp_path / f"camera{value}.jpg", STORED[value](upright), value, "JPEG")
        b_png = save(tmp_path / f"camera{value}.png", STORED[value](upright), value)
        np.testing.assert_array_equal(load_image(b_png), upright)
        fa, fb = extract(a, FeatureConfig()), extract(b_png, FeatureConfig())
        assert len(fa) > 20 and fb.photo_size == fa.photo_size == upright.shape[:2]
        np.testing.assert_array_equal(fb.xy, fa.xy)
        np.testing.assert_array_equal(fb.desc, fa.desc)
        assert image_size(b) == image_size(a) == (upright.shape[1], upright.shape[0])
        images = ReviewImages(tmp_path / "review", 96)
        assert images.thumb(b_png) == images.thumb(a)  # named by content: the same upright pixels
        thumb = load_image(tmp_path / "review" / images.thumb(b))
        assert thumb.shape[1] > thumb.shape[0]  # a fluke is wider than high: not sideways


def test_a_sideways_test_photo_scores_as_the_upright_one(tmp_path, monkeypatch):
    from whale.inference.__main__ import main as score_main
    from whale.inference.scorefile import load_score_file

    monkeypatch.setenv("WHALE_CACHE", str(tmp_path / "cache"))
    data, _ = _fluke(tmp_path)
    tests = sorted((data / "test").iterdir())
    upright = load_image(tests[0])
    for old in tests:
        old.unlink()
    save(data / "test" / "upright.png", upright, None)
    save(data / "test" / "camera.png", STORED[6](upright), 6)
    (data / "sample_submission.csv").unlink(missing_ok=True)
    out = tmp_path / "t.npz"
    assert score_main(["--matcher", "keypoints", "--data", str(data), "--out", str(out), "--quiet",
                       "--workers", "1"]) == 0
    scores = load_score_file(out)
    rows = {name: i for i, name in enumerate(scores.query)}
    np.testing.assert_array_equal(scores.scores[rows["camera.png"]], scores.scores[rows["upright.png"]])
    assert scores.scores[rows["camera.png"]].max() > 0
