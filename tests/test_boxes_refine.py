"""The box refiner (whale.boxes.refine): windows, crops and the way back, checked on painted boxes."""

from types import SimpleNamespace

import numpy as np
import pytest

from whale.boxes import geometry, refine

CFG = SimpleNamespace(refine_margin=0.25, refine_jitter=0.12, refine_margins=None, refine_size=64, refine_passes=2,
                      batch_size=4)


def _painted(w, h, box):
    """A black ``h x w`` RGB image with the pixel box ``(x0, y0, x1, y1)`` (exclusive) white."""
    img = np.zeros((h, w, 3), np.uint8)
    img[box[1]:box[3], box[0]:box[2]] = 255
    return img


class PixelReader:
    """A stand-in refiner that reads the white box off each crop: ``predict`` -> its unit corners."""

    def predict(self, x, batch_size=None, verbose=0):
        out = []
        for im in np.asarray(x):
            ys, xs = np.nonzero(im[..., 0] > 127)
            s = im.shape[0]
            out.append([xs.min() / s, ys.min() / s, (xs.max() + 1) / s, (ys.max() + 1) / s])
        return np.array(out, np.float32)


def test_jittered_windows_keep_the_box_inside_and_stay_in_the_image():
    rng = np.random.default_rng(0)
    sizes = np.array([[256, 180]] * 500)
    x0, y0 = rng.uniform(0, 0.5, 500), rng.uniform(0, 0.6, 500)
    unit = np.stack([x0, y0, x0 + rng.uniform(0.1, 0.5, 500), y0 + rng.uniform(0.1, 0.4, 500)], axis=1)
    win = refine.windows(unit, sizes, margin=0.25, jitter=0.12, rng=rng)
    inside = refine.to_window(unit, sizes, win)
    assert (inside >= 0).all() and (inside <= 1).all()
    assert (win[:, :2] >= 0).all() and (win[:, 2] <= 256).all() and (win[:, 3] <= 180).all()
    assert (win[:, 2:] - win[:, :2] >= 2).all()
    # a box at the border: the window is clipped, not shifted; without jitter, the window is the grown box
    plain = refine.windows(np.array([[0.0, 0.0, 0.5, 0.5]]), np.array([[200, 100]]), margin=0.25)
    assert plain.tolist() == [[0, 0, 125, 63]]
    with pytest.raises(ValueError, match="rng"):
        refine.windows(unit, sizes, margin=0.25, jitter=0.1)


def test_from_window_undoes_to_window():
    rng = np.random.default_rng(1)
    sizes = rng.integers(50, 400, (20, 2))
    unit = np.sort(rng.uniform(0, 1, (20, 4)).reshape(20, 2, 2), axis=1).transpose(0, 2, 1).reshape(20, 4)
    win = refine.windows(unit, sizes, margin=0.3)
    back = refine.from_window(refine.to_window(unit, sizes, win), sizes, win)
    np.testing.assert_allclose(back, unit, atol=1e-6)


def test_a_crop_shows_the_box_where_its_window_target_says():
    box = (40, 30, 140, 70)
    img = _painted(200, 120, box)
    unit = geometry.to_unit(np.array([box]), np.array([[200, 120]]))
    win = refine.windows(unit, np.array([[200, 120]]), margin=0.25)
    crop = refine.crops([img], win, 64)
    target = refine.to_window(unit, np.array([[200, 120]]), win)[0]
    np.testing.assert_allclose(PixelReader().predict(crop)[0], target, atol=1.5 / 64)


def test_refine_passes_walk_a_wrong_box_back_to_the_painted_one():
    """A refiner that reads the box exactly brings a box off by a fifth of its size to IoU > 0.95, through
    the plain look and the mirrored look (a flip mistake would move the mirrored box away)."""
    boxes = np.array([[30, 20, 150, 60], [100, 50, 220, 130]])
    images = [_painted(256, 180, b) for b in boxes]
    sizes = np.array([[256, 180]] * 2)
    truth = geometry.to_unit(boxes, sizes)
    off = truth + np.array([[0.05, 0.04, 0.05, 0.04], [-0.04, 0.05, -0.04, 0.05]], np.float32)
    assert geometry.iou(off, truth).max() < 0.8
    got = refine.refine_passes([PixelReader()], images, off, CFG)
    assert geometry.iou(got, truth).min() > 0.95
    failed = refine.refine_passes([PixelReader()], images, np.array([[np.nan] * 4, truth[1]]), CFG)
    assert np.isnan(failed[0]).all() and geometry.iou(failed[1:], truth[1:])[0] > 0.95
    views = SimpleNamespace(**{**vars(CFG), "refine_margins": (0.2, 0.25, 0.3)})  # every window reads it
    assert geometry.iou(refine.refine_passes([PixelReader()], images, off, views), truth).min() > 0.95


