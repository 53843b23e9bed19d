"""Box models: IoU and fallbacks against brute force, the labels file's errors, the loss, a tiny train/predict run."""

from pathlib import Path

import numpy as np
import pytest

from whale.boxes import geometry


def _pixel_iou(a, b, w=12, h=10):
    """IoU by painting both boxes on a pixel grid (x1/y1 exclusive)."""
    ma, mb = np.zeros((h, w), bool), np.zeros((h, w), bool)
    ma[a[1]:a[3], a[0]:a[2]] = True
    mb[b[1]:b[3], b[0]:b[2]] = True
    union = (ma | mb).sum()
    return (ma & mb).sum() / union if union else 0.0


def test_iou_matches_painted_pixels():
    rng = np.random.default_rng(1)
    a = np.sort(rng.integers(0, 11, (200, 2, 2)), axis=1).reshape(200, 4)[:, [0, 2, 1, 3]]
    b = np.sort(rng.integers(0, 11, (200, 2, 2)), axis=1).reshape(200, 4)[:, [0, 2, 1, 3]]
    want = [_pixel_iou(x, y) for x, y in zip(a, b)]
    np.testing.assert_allclose(geometry.iou(a, b), want, atol=1e-12)


def test_iou_ignores_a_per_axis_scaling_so_unit_boxes_give_pixel_iou():
    a, b = np.array([[10, 20, 110, 60]]), np.array([[30, 10, 120, 70]])
    sizes = np.array([[200, 80]])
    np.testing.assert_allclose(geometry.iou(geometry.to_unit(a, sizes), geometry.to_unit(b, sizes)),
                               geometry.iou(a, b), rtol=1e-6)


def test_to_pixels_clips_and_falls_back_to_the_whole_image():
    unit = np.array([[-0.2, 0.1, 1.3, 0.5],      # outside on both sides: clipped
                     [0.6, 0.2, 0.4, 0.8],       # inverted: fallback
                     [np.nan, 0, 1, 1],          # failed detection: fallback
                     [0.5, 0.5, 0.5001, 0.9]])   # empty after rounding: fallback
    sizes = np.array([[100, 50]] * 4)
    boxes, fell = geometry.to_pixels(unit, sizes)
    assert boxes[0].tolist() == [0, 5, 100, 25]
    assert fell.tolist() == [False, True, True, True]
    assert boxes[1:].tolist() == [[0, 0, 100, 50]] * 3


def test_average_leaves_out_failed_models_row_by_row():
    a = np.array([[0.1, 0.1, 0.5, 0.5], [np.nan] * 4, [np.nan] * 4, [0.6, 0.1, 0.4, 0.5]])
    b = np.array([[0.3, 0.3, 0.7, 0.7], [0.2, 0.2, 0.4, 0.4], [np.nan] * 4, [0.1, 0.1, 0.3, 0.3]])
    avg = geometry.average([a, b])
    np.testing.assert_allclose(avg[0], [0.2, 0.2, 0.6, 0.6], rtol=1e-6)
    np.testing.assert_allclose(avg[1], b[1], rtol=1e-6)
    assert np.isnan(avg[2]).all()
    np.testing.assert_allclose(avg[3], b[3], rtol=1e-6)  # an inverted box is a failed one


def test_flip_maps_a_box_onto_the_mirrored_image():
    img = np.zeros((10, 20), bool)
    img[2:6, 3:9] = True
    unit = geometry.to_unit(np.array([[3, 2, 9, 6]]), np.array([[20, 10]]))
    px, _ = geometry.to_pixels(geometry.flip_unit(unit), np.array([[20, 10]]))
    flipped = img[:, ::-1]
    ys, xs = np.nonzero(flipped)
    assert px[0].tolist() == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]


def _giou(a, b):
    ix = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    hull = (max(a[2], b[2]) - min(a[0], b[0])) * (max(a[3], b[3]) - min(a[1], b[1]))
    return inter / union - (hull - union) / hull


