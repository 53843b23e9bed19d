"""Tests for whale.data: CSV checks, unsafe names, odd image formats, crops."""
import dataclasses
import os
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from whale.data import (
    ImageStore,
    crop_size_for,
    crop_to_box,
    load_competition,
    load_crop,
    load_image,
    read_boxes,
    read_train_csv,
    safe_image_path,
)
from whale.data.images import photo_box
from whale.core.errors import DataError


def _rgb(h=12, w=16, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _write_png(path, arr):
    Image.fromarray(arr).save(path, format="PNG")


def _make_comp(root: Path, train_rows=None, test=("b.jpg", "a.jpg"), sample=None, boxes=None):
    """A tiny competition folder; rows are (Image, Id)."""
    train_rows = train_rows or [("t1.jpg", "w_1"), ("t2.jpg", "w_1"), ("t3.jpg", "new_whale")]
    (root / "train").mkdir(parents=True)
    (root / "test").mkdir()
    for name, _ in train_rows:
        _write_png(root / "train" / name, _rgb())
    for name in test:
        _write_png(root / "test" / name, _rgb())
    (root / "train.csv").write_text("Image,Id\n" + "".join(f"{a},{b}\n" for a, b in train_rows))
    if sample is not None:
        (root / "sample_submission.csv").write_text("Image,Id\n" + "".join(f"{a},x\n" for a in sample))
    if boxes is not None:
        (root / "bounding_boxes.csv").write_text("Image,x0,y0,x1,y1\n" + "".join(boxes))
    return root


# ----------------------------------------------------------------------------- folder


def test_load_competition_ok(tmp_path):
    comp = load_competition(_make_comp(tmp_path, boxes=["t1.jpg,1,2,10,11\n"]))
    assert list(comp.train.columns) == ["Image", "Id"]
    assert comp.train["Image"].tolist() == ["t1.jpg", "t2.jpg", "t3.jpg"]
    assert comp.test_images == ["a.jpg", "b.jpg"]  # sorted listing without a sample file
    assert comp.sample_path is None
    assert comp.box("t1.jpg") == (1, 2, 10, 11) and comp.box("t2.jpg") is None
    assert comp.train_path("t1.jpg") == tmp_path / "train" / "t1.jpg"
    assert comp.test_path("a.jpg").is_file()
    with pytest.raises(dataclasses.FrozenInstanceError):
        comp.root = tmp_path  # frozen


def test_sample_submission_defines_test_order(tmp_path):
    comp = load_competition(_make_comp(tmp_path, sample=["b.jpg", "a.jpg"]))
    assert comp.test_images == ["b.jpg", "a.jpg"]
    assert comp.sample_path == tmp_path / "sample_submission.csv"


def test_sample_lists_missing_test_image(tmp_path):
    with pytest.raises(DataError, match=r"sample_submission\.csv.*line 3 \(data row 2\).*'zz\.jpg'"):
        load_competition(_make_comp(tmp_path, sample=["a.jpg", "zz.jpg"]))


def test_missing_columns(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("Img,Id\na.jpg,w_1\n")
    with pytest.raises(DataError, match=r"train\.csv.*missing column\(s\) Image.*found Img, Id"):
        read_train_csv(path)


def test_empty_csv(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("")
    with pytest.raises(DataError, match=r"train\.csv.*empty"):
        read_train_csv(path)


def test_duplicate_image_rows(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("Image,Id\na.jpg,w_1\nb.jpg,w_2\na.jpg,w_3\n")
    with pytest.raises(DataError, match=r"train\.csv.*'a\.jpg'.*lines 2, 4 \(data rows 1, 3\)"):
        read_train_csv(path)


def test_empty_id(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("Image,Id\na.jpg,w_1\nb.jpg,\n")
    with pytest.raises(DataError, match=r"train\.csv, line 3 \(data row 2\): empty Id"):
        read_train_csv(path)


def test_blank_lines_skipped_but_counted(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("Image,Id\na.jpg,w_1\n\n\nb.jpg,\n\n")
    with pytest.raises(DataError, match=r"train\.csv, line 5 \(data row 2\): empty Id"):
        read_train_csv(path)
    path.write_text("Image,Id\na.jpg,w_1\n\nb.jpg,w_2\n\n")
    assert read_train_csv(path)["Image"].tolist() == ["a.jpg", "b.jpg"]


def test_id_that_looks_like_nan_is_kept(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("Image,Id\na.jpg,NA\n")
    assert read_train_csv(path)["Id"].tolist() == ["NA"]


def test_missing_images_reported_with_rows(tmp_path):
    root = _make_comp(tmp_path)
    (root / "train.csv").write_text("Image,Id\nt1.jpg,w\nnope1.jpg,w\nt2.jpg,w\nnope2.jpg,w\n")
    with pytest.raises(DataError) as info:
        load_competition(root)
    msg = str(info.value)
    assert "train.csv" in msg and "2 listed image(s) not found" in msg
    assert "line 3 (data row 2): 'nope1.jpg'" in msg and "line 5 (data row 4): 'nope2.jpg'" in msg


@pytest.mark.parametrize("name", ["../x.jpg", "/etc/hostname", "sub/../../x.jpg", "a\\b.jpg"])
def test_escaping_names_rejected(tmp_path, name):
    root = _make_comp(tmp_path)
    (root / "x.jpg").write_bytes(b"")
    (root / "train.csv").write_text(f"Image,Id\nt1.jpg,w\n{name},w\n")
    with pytest.raises(DataError, match=r"train\.csv, line 3 \(data row 2\)"):
        load_competition(root)
    with pytest.raises(DataError):
        safe_image_path(root / "train", name)


def test_symlink_escaping_rejected(tmp_path):
    root = _make_comp(tmp_path)
    outside = tmp_path / "secret.jpg"
    _write_png(outside, _rgb())
    os.symlink(outside, root / "train" / "link.jpg")
    (root / "train.csv").write_text("Image,Id\nlink.jpg,w\n")
    with pytest.raises(DataError, match=r"line 2 \(data row 1\).*outside"):
        load_competition(root)


def test_symlink_and_subfolder_inside_allowed(tmp_path):
    folder = tmp_path / "train"
    (folder / "sub").mkdir(parents=True)
    _write_png(folder / "sub" / "a.jpg", _rgb())
    os.symlink(folder / "sub" / "a.jpg", folder / "link.jpg")
    assert safe_image_path(folder, "sub/a.jpg") == folder / "sub" / "a.jpg"
    assert safe_image_path(folder, "link.jpg") == folder / "link.jpg"


@pytest.mark.parametrize(
    "row, what",
    [
        ("b.jpg,5,0,5,10\n", "empty box"),
        ("b.jpg,0,7,5,3\n", "empty box"),
        ("b.jpg,-1,0,5,10\n", "negative"),
        ("b.jpg,0,0,5.5,10\n", "x1 is '5.5'"),
        ("b.jpg,0,abc,5,10\n", "y0 is 'abc'"),
        ("b.jpg,0,0,,10\n", "x1 is ''"),
    ],
)
def test_bad_boxes(tmp_path, row, what):
    path = tmp_path / "bounding_boxes.csv"
    path.write_text("Image,x0,y0,x1,y1\na.jpg,0,0,4,4\n" + row)
    with pytest.raises(DataError, match=r"bounding_boxes\.csv, line 3 \(data row 2\)") as info:
        read_boxes(path)
    assert what in str(info.value)


def test_boxes_ok_and_integral_floats(tmp_path):
    path = tmp_path / "bounding_boxes.csv"
    path.write_text("Image,x0,y0,x1,y1\na.jpg,0,1,4.0,5\n")
    assert read_boxes(path) == {"a.jpg": (0, 1, 4, 5)}


def test_boxes_missing_columns(tmp_path):
    path = tmp_path / "bounding_boxes.csv"
    path.write_text("Image,x0,y0,x1\na.jpg,0,1,4\n")
    with pytest.raises(DataError, match=r"bounding_boxes\.csv.*missing column\(s\) y1"):
        read_boxes(path)


# ----------------------------------------------------------------------------- images


def _smooth():
    """[12, 16, 3] uint8 with large flat colour areas, so lossy formats stay close."""
    img = np.zeros((12, 16, 3), np.uint8)
    img[:, :8] = (220, 40, 30)
    img[:, 8:] = (20, 60, 200)
    return img


def _save_variants(tmp_path):
    """name -> (path, expected RGB [H, W, 3], or None when lossy: then close to smooth)."""
    rgb = _rgb()
    smooth = _smooth()
    out = {}
    p = tmp_path / "rgb.png"
    _write_png(p, rgb)
    out["rgb_png"] = (p, rgb)
    p = tmp_path / "png_named.jpg"
    _write_png(p, rgb)
    out["png_named_jpg"] = (p, rgb)
    p = tmp_path / "rgba.png"
    Image.fromarray(np.dstack([rgb, np.full(rgb.shape[:2], 7, np.uint8)])).save(p)
    out["rgba"] = (p, rgb)
    p = tmp_path / "gray.jpg"
    Image.fromarray(rgb[:, :, 0]).save(p, quality=95)
    out["gray_jpg"] = (p, None)
    p = tmp_path / "la.png"
    Image.fromarray(rgb[:, :, 0]).convert("LA").save(p)
    out["gray_alpha"] = (p, np.repeat(rgb[:, :, :1], 3, axis=2))
    p = tmp_path / "cmyk.jpg"
    Image.fromarray(smooth).convert("CMYK").save(p, quality=95)
    out["cmyk"] = (p, None)
    p = tmp_path / "pal.png"
    pal = Image.fromarray(rgb).convert("P")
    pal.save(p)
    out["palette"] = (p, np.asarray(pal.convert("RGB")))
    p = tmp_path / "pal_transparent.png"
    pal.save(p, transparency=0)
    out["palette_transparent"] = (p, np.asarray(pal.convert("RGB")))
    p = tmp_path / "u16.png"
    rgb16 = rgb.astype(np.uint16) * 257
    cv2.imwrite(str(p), rgb16[:, :, ::-1])
    out["rgb16"] = (p, rgb)
    p = tmp_path / "g16.png"
    cv2.imwrite(str(p), rgb16[:, :, 0])
    out["gray16"] = (p, np.repeat(rgb[:, :, :1], 3, axis=2))
    p = tmp_path / "rgb.jpg"
    Image.fromarray(smooth).save(p, quality=95)
    out["rgb_jpg"] = (p, None)
    return out


def test_odd_formats_load(tmp_path):
    variants = _save_variants(tmp_path)
    for key, (path, expected) in variants.items():
        img = load_image(path)
        assert img.shape == (12, 16, 3) and img.dtype == np.uint8, key
        if expected is not None:
            np.testing.assert_array_equal(img, expected, err_msg=key)
        elif key in ("cmyk", "rgb_jpg"):
            # lossy (chroma blurs at the colour edge), but RGB order: close on average
            assert np.abs(img.astype(int) - _smooth()).mean() < 10, key
        gray = load_image(path, channels=1)
        assert gray.shape == (12, 16, 1) and gray.dtype == np.uint8, key


def test_channel_order_is_rgb(tmp_path):
    red = np.zeros((4, 4, 3), np.uint8)
    red[..., 0] = 255
    _write_png(tmp_path / "red.png", red)
    img = load_image(tmp_path / "red.png")
    assert (img[..., 0] == 255).all() and (img[..., 1:] == 0).all()
    assert load_image(tmp_path / "red.png", channels=1)[0, 0, 0] == 76  # 0.299 * 255


def test_truncated_and_unreadable_images(tmp_path):
    big = np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    for fmt, name in (("JPEG", "t.jpg"), ("PNG", "t.png")):
        full = tmp_path / ("full_" + name)
        Image.fromarray(big).save(full, format=fmt)
        data = full.read_bytes()
        for cut in (2, 20, len(data) // 2):
            path = tmp_path / f"cut{cut}_{name}"
            path.write_bytes(data[:-cut])
            with pytest.raises(DataError, match=rf"{path.name}.*(truncated|unreadable)"):
                load_image(path)
    junk = tmp_path / "junk.jpg"
    junk.write_bytes(b"this is not an image at all")
    with pytest.raises(DataError, match=r"junk\.jpg.*unreadable"):
        load_image(junk)
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match=r"empty\.jpg.*empty"):
        load_image(empty)
    with pytest.raises(DataError, match=r"gone\.jpg.*not found"):
        load_image(tmp_path / "gone.jpg")


def test_trailing_bytes_after_jpeg_are_fine(tmp_path):
    path = tmp_path / "pad.jpg"
    Image.fromarray(_rgb()).save(path, quality=95)
    path.write_bytes(path.read_bytes() + b"trailing junk")
    assert load_image(path).shape == (12, 16, 3)


# ----------------------------------------------------------------------------- crops


def test_crop_margin_and_clipping():
    img = np.arange(100 * 200).reshape(100, 200, 1)
    assert crop_to_box(img, None) is img
    # box 40 x 20 at (50, 30); 10% margin -> 4 px left/right, 2 px top/bottom
    crop = crop_to_box(img, (50, 30, 90, 50), margin=0.1)
    assert crop.shape == (24, 48, 1)
    assert crop[0, 0, 0] == img[28, 46, 0]
    assert crop_to_box(img, (50, 30, 90, 50), margin=0.0).shape == (20, 40, 1)
    # near the corner: clipped to the image
    crop = crop_to_box(img, (0, 0, 20, 10), margin=0.5)
    assert crop.shape == (15, 30, 1) and crop[0, 0, 0] == 0
    crop = crop_to_box(img, (190, 95, 200, 100), margin=0.5)
    assert crop.shape == (8, 15, 1) and crop[-1, -1, 0] == img[-1, -1, 0]
    # a box extending past the image is clipped too
    assert crop_to_box(img, (150, 80, 400, 300), margin=0.0).shape == (20, 50, 1)
    with pytest.raises(DataError, match="does not overlap"):
        crop_to_box(img, (300, 0, 400, 10))


def test_load_crop(tmp_path):
    arr = np.zeros((40, 60, 3), np.uint8)
    arr[10:20, 30:50] = (10, 200, 30)
    path = tmp_path / "a.png"
    _write_png(path, arr)
    out = load_crop(path, (30, 10, 50, 20), 8, margin=0.0)
    assert out.shape == (8, 8, 3) and out.dtype == np.uint8
    assert (out == np.array([10, 200, 30], np.uint8)).all()
    gray = load_crop(path, None, 16, channels=1)
    assert gray.shape == (16, 16, 1) and gray.dtype == np.uint8
    with pytest.raises(DataError, match=r"a\.png.*does not overlap"):
        load_crop(path, (100, 100, 120, 120), 8)


def _letterboxed(tmp_path, name="wide.png"):
    """A 64 x 32 pattern (a wide fluke) letterboxed on white into 64 x 64, as the 2019 humpback photos."""
    rng = np.random.default_rng(0)
    pattern = rng.integers(0, 200, (32, 64, 3), dtype=np.uint8)
    canvas = np.full((64, 64, 3), 255, np.uint8)
    canvas[16:48] = pattern
    _write_png(tmp_path / name, canvas)
    return tmp_path / name, pattern


def test_crop_content_cuts_the_white_padding_of_a_photo_without_box(tmp_path):
    path, pattern = _letterboxed(tmp_path)
    whole = load_crop(path, None, (32, 64), margin=0.0)  # crop: box (default): the padding stays
    assert (whole[:8] == 255).all() and (whole[-8:] == 255).all()
    cut = load_crop(path, None, (32, 64), margin=0.0, crop="content")
    assert cut.shape == (32, 64, 3) and np.array_equal(cut, pattern)  # exactly the pattern, no white row
    # A bounding box wins over the content rule.
    boxed = load_crop(path, (0, 0, 32, 16), 8, margin=0.0, crop="content")
    assert (boxed == 255).all()
    assert photo_box(np.asarray(Image.open(path)), None, "content") == (0, 16, 64, 48)
    assert photo_box(np.asarray(Image.open(path)), None, "box") is None
    with pytest.raises(ValueError, match="crop: expected one of box, content"):
        load_crop(path, None, 8, crop="white")


def test_load_crop_size_as_height_width(tmp_path):
    path, _ = _letterboxed(tmp_path)
    assert load_crop(path, None, (24, 48), channels=1).shape == (24, 48, 1)
    assert load_crop(path, None, 16).shape == (16, 16, 3)
    for bad in (0, (16,), (16, 0), 2.5):
        with pytest.raises(ValueError, match="size: expected a positive integer or"):
            load_crop(path, None, bad)


def test_image_store_crops_content_at_a_non_square_size(tmp_path):
    path, pattern = _letterboxed(tmp_path)
    store = ImageStore([path, path], [None, (0, 0, 64, 64)], (32, 64), margin=0.0, crop="content",
                       flips=[False, True])
    assert store.crop_size == (32, 64) and store.crop == "content"
    assert np.array_equal(store[0], pattern)
    assert store[1].shape == (32, 64, 3) and (store[1][:8] == 255).all()  # its box: the whole canvas, mirrored
    assert ImageStore([path], None, 16).crop == "box"
    with pytest.raises(ValueError, match="crop: expected one of box, content"):
        ImageStore([path], None, 16, crop="white")
    with pytest.raises(ValueError, match="crop_size: expected a positive integer or"):
        ImageStore([path], None, (16, -1))
    assert crop_size_for(64) == 74 and crop_size_for((64, 128)) == (74, 147)
