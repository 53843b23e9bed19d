"""dataset: homography stages: self-supervised pairs of unlabelled photos (whale.data.unlabelled)."""

from pathlib import Path

import numpy as np
import pytest

from whale.core.errors import ConfigError

STAGES = [{"epochs": 2, "lr": 1.0e-3, "image_size": 32, "dataset": "homography"},
          {"epochs": 1, "k": 1000.0, "lr": 1.0e-3, "image_size": 32, "dataset": "main"},
          {"epochs": 1, "k": 0.5, "lr": 5.0e-4, "image_size": 32, "dataset": "main"}]
QUIET = dict(verbose=0, log=lambda *_: None)


@pytest.fixture(scope="module")
def comp_dir(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("homography") / "comp", n_ids=16, seed=5, size=96, progress=False)


def _photos(n=5, size=40, seed=0):
    """``n`` distinct random uint8 ``[size, size, 1]`` photos."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (size, size, 1), dtype=np.uint8) for _ in range(n)]


def test_views_positive_and_negative_pairs_have_the_right_labels():
    from whale.data import ImageSet
    from whale.data.unlabelled import homography_data, random_negatives
    from whale.mining import positive_pairs
    from whale.training.pairs import make_epoch_pairs

    names = [f"p{i}.jpg" for i in range(6)]
    views = homography_data(ImageSet(names, np.array(names), [Path(n) for n in names], [None] * 6))
    assert len(views.pairs) == 12 and len(views.val) == 0
    photo = np.arange(12) % 6
    positives = positive_pairs(views.pairs.ids, np.random.default_rng(0))
    negatives = random_negatives(12, np.random.default_rng(1))
    pairs, labels = make_epoch_pairs(positives, negatives, np.random.default_rng(2))
    assert labels.sum() == 12 and len(labels) == 24  # half positive
    same = photo[pairs[:, 0]] == photo[pairs[:, 1]]
    np.testing.assert_array_equal(same, labels == 1)   # positive <=> one photo
    assert (pairs[:, 0] != pairs[:, 1]).all()          # ... under two views (two slots, two homographies)
    np.testing.assert_array_equal(np.sort(negatives[:, 0]), np.arange(12))  # one negative per view
    # The partner's photo is uniform over the others: every other photo turns up.
    many = random_negatives(12, np.random.default_rng(3))
    for seed in range(4, 40):
        many = np.concatenate([many, random_negatives(12, np.random.default_rng(seed))])
    assert all(set(photo[many[photo[many[:, 0]] == p, 1]]) == set(range(6)) - {p} for p in range(6))
    with pytest.raises(ValueError, match="n_views"):
        random_negatives(2, np.random.default_rng(0))


def test_a_positive_is_two_different_homographies_of_one_photo():
    from whale.data.augment import build_plain
    from whale.data.homography import frame_homography, warp
    from whale.data.unlabelled import HomographyWarp, TwoViews
    from whale.training.pairs import PairDataset, _item_rng

    photos = _photos()
    store = TwoViews(photos)
    assert len(store) == 10 and store[7] is photos[2]
    plain = build_plain(32, 1)
    aug = HomographyWarp(0.15, 90.0, plain)
    pairs = np.array([[0, 5], [1, 6], [2, 3], [4, 8]])
    labels = np.array([1, 1, 0, 0], np.float32)
    ds = PairDataset(store, pairs, labels, 32, aug, batch_size=4, seed=7, epoch=3, shuffle=False)
    (a, b), y = ds[0]
    np.testing.assert_array_equal(y[:, 0], labels)
    for row, (i, j) in enumerate(pairs):
        for side, view, img in ((0, i, a), (1, j, b)):
            # Each image is its own photo under the homography of its slot's generator, then resized.
            rng = _item_rng(7, 3, row, side)
            H = frame_homography(rng, photos[view % 5].shape, 0.15, 90.0)
            np.testing.assert_array_equal(img[row], plain(warp(photos[view % 5], H)))
    assert not np.array_equal(a[0], b[0]) and not np.array_equal(a[1], b[1])  # two homographies differ
    # Same keys, same images: a resumed epoch sees the same pairs.
    (a2, b2), _ = PairDataset(store, pairs, labels, 32, aug, batch_size=4, seed=7, epoch=3, shuffle=False)[0]
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)


def test_photos_default_to_test_and_new_whale_images_outside_validation(comp_dir, tmp_path):
    from whale import NEW_WHALE
    from whale.data import fold_data, load_competition
    from whale.data.unlabelled import folder_photos, unlabelled_photos

    comp = load_competition(comp_dir)
    data = fold_data(comp, 0, 0)
    photos = unlabelled_photos(comp, (), data.val.names)
    new = set(comp.train.loc[comp.train["Id"] == NEW_WHALE, "Image"])
    assert set(photos.names) == (new | set(comp.test_images)) - set(data.val.names)
    assert set(photos.names) & set(data.val.names) == set() and new - set(data.val.names)
    np.testing.assert_array_equal(photos.ids, photos.names)  # each photo its own id
    # Any folder: every photo below it, whole images.
    (tmp_path / "a" / "b").mkdir(parents=True)
    for i, name in enumerate(["a/x.png", "a/b/y.JPG", "a/notes.txt"]):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in folder_photos(tmp_path / "a")] == ["y.JPG", "x.png"]
    with pytest.raises(FileNotFoundError, match="homography.photos: .*nowhere: not a folder"):
        folder_photos(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="at least 2 photos"):
        unlabelled_photos(None, [tmp_path / "a" / "b"])


def test_config_errors_name_the_key():
    from whale.config import config_from_dict

    def load(stage=None, **top):
        return config_from_dict({"name": "h", "stages": [{**STAGES[0], **(stage or {})}, STAGES[1]], **top}, "h.yaml")

    cfg = load()
    assert cfg.stages[0].k == 1000.0 and cfg.homography.R == 0.15 and cfg.homography.phi == 90.0
    assert "homography" not in cfg.to_dict()  # defaults are not written: older configs keep their hash
    assert load(homography={"photos": "pics", "R": 0.25}).homography.photos == ("pics",)
    for stage, top, key in (({"k": 0.5}, {}, r"stages\[0\]\.k: expected no k .*random other photos"),
                            ({"k_end": 0.1}, {}, r"stages\[0\]\.k_end: expected no k_end"),
                            ({}, {"homography": {"R": 2}}, r"homography\.R: expected"),
                            ({}, {"homography": {"phi": -1}}, r"homography\.phi: expected"),
                            ({}, {"homography": {"photos": [""]}}, r"homography\.photos\[0\]"),
                            ({}, {"homography": {"strength": 1}}, r"homography\.strength: unknown key"),
                            ({}, {"objective": "arcface"}, r"stages\[0\]\.dataset: expected a pair objective")):
        with pytest.raises(ConfigError, match=key):
            load(stage, **top)


@pytest.mark.backend
def test_a_homography_stage_trains_and_resumes_exactly(backend, comp_dir, tmp_path, tiny_config):
    import csv

    from whale.config import load_config
    from whale.models.checkpoint import load_checkpoint
    from whale.training.trainer import Trainer, train_fold
    from whale.data import fold_data, load_competition

    path = tmp_path / "cfg.yaml"
    path.write_text(tiny_config("homography-test", 4, STAGES))
    cfg = load_config(path, overrides={"augment": True})
    lines = []
    full = train_fold(cfg, comp_dir, 0, tmp_path / "full", score=False, verbose=0, log=lines.append)
    assert full.finished and full.epochs_done == 4
    with open(tmp_path / "full" / "log.csv") as f:
        assert [r["dataset"] for r in csv.DictReader(f)] == ["homography"] * 2 + ["main"] * 2
    assert any("random negatives of epochs 1-2 (dataset: homography" in line for line in lines)
    assert not any("mining the negatives of epochs 1-2" in line for line in lines)

    # Killed inside the homography block: the resume reads its random negatives back and goes on.
    part = train_fold(cfg, comp_dir, 0, tmp_path / "part", max_epochs=1, score=False, **QUIET)
    assert not part.finished and part.epochs_done == 1
    assert (tmp_path / "part" / "checkpoints" / "mined-e0000.npz").is_file()
    rest = train_fold(cfg, comp_dir, 0, tmp_path / "part", resume=True, score=False, **QUIET)
    assert rest.finished
    with np.load(tmp_path / "full" / "checkpoints" / "mined-e0002.npz") as a, \
            np.load(tmp_path / "part" / "checkpoints" / "mined-e0002.npz") as b:
        np.testing.assert_array_equal(a["epoch0"], b["epoch0"])
    w_full = load_checkpoint(tmp_path / "full" / "checkpoints", "last")[0].get_weights()
    w_part = load_checkpoint(tmp_path / "part" / "checkpoints", "last")[0].get_weights()
    for a, b in zip(w_full, w_part, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    # The Trainer alone refuses a homography stage without photos.
    trainer = Trainer(load_config(path), fold_data(load_competition(comp_dir), 0, 4), tmp_path / "none", **QUIET)
    with pytest.raises(ConfigError, match="dataset: homography' stage but no unlabelled photos \\(homography.photos\\)"):
        trainer.run()


def test_benchmark_moves_steps_from_the_first_stage_to_a_homography_stage():
    from benchmarks.seeds.homography_pretrain import steps_per_epoch, with_homography
    from whale.config import config_from_dict

    cfg = config_from_dict({"name": "b", "batch_size": 32, "stages": STAGES[1:]})
    cfg = config_from_dict({**cfg.to_dict(), "stages": [{**STAGES[1], "epochs": 4}, STAGES[2]]})
    moved = with_homography(cfg, 0.5, 100, ["pics"])
    assert steps_per_epoch(100, 32) == 7
    assert [s.dataset for s in moved.stages] == ["homography", "main", "main"]
    assert moved.stages[0].steps == 2 * 7 and moved.stages[1].epochs == 2 and moved.homography.photos == ("pics",)
    assert moved.stages[0].lr == cfg.stages[0].lr and moved.stages[0].image_size == cfg.stages[0].image_size
    with pytest.raises(ValueError, match="too few"):
        with_homography(config_from_dict({"name": "c", "stages": [STAGES[1]]}), 0.5, 100, None)