def test_box_loss_is_l1_plus_one_minus_giou(backend):
    import keras

    from whale.boxes.vgg import box_loss

    t = np.array([[0.1, 0.2, 0.5, 0.6], [0.1, 0.1, 0.2, 0.2], [0.3, 0.3, 0.9, 0.8]], np.float32)
    p = np.array([[0.1, 0.2, 0.5, 0.6], [0.6, 0.6, 0.9, 0.9], [0.35, 0.25, 0.8, 0.85]], np.float32)
    want = [np.abs(a - b).sum() + 1 - _giou(a, b) for a, b in zip(t.astype(float), p.astype(float))]
    got = keras.ops.convert_to_numpy(box_loss(keras.ops.convert_to_tensor(t), keras.ops.convert_to_tensor(p)))
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert got[0] < 1e-5 and got[1] > 1.0  # perfect box: 0; disjoint boxes: GIoU < 0


def test_soft_argmax_reads_each_edge_where_its_map_peaks(backend):
    import keras

    from whale.boxes.vgg import soft_argmax_corners

    maps = np.full((2, 6, 8, 4), -60.0, np.float32)  # h = 6 rows, w = 8 columns
    # image 0: one sharp peak per edge map (x0: column 2, y0: row 1, x1: column 7, y1: row 5)
    for m, (i, j) in enumerate([(4, 2), (1, 0), (0, 7), (5, 3)]):
        maps[0, i, j, m] = 60.0
    # image 1: x0's mass split evenly between columns 1 and 3 (any rows): the mean, column 2
    maps[1, 0, 1, 0] = maps[1, 5, 3, 0] = 60.0
    maps[1, :, :, 1:] = 0.0  # uniform maps: the middle of the axis
    got = keras.ops.convert_to_numpy(soft_argmax_corners(keras.ops.convert_to_tensor(maps)))
    np.testing.assert_allclose(got[0], [2 / 7, 1 / 5, 1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(got[1], [2 / 7, 0.5, 0.5, 0.5], atol=1e-6)


@pytest.mark.parametrize("head, width, maps", [("dense", 0.0625, None), ("integral", 0.0625, (8, 8))])
def test_vgg_heads_give_unit_corners_and_the_integral_head_reads_stride_8(backend, head, width, maps):
    from whale.boxes.vgg import build_vgg_regressor

    model = build_vgg_regressor(64, width, None, head)
    out = model.predict(np.random.default_rng(0).uniform(0, 255, (3, 64, 64, 3)).astype(np.float32), verbose=0)
    assert out.shape == (3, 4) and ((out >= 0) & (out <= 1)).all()
    if maps:
        assert tuple(model.get_layer("edge_maps").output.shape[1:3]) == maps
        assert "block5_conv1" not in [layer.name for layer in model.layers]
    with pytest.raises(ValueError, match="unknown VGG box head 'heat'"):
        build_vgg_regressor(64, width, None, "heat")


def _labels_folder(tmp_path):
    import cv2

    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    cv2.imwrite(str(tmp_path / "train" / "a.jpg"), np.zeros((40, 60, 3), np.uint8))
    cv2.imwrite(str(tmp_path / "test" / "b.jpg"), np.zeros((30, 50, 3), np.uint8))
    return tmp_path


@pytest.mark.parametrize("rows, expect", [
    ("a.jpg,5,5,61,30\n", "line 2 (data row 1): box (5, 5, 61, 30) of 'a.jpg' reaches outside the image of 60x40"),
    ("a.jpg,1,1,20,20\nb.jpg,1,1,20,31\n", "line 3 (data row 2): box (1, 1, 20, 31) of 'b.jpg' reaches outside"),
    ("a.jpg,30,5,10,20\n", "line 2 (data row 1): empty box (30, 5, 10, 20)"),
    ("a.jpg,1,1,20,20\nc.jpg,1,1,5,5\n", "line 3 (data row 2): image 'c.jpg' not found"),
    ("a.jpg,1,1,20,20\nb.jpg,1,1,5,5\na.jpg,1,1,20,20\n", "Image 'a.jpg' appears more than once, on lines 2, 4"),
])
def test_bad_labels_name_the_row(tmp_path, rows, expect):
    from whale.boxes.labels import read_labels
    from whale.core.errors import DataError

    data = _labels_folder(tmp_path)
    csv = tmp_path / "labels.csv"
    csv.write_text("Image,x0,y0,x1,y1\n" + rows)
    with pytest.raises(DataError, match="labels.csv") as err:
        read_labels(csv, data)
    assert expect in str(err.value)


def test_good_labels_come_back_with_sizes(tmp_path):
    from whale.boxes.labels import read_labels

    data = _labels_folder(tmp_path)
    (tmp_path / "labels.csv").write_text("Image,x0,y0,x1,y1\nb.jpg,0,0,50,30\na.jpg,2,3,60,40\n")
    lab = read_labels(tmp_path / "labels.csv", data)
    assert lab.names == ["b.jpg", "a.jpg"]
    assert lab.sizes.tolist() == [[50, 30], [60, 40]]
    assert lab.boxes.tolist() == [[0, 0, 50, 30], [2, 3, 60, 40]]


def test_the_train_command_reports_a_bad_row_in_one_line(tmp_path, capsys):
    from whale.boxes.cli import main

    data = _labels_folder(tmp_path)
    (tmp_path / "labels.csv").write_text("Image,x0,y0,x1,y1\na.jpg,1,1,20,20\nzz.jpg,1,1,5,5\n")
    code = main(["train", "--data", str(data), "--labels", str(tmp_path / "labels.csv"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "line 3 (data row 2): image 'zz.jpg' not found" in err and "Traceback" not in err


def test_box_config_refuses_unknown_keys_and_weights_on_a_narrow_vgg():
    from whale.boxes.config import box_config_from_dict
    from whale.core.errors import ConfigError

    with pytest.raises(ConfigError, match="fpn_widht: unknown key"):
        box_config_from_dict({"fpn_widht": 32}, "b.yaml")
    with pytest.raises(ConfigError, match="vgg_weights"):
        box_config_from_dict({"vgg_width": 0.5, "vgg_weights": "imagenet"}, "b.yaml")
    with pytest.raises(ConfigError, match="image_size"):
        box_config_from_dict({"image_size": 100}, "b.yaml")
    with pytest.raises(ConfigError, match="vgg_head"):
        box_config_from_dict({"vgg_head": "soft"}, "b.yaml")
    assert box_config_from_dict({"image_size": 64}).image_size == 64
    assert box_config_from_dict({}).vgg_head == "dense"  # the paper's head unless asked


def test_the_shipped_box_config_loads_with_the_integral_head_and_the_refiner():
    from whale.boxes.config import load_box_config

    cfg = load_box_config(Path(__file__).resolve().parents[1] / "configs" / "boxes.yaml")
    assert (cfg.vgg_head, cfg.image_size, cfg.folds) == ("integral", 128, 4)
    assert (cfg.refine, cfg.refine_from) == (True, "best")


def test_cosine_restarts_return_to_the_peak_every_cycle():
    from whale.boxes.config import BoxConfig
    from whale.boxes.train import build_model

    cfg = BoxConfig(image_size=32, lr=1e-3, cycle_epochs=2, vgg_width=0.0625)
    model = build_model("vgg", cfg, steps_per_epoch=5)
    lr = model.optimizer.learning_rate if not callable(model.optimizer._learning_rate) else model.optimizer._learning_rate
    values = [float(lr(step)) for step in (0, 5, 9, 10, 15, 20)]
    assert values[0] == pytest.approx(1e-3) and values[3] == pytest.approx(1e-3) and values[5] == pytest.approx(1e-3)
    assert values[0] > values[1] > values[2]


def test_folds_partition_the_labels():
    from whale.boxes.train import fold_of

    f = fold_of(103, 4, seed=3)
    assert sorted(np.bincount(f).tolist()) == [25, 26, 26, 26]
    assert (fold_of(103, 4, seed=3) == f).all() and not (fold_of(103, 4, seed=4) == f).all()


@pytest.fixture(scope="module")
def competition(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("comp") / "data", n_ids=6, seed=2, size=96)


def _models():
    try:
        import keras_cv  # noqa: F401
    except ImportError:
        return ("vgg",)  # keras-cv is pinned in requirements.txt; an older venv may lack it
    return ("vgg", "retinanet")


@pytest.mark.slow  # ~2 minutes; test_a_refined_run_... also trains and predicts through the CLI
def test_train_then_predict_a_whole_folder(competition, tmp_path, capsys):
    from whale.boxes.cli import main
    from whale.data import read_boxes

    labels = tmp_path / "labels.csv"
    rows = (Path(competition) / "bounding_boxes.csv").read_text().splitlines()
    labels.write_text("\n".join(rows[:25]) + "\n")
    run = tmp_path / "run"
    models = _models()
    args = ["train", "--data", str(competition), "--labels", str(labels), "--out", str(run),
            "--set", "image_size=64", "--set", "folds=2", "--set", "epochs=1", "--set", "batch_size=8",
            "--set", "refine=false"]  # the paper's averaged boxes (the refiner: the test below)
    assert main(args + ["--model", "both" if len(models) == 2 else "vgg"]) == 0
    out = capsys.readouterr().out
    assert "cross-validated mean IoU vgg" in out
    cv = (run / "cv.csv").read_text().splitlines()
    assert len(cv) == 25 and cv[0].startswith("Image,x0,y0,x1,y1,vgg_x0")
    for m in models:
        assert (run / "models" / f"{m}_fold1.weights.h5").is_file()

    out_csv = tmp_path / "pred" / "bounding_boxes.csv"
    assert main(["predict", "--run", str(run), "--data", str(competition), "--out", str(out_csv)]) == 0
    pred = read_boxes(out_csv)  # the format the data package reads
    from whale.data import load_competition

    comp = load_competition(competition)
    assert set(pred) == set(comp.train["Image"]) | set(comp.test_images)
    from whale.boxes.labels import image_size

    for name, (x0, y0, x1, y1) in pred.items():
        w, h = image_size(comp.train_path(name) if name in set(comp.train["Image"]) else comp.test_path(name))
        assert 0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h
    assert "whole-image fallbacks" in capsys.readouterr().out

    assert main(["eval", "--run", str(run), "--data", str(competition), "--labels", str(labels), "--worst", "3"]) == 0
    text = capsys.readouterr().out
    assert "mean IoU" in text and "IoU histogram" in text and text.count("  IoU ") == 3


def test_retinanet_builds_offline_and_keeps_one_box(backend):
    pytest.importorskip("keras_cv")
    from whale.boxes.retinanet import build_retinanet, predict_unit

    model = build_retinanet(64, fpn_width=16, min_confidence=0.0)
    unit = predict_unit(model, np.random.default_rng(0).uniform(0, 255, (3, 64, 64, 3)), 64)
    assert unit.shape == (3, 4) and np.isfinite(unit).all()
    strict = build_retinanet(64, fpn_width=16, min_confidence=0.999)  # prior 0.01: nothing that sure
    assert np.isnan(predict_unit(strict, np.zeros((2, 64, 64, 3)), 64)).all()


def test_a_refined_run_reports_both_figures_and_predicts_through_its_refiners(competition, tmp_path, capsys):
    import json

    from whale.boxes.cli import main
    from whale.boxes.labels import read_labels
    from whale.boxes.predict import predict_boxes

    labels = tmp_path / "labels.csv"
    rows = (Path(competition) / "bounding_boxes.csv").read_text().splitlines()
    labels.write_text("\n".join(rows[:21]) + "\n")
    run = tmp_path / "run"
    args = ["train", "--data", str(competition), "--labels", str(labels), "--out", str(run), "--model", "vgg",
            "--set", "image_size=32", "--set", "folds=2", "--set", "epochs=1", "--set", "batch_size=8",
            "--set", "refine=true", "--set", "refine_size=32", "--set", "refine_epochs=1", "--set", "refine_passes=1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "refine fold 1: held-out mean IoU" in out and "cross-validated mean IoU refined" in out
    meta = json.loads((run / "run.json").read_text())
    assert meta["refine"] and meta["refine_from"] == "vgg" and set(meta["cv"]) == {"vgg", "refined"}
    assert (run / "cv.csv").read_text().splitlines()[0].endswith("refined_y1,refined_iou")
    oof = np.load(run / "oof.npz")  # the out-of-fold boxes unrounded: they give run.json's IoU again
    lab = read_labels(labels, competition)
    assert list(oof["names"]) == lab.names and sorted(set(oof["fold"].tolist())) == [0, 1]
    for name in ("vgg", "refined"):
        px, _ = geometry.to_pixels(oof[name], lab.sizes)
        assert geometry.iou(px, lab.boxes).mean() == pytest.approx(meta["cv"][name]["mean_iou"], abs=1e-9)
    assert (run / "models" / "refine_fold1.weights.h5").is_file()
    pred = predict_boxes(run, lab.paths[:5], progress=False)
    assert set(pred.per_model) == {"vgg", "refined"}
    final, _ = geometry.to_pixels(pred.per_model["refined"], pred.sizes)
    assert (pred.boxes == final).all()
    (run / "models" / "refine_fold0.weights.h5").unlink()
    from whale.core.errors import CheckpointError

    with pytest.raises(CheckpointError, match="refine_fold0"):
        predict_boxes(run, lab.paths[:5], progress=False)