class Recorder(PixelReader):
    """A :class:`PixelReader` that keeps how much of each crop the box filled (the window's margin)."""

    def __init__(self):
        self.fill = []

    def predict(self, x, batch_size=None, verbose=0):
        out = super().predict(x)
        self.fill += list(out[:, 2] - out[:, 0])
        return out


def test_each_view_margin_is_looked_at_with_its_mirror():
    box = np.array([[60, 40, 180, 100]])
    images, sizes = [_painted(256, 160, box[0])], np.array([[256, 160]])
    truth = geometry.to_unit(box, sizes)
    assert refine.view_margins(CFG) == (0.25,)  # no refine_margins: the training margin alone
    rec = Recorder()
    cfg = SimpleNamespace(**{**vars(CFG), "refine_passes": 1, "refine_margins": (0.1, 0.5)})
    refine.refine_passes([rec], images, truth, cfg)
    # box width / window width = 1 / (1 + 2 margin): 0.833 at 0.1, 0.5 at 0.5, each twice (plain, mirror)
    np.testing.assert_allclose(rec.fill, [1 / 1.2] * 2 + [0.5] * 2, atol=2 / 64)


def test_training_windows_match_their_targets_and_change_each_epoch():
    box = np.array([[60, 40, 180, 100]])
    images = [_painted(256, 160, box[0])] * 3
    unit = np.repeat(geometry.to_unit(box, np.array([[256, 160]])), 3, axis=0)
    data = refine.WindowBatches(images, unit, CFG, seed=0)
    x, t = data[0]
    assert x.shape == (3, 64, 64, 3) and x.dtype == np.float32
    np.testing.assert_allclose(PixelReader().predict(x), t, atol=1.5 / 64)  # mirrored ones too
    first = data.win.copy()
    data.on_epoch_end()
    assert not (data.win == first).all()
    assert (refine.WindowBatches(images, unit, CFG, seed=0).win == first).all()


def test_load_images_caps_the_longer_side(tmp_path):
    import cv2

    cv2.imwrite(str(tmp_path / "big.png"), np.zeros((300, 1000, 3), np.uint8))
    cv2.imwrite(str(tmp_path / "small.png"), np.zeros((30, 40, 3), np.uint8))
    big, small = refine.load_images([tmp_path / "big.png", tmp_path / "small.png"], max_side=500)
    assert big.shape == (150, 500, 3) and small.shape == (30, 40, 3)


def test_refine_keys_are_checked():
    from whale.boxes.config import box_config_from_dict
    from whale.core.errors import ConfigError

    cfg = box_config_from_dict({"refine": True, "refine_passes": 2})
    assert cfg.refine and cfg.refine_passes == 2 and cfg.refine_size == 64
    with pytest.raises(ConfigError, match="refine_jitter"):
        box_config_from_dict({"refine_margin": 0.1, "refine_jitter": 0.2})
    with pytest.raises(ConfigError, match="refine_size"):
        box_config_from_dict({"refine_size": 50})
    assert box_config_from_dict({"refine_margins": [0.2, 0.3]}).refine_margins == (0.2, 0.3)
    assert box_config_from_dict({}).refine_margins is None
    for bad in ([], [0.2, 0.0], "0.2", [0.1] * 6):
        with pytest.raises(ConfigError, match="refine_margins"):
            box_config_from_dict({"refine_margins": bad})


def test_the_first_box_is_the_named_one_or_the_best_cross_validated():
    from whale.boxes.train import first_box
    from whale.core.errors import ConfigError

    cv = {"vgg": {"mean_iou": 0.81}, "retinanet": {"mean_iou": 0.52}, "average": {"mean_iou": 0.67}}
    assert first_box("best", ("vgg", "retinanet"), cv) == "vgg"
    assert first_box("average", ("vgg", "retinanet"), cv) == "average"
    assert first_box("average", ("vgg",), {"vgg": cv["vgg"]}) == "vgg"
    assert first_box("retinanet", ("vgg", "retinanet"), cv) == "retinanet"
    with pytest.raises(ConfigError, match="retinanet.*not trained"):
        first_box("retinanet", ("vgg",), {"vgg": cv["vgg"]})
