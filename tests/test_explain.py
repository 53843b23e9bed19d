"""Heatmaps: the paper's arithmetic on a hand-made tensor, the registry's layer in every branch, a match sheet of a trained tiny run."""

import numpy as np
import pytest

from whale.explain.heatmap import heatmap, overlay


def test_heatmap_counts_argmax_per_position_into_red_and_blue_and_std_into_green():
    f = np.zeros((2, 3, 4))
    f[0, 1, 0] = 5.0   # map 0 peaks at (0, 1)
    f[0, 1, 1] = 2.0   # map 1 peaks at (0, 1) too
    f[1, 2, 2] = 3.0   # map 2 peaks at (1, 2)
    f[..., 3] = -1.0
    f[1, 0, 3] = 4.0   # map 3 peaks at (1, 0)
    heat = heatmap(f)
    counts = np.array([[0, 2, 0], [1, 0, 1]], float)
    std = f.std(axis=2)  # brute force: spread over the 4 maps at each position
    np.testing.assert_allclose(heat[..., 0], counts / 2)
    np.testing.assert_allclose(heat[..., 2], counts / 2)
    np.testing.assert_allclose(heat[..., 1], std / std.max(), rtol=1e-6)
    assert heat.dtype == np.float32 and heat.shape == (2, 3, 3)
    # the explicit loop of the paper's description, for the count
    loop = np.zeros((2, 3))
    for c in range(4):
        y, x = np.unravel_index(np.argmax(f[..., c]), (2, 3))
        loop[y, x] += 1
    np.testing.assert_array_equal(loop, counts)


def test_heatmap_of_constant_maps_is_black_not_nan():
    heat = heatmap(np.ones((4, 4, 8)))
    assert np.isfinite(heat).all() and heat[..., 1].max() == 0
    with pytest.raises(ValueError, match=r"\[h, w, c\]"):
        heatmap(np.ones((4, 4)))


def test_overlay_upsamples_onto_the_image():
    img = np.full((20, 30, 1), 100, np.uint8)
    heat = np.zeros((2, 3, 3), np.float32)
    heat[..., 1] = 1.0
    assert (overlay(img, heat, alpha=0.0) == 100).all()
    out = overlay(img, heat, alpha=0.5)
    assert out.shape == (20, 30, 3) and out.dtype == np.uint8
    assert (out[..., 1] == 178).all() and (out[..., 0] == 50).all()  # 0.5*100 + 0.5*255, rounded


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tiny", "small", "convnet_v1", "convnet_v2", "densenet121", "resnet50",
                                  "inceptionv3", "seresnext50", "efficientnet_lite0", "efficientnet_lite1",
                                  "efficientnet_lite2"])
def test_every_branch_has_its_registry_heatmap_layer(backend, name):
    import keras

    from whale.explain.heatmap import FeatureTap
    from whale.models import BRANCHES, build_branch

    spec = BRANCHES[name]
    branch = build_branch(name, (max(spec.min_size, 64), max(spec.min_size, 64), 3))
    layer = branch.get_layer("backbone").get_layer(spec.heatmap_layer)
    if name != "inceptionv3":  # its last BatchNormalizations are unnamed: the registry names mixed10
        assert isinstance(layer, keras.layers.BatchNormalization)
    tap = FeatureTap(branch)
    maps = tap(np.zeros((1, *tap.size, 3), np.float32))  # size: the branch input's (height, width)
    assert maps.ndim == 4 and maps.shape[0] == 1
    assert set(BRANCHES) == {"tiny", "small", "convnet_v1", "convnet_v2", "densenet121", "resnet50",
                             "inceptionv3", "seresnext50", "efficientnet_lite0", "efficientnet_lite1",
                             "efficientnet_lite2"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from conftest import train_tiny_run

    return train_tiny_run(tmp_path_factory.mktemp("explain"), "explain-test")


def _png(path):
    from PIL import Image

    with Image.open(path) as im:
        return im.format, im.size


def test_match_sheet_is_written_for_a_trained_run(trained, tmp_path, capsys):
    from whale.data import load_competition
    from whale.explain.cli import main

    data, run = trained
    query = load_competition(data).test_images[0]
    out = tmp_path / "sheet.png"
    assert main(["--run", str(run), "--data", str(data), "--query", query, "--top", "3", "--out", str(out)]) == 0
    fmt, (w, h) = _png(out)
    assert fmt == "PNG" and h > w  # 4 rows (query + 3 matches) of 3 panels
    text = capsys.readouterr().out
    assert text.count(" via ") == 3 and "labels: " in text and "threshold" in text
    scores = [float(line.split()[2]) for line in text.splitlines() if " via " in line]
    assert scores == sorted(scores, reverse=True)


def test_heatmaps_over_images_and_a_missing_image_named(trained, tmp_path, capsys):
    from whale.data import load_competition
    from whale.explain.cli import main

    data, run = trained
    comp = load_competition(data)
    names = [comp.test_images[0], str(comp.train_path(comp.train["Image"].iloc[0]))]
    out = tmp_path / "heat.png"
    assert main(["--run", str(run), "--data", str(data), "--images", *names, "--out", str(out)]) == 0
    assert _png(out)[0] == "PNG"
    assert main(["--run", str(run), "--data", str(data), "--images", "nope.jpg", "--out", str(out)]) == 2
    assert "nope.jpg: no such file" in capsys.readouterr().err
