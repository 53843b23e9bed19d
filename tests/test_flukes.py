"""The fluke-aware learned path end to end: ``crop: content``, ``aspect: 2`` and ``mining: auto`` in one tiny run.

The synthetic competition's photos are letterboxed on white (as the 2019 humpback photos) and its
boxes dropped, so only ``crop: content`` takes the padding off; training, scoring and heatmaps must
all see the same 2:1 crops.
"""
from pathlib import Path

import numpy as np
import pytest

WIDE_RUN = {
    "name": "wide", "seed": 2, "batch_size": 16, "mining_interval": 1, "workers": 1, "augment": True,
    "model": {"branch": "tiny", "weights": None, "channels": 1, "head_mid": 8, "head_hidden": 0},
    "crop": "content", "aspect": 2.0, "mining": "auto", "batching": "images",
    "stages": [{"epochs": 1, "k": 1000.0, "lr": 1.0e-3, "image_size": 32},
               {"epochs": 1, "k": 0.5, "lr": 5.0e-4, "image_size": 40}],
}


def _letterbox(folder: Path) -> None:
    """Every photo of ``folder`` resized to 2:1 and letterboxed on white into a square; boxes dropped."""
    import cv2

    (folder / "bounding_boxes.csv").unlink()
    for path in list((folder / "train").glob("*.jpg")) + list((folder / "test").glob("*.jpg")):
        img = cv2.imread(str(path))
        w = img.shape[1]
        canvas = np.full((w, w, 3), 255, np.uint8)
        canvas[w // 4: w // 4 + w // 2] = cv2.resize(img, (w, w // 2), interpolation=cv2.INTER_AREA)
        cv2.imwrite(str(path), canvas)


@pytest.fixture(scope="module")
def letterboxed(tmp_path_factory):
    from whale.data.synth import generate

    data = generate(tmp_path_factory.mktemp("flukes") / "data", n_ids=12, seed=6, size=96, progress=False)
    _letterbox(data)
    return data


def test_content_crops_hold_no_white_padding(letterboxed):
    from whale.data import ImageSet, load_competition

    comp = load_competition(letterboxed)
    images = ImageSet.known(comp)
    assert all(b is None for b in images.boxes)
    box = images.store((37, 74), channels=1, margin=0.0, crop="box")
    content = images.store((37, 74), channels=1, margin=0.0, crop="content")
    for i in range(5):
        assert (box[i][:6] >= 250).all()  # the letterbox's white rows
        assert content[i].shape == (37, 74, 1) and (content[i][:2] < 245).any()


@pytest.mark.slow
@pytest.mark.backend
def test_a_wide_content_cropped_run_trains_scores_and_explains_at_its_aspect(backend, letterboxed, tmp_path,
                                                                          monkeypatch):
    from whale.config import config_from_dict
    from whale.data import ImageSet, crop_size_for, fold_data, load_competition, load_crop
    from whale.data.augment import build_plain
    from whale.explain.cli import DISPLAY, Explainer
    from whale.inference.runs import RunScorer, load_run_model
    from whale.inference.scorefile import load_score_file
    from whale.mining import miners
    from whale.models import model_input_size
    from whale.objectives import make_scorer
    from whale.training.trainer import train_fold

    monkeypatch.setattr(miners, "AUTO_EXACT_MAX", 10)  # the tiny set mines pruned, as a real one above 3,000
    cfg = config_from_dict(WIDE_RUN)
    lines = []
    result = train_fold(cfg, letterboxed, 0, tmp_path / "run", verbose=0, log=lines.append)
    assert result.finished and result.epochs_done == 2
    assert sum("negatives (pruned)" in str(line) for line in lines) == 2
    assert any("32x64px" in str(line) for line in lines) and any("40x80px" in str(line) for line in lines)

    assert model_input_size(load_run_model(tmp_path / "run", "last")[0]) == (40, 80)
    model, run_cfg = load_run_model(tmp_path / "run")  # "best", what the scores come from: either stage's
    hw = model_input_size(model)
    assert hw in ((32, 64), (40, 80)) and run_cfg.crop == "content" and run_cfg.aspect == 2.0
    rs = RunScorer.for_config(model, run_cfg, verbose=False)
    assert rs.image_size == hw and rs.crop == "content"

    # The run's validation scores: its branch on content crops at its 2:1 size, by hand.
    comp = load_competition(letterboxed)
    data = fold_data(comp, 0, cfg.seed, val_new_whale=cfg.val_new_whale)
    plain = build_plain(hw, 1)

    def by_hand(images: ImageSet) -> np.ndarray:
        x = np.stack([plain(load_crop(p, b, crop_size_for(hw), channels=1, margin=cfg.box_margin,
                                      crop="content")) for p, b in zip(images.paths, images.boxes)])
        return np.asarray(model.get_layer("branch").predict(x.astype(np.float32), verbose=0))

    val = load_score_file(tmp_path / "run" / "scores" / "val.npz")
    assert list(val.query) == data.val.names and list(val.gallery) == data.gallery.names
    want = make_scorer(model).matrix(by_hand(data.val), by_hand(data.gallery), progress=False)
    np.testing.assert_allclose(val.scores.astype(np.float32), want, atol=2e-3)

    ex = Explainer(tmp_path / "run")
    panels = ex.panels(data.val.paths[0], data.val.boxes[0], "query")
    assert [p[1].shape for p in panels] == [(DISPLAY, 2 * DISPLAY, 3)] * 2  # shown at the model's aspect
