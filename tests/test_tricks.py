"""The 2019 tricks as options: flipped identities, test-time views, train-only rows of train.csv."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from whale import NEW_WHALE
from whale.core.errors import ConfigError, DataError

BASE = {"name": "t", "stages": [{"epochs": 1, "k": 1.0, "lr": 1.0e-3, "image_size": 32}]}


# ------------------------------------------------------------------------------ config
def test_tricks_are_off_by_default_and_round_trip_through_yaml(tmp_path):
    from whale.config import config_from_dict, load_config

    cfg = config_from_dict(BASE)
    assert (cfg.flip_ids, cfg.tta, cfg.tta_mode) == (False, (), "features")
    on = config_from_dict({**BASE, "flip_ids": True, "tta": ["zoom", "bright"], "tta_mode": "scores"})
    on.to_yaml(tmp_path / "c.yaml")
    back = load_config(tmp_path / "c.yaml")
    assert (back.flip_ids, back.tta, back.tta_mode) == (True, ("zoom", "bright"), "scores")


@pytest.mark.parametrize("bad, key", [({"tta": ["mirror"]}, "tta[0]"), ({"tta": ["zoom", "zoom"]}, "tta"),
                                      ({"tta": "zoom"}, "tta"), ({"tta_mode": "mean"}, "tta_mode"),
                                      ({"flip_ids": "maybe"}, "flip_ids"), ({"flips": True}, "flips")])
def test_bad_trick_keys_are_refused_naming_the_key(bad, key):
    from whale.config import config_from_dict

    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        config_from_dict({**BASE, **bad}, source="cfg.yaml")


# ----------------------------------------------------------------- flipped identities
def _fake_crops(monkeypatch):
    """load_crop returns a distinct asymmetric crop per path: pixel (y, x) = 10 * path + x."""
    from whale.data import images

    def fake(path, box, size, channels=3, margin=0.05, crop="box"):
        row = (10 * int(Path(path).stem) + np.arange(size)).astype(np.uint8)
        return np.repeat(np.broadcast_to(row, (size, size))[:, :, None], channels, axis=2).copy()

    monkeypatch.setattr(images, "load_crop", fake)


def test_store_mirrors_the_flagged_crops_only(monkeypatch):
    from whale.data import ImageStore

    _fake_crops(monkeypatch)
    plain = ImageStore(["1.jpg", "2.jpg"], None, 8, channels=1)
    mirrored = ImageStore(["1.jpg", "2.jpg"], None, 8, channels=1, flips=[False, True])
    np.testing.assert_array_equal(mirrored[0], plain[0])
    np.testing.assert_array_equal(mirrored[1], plain[1][:, ::-1])
    with pytest.raises(ValueError, match="one flip flag per path"):
        ImageStore(["1.jpg"], None, 8, flips=[True, False])


def _image_set(ids):
    from whale.data import ImageSet

    names = [f"{i}.jpg" for i in range(len(ids))]
    return ImageSet(names, np.array(ids, dtype=str), [Path(n) for n in names], [None] * len(ids))


def test_mirrors_are_new_identities_after_the_originals():
    s = _image_set(["w_a", "w_a", "w_b", NEW_WHALE]).with_mirrors()
    assert s.names[4:] == ["0.jpg#flip", "1.jpg#flip", "2.jpg#flip", "3.jpg#flip"]
    assert list(s.ids) == ["w_a", "w_a", "w_b", NEW_WHALE, "w_a_flip", "w_a_flip", "w_b_flip", NEW_WHALE]
    assert list(s.flip_flags) == [False] * 4 + [True] * 4
    assert s.paths[5] == s.paths[1]
    sub = s.subset(np.array([5, 0]))
    assert list(sub.flip_flags) == [True, False] and list(sub.ids) == ["w_a_flip", "w_a"]
    with pytest.raises(ValueError, match="already"):
        s.with_mirrors()


def test_mirrored_fold_pairs_both_hands_and_keeps_validation():
    from whale.data.imagesets import FoldData, _fold

    gallery = _image_set(["w_a", "w_a", "w_b", "w_c", "w_c"])
    val = _image_set(["w_a"])
    data: FoldData = _fold(gallery, val)
    m = data.with_mirrors()
    assert m.val is val and len(m.gallery) == 10
    assert sorted(set(m.pairs.ids)) == ["w_a", "w_a_flip", "w_c", "w_c_flip"]  # w_b has no partner
    assert [m.gallery.names[i] for i in m.pairs_in_gallery] == m.pairs.names
    assert m.gallery.names[:5] == gallery.names  # validation reads the originals at 0..n-1


def test_the_mirrored_fold_is_kept_with_its_fold_not_by_id():
    import copy
    import dataclasses
    from types import SimpleNamespace

    from whale.data.imagesets import _fold
    from whale.training.trainer import Trainer

    val = _image_set(["w_a"])
    data = _fold(_image_set(["w_a", "w_a", "w_b", "w_b"]), val)
    other = _fold(_image_set(["w_c", "w_c", "w_c"]), val)
    m = data.mirrored()
    assert data.mirrored() is m and m.gallery.names == data.with_mirrors().gallery.names
    assert len(other.mirrored().gallery) == 6 and sorted(set(other.mirrored().pairs.ids)) == ["w_c", "w_c_flip"]
    assert copy.copy(data).mirrored() is m  # a copy holds the same images: the same mirror
    swapped = dataclasses.replace(data, gallery=_image_set(["w_d", "w_d"]))  # another fold: its own mirror
    assert list(swapped.mirrored().gallery.ids) == ["w_d", "w_d", "w_d_flip", "w_d_flip"]
    data.gallery = other.gallery  # a gallery replaced in place: mirrored again, not the stale one
    assert data.mirrored() is not m and list(data.mirrored().gallery.ids) == list(other.mirrored().gallery.ids)
    # the trainer asks each fold for its mirror; the homography views and flip_ids=false train as they are
    views = _fold(_image_set(["w_e", "w_e"]), val)
    trainer = Trainer.__new__(Trainer)
    trainer.cfg, trainer.homography = SimpleNamespace(flip_ids=True), views
    assert trainer._training(other) is other.mirrored() and trainer._training(swapped) is swapped.mirrored()
    assert trainer._training(views) is views
    trainer.cfg = SimpleNamespace(flip_ids=False)
    assert trainer._training(other) is other


# --------------------------------------------------------------------- test-time views
def test_views_by_hand():
    import cv2

    from whale.data.augment import VIEW_GAIN, build_plain, build_view

    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)
    np.testing.assert_array_equal(build_view("plain", 10)(img), build_plain(10)(img))
    left = cv2.resize(img[1:19, 0:18], (10, 10), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(build_view("shift_left", 10)(img), left)
    right = cv2.resize(img[1:19, 2:20], (10, 10), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(build_view("shift_right", 10)(img), right)
    plain = build_plain(10)(img).astype(np.float32)
    np.testing.assert_array_equal(build_view("bright", 10)(img), np.clip(np.rint(plain * VIEW_GAIN), 0, 255))
    np.testing.assert_array_equal(build_view("dark", 10)(img), np.clip(np.rint(plain / VIEW_GAIN), 0, 255))
    with pytest.raises(ValueError, match="view"):
        build_view("mirror", 10)


class _DotScorer:
    def matrix(self, fa, fb, dtype=np.float32, progress=False):
        return (fa @ fb.T).astype(dtype)


def _run_scorer(views, mode, mirror):
    from whale.inference.runs import RunScorer

    rs = RunScorer.__new__(RunScorer)
    rs.views, rs.tta_mode, rs.mirror, rs.verbose = ("plain", *views), mode, mirror, False
    rs.scorer = _DotScorer()
    return rs


def test_scores_average_over_mirrors_and_views_as_asked():
    rng = np.random.default_rng(1)
    fq, fg = rng.normal(size=(2, 3, 4, 5)), rng.normal(size=(2, 3, 6, 5))
    by_features = _run_scorer(("zoom", "dark"), "features", True).matrix(fq, fg)
    want = np.mean([fq[g].mean(0) @ fg[g].mean(0).T for g in range(2)], axis=0)
    np.testing.assert_allclose(by_features, want, rtol=2e-3, atol=2e-3)
    by_scores = _run_scorer(("zoom", "dark"), "scores", True).matrix(fq, fg)
    want = np.mean([fq[g, v] @ fg[g, v].T for g in range(2) for v in range(3)], axis=0)
    np.testing.assert_allclose(by_scores, want, rtol=2e-3, atol=2e-3)
    plain = _run_scorer((), "features", False).matrix(fq[0, 0], fg[0, 0])
    np.testing.assert_allclose(plain, fq[0, 0] @ fg[0, 0].T, rtol=2e-3, atol=2e-3)
    assert by_scores.dtype == np.float16


@pytest.mark.backend
def test_run_scorer_features_are_the_branch_on_each_view_and_mirror(backend, tmp_path):
    import cv2

    from whale.data.augment import build_view
    from whale.inference.runs import RunScorer
    from whale.models import build_branch, build_head, build_siamese

    branch = build_branch("tiny", (32, 32, 1))
    model = build_siamese(branch, build_head(int(branch.output_shape[-1]), mid=4))
    rng = np.random.default_rng(2)
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"{i}.png")
        cv2.imwrite(str(paths[-1]), rng.integers(0, 256, (50, 60), dtype=np.uint8))
    rs = RunScorer(model, 1, 0.0, verbose=False, views=("shift_left",), mirror=True)
    f = rs.features(paths, [None] * 3)
    assert f.shape[:3] == (2, 2, 3)
    from whale.data import ImageStore, crop_size_for

    crops = ImageStore(paths, None, crop_size_for(32), channels=1, margin=0.0)
    x = np.stack([build_view("shift_left", 32, 1)(crops[i][:, ::-1].copy()) for i in range(3)]).astype(np.float32)
    np.testing.assert_allclose(f[1, 1], branch.predict_on_batch(x), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------- rows that never validate
def test_train_only_rows_are_never_validated_and_leave_the_draw_alone():
    from whale.data import assign_folds

    rng = np.random.default_rng(3)
    ids = [f"w_{i % 9}" for i in range(60)] + [NEW_WHALE] * 20
    base = pd.DataFrame({"Image": [f"{i}.jpg" for i in range(80)], "Id": ids, "Origin": "train"})
    extra = pd.DataFrame({"Image": [f"p{i}.jpg" for i in range(15)], "Id": rng.choice(ids[:60], 15),
                          "Origin": rng.choice(["pseudo", "duplicate"], 15)})
    both = pd.concat([base, extra], ignore_index=True)
    folds = assign_folds(both, seed=4)
    assert (folds.iloc[80:] == -1).all()
    np.testing.assert_array_equal(folds.iloc[:80].to_numpy(), assign_folds(base, seed=4).to_numpy())
    np.testing.assert_array_equal(assign_folds(base, seed=4).to_numpy(),
                                  assign_folds(base[["Image", "Id"]], seed=4).to_numpy())


def test_origin_column_is_read_and_checked(tmp_path):
    from whale.data import read_train_csv

    (tmp_path / "train.csv").write_text("Image,Id,Origin\na.jpg,w_1,\nb.jpg,w_1,pseudo\n")
    df = read_train_csv(tmp_path / "train.csv")
    assert list(df["Origin"]) == ["train", "pseudo"]
    (tmp_path / "train.csv").write_text("Image,Id,Origin\na.jpg,w_1,test\n")
    with pytest.raises(DataError, match=r"train.csv, line 2 .*Origin is 'test'"):
        read_train_csv(tmp_path / "train.csv")


# ------------------------------------------------------------------ training with flips
@pytest.mark.backend
def test_a_flip_ids_run_trains_on_both_hands_and_scores_the_originals(backend, tmp_path):
    from whale.config import config_from_dict
    from whale.data.synth import generate
    from whale.inference.scorefile import load_score_file
    from whale.training.trainer import train_fold

    data = generate(tmp_path / "data", n_ids=10, seed=1, size=64, progress=False)
    cfg = config_from_dict({**BASE, "model": {"branch": "tiny", "channels": 1, "head_mid": 4}, "batch_size": 16,
                            "flip_ids": True, "tta": ["zoom"], "mining_interval": 1})
    lines = []
    res = train_fold(cfg, data, 0, tmp_path / "run", verbose=0, log=lines.append)
    assert res.finished
    n_known = sum(1 for line in (data / "train.csv").read_text().splitlines()[1:] if NEW_WHALE not in line)
    pairs_line = next(m for m in lines if m.startswith("epoch 1 ("))
    sf = load_score_file(tmp_path / "run" / "scores" / "test.npz")
    assert len(sf.gallery) == n_known and not any(i.endswith("_flip") for i in sf.gallery_ids)
    # every pair image twice (a positive, a negative), both hands: twice the pairs of one hand
    from whale.data import fold_data, load_competition

    one_hand = len(fold_data(load_competition(data), 0, cfg.seed).pairs)
    assert f": {4 * one_hand} pairs" in pairs_line
