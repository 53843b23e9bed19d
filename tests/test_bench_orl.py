"""benchmarks/seeds/orl.py (seed 004, Section 4.3): splits, disjointness checks, pairs, and a --quick run."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.seeds import orl  # noqa: E402
from whale.core.errors import DataError, MissingFileError  # noqa: E402

FACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "orl" / "att_faces"


def test_split_is_five_and_five_per_person_and_follows_the_seed():
    train, test = orl.make_split(3)
    assert train.shape == test.shape == (40, 5)
    for p in range(40):
        assert sorted(np.concatenate([train[p], test[p]])) == list(range(10))
    again, _ = orl.make_split(3)
    other, _ = orl.make_split(4)
    assert np.array_equal(train, again) and not np.array_equal(train, other)


def test_check_disjoint_refuses_a_shared_file_and_shared_bytes(tmp_path):
    paths = [[tmp_path / f"s{p}" / f"{v}.pgm" for v in range(10)] for p in range(40)]
    digests = [[f"{p}-{v}" for v in range(10)] for p in range(40)]
    train, test = orl.make_split(0)
    orl.check_disjoint({"train": train, "test": test}, paths, digests)  # disjoint: no error
    with pytest.raises(DataError, match="in both the train and the test images .same file"):
        orl.check_disjoint({"train": train, "test": train[:, :1]}, paths, digests)
    # two different files with the same bytes, one in train and one in test
    digests[7][test[7, 0]] = digests[7][train[7, 0]]
    with pytest.raises(DataError, match="byte-identical"):
        orl.check_disjoint({"train": train, "test": test}, paths, digests)


def test_pairs_are_half_same_person_half_different_people():
    rng = np.random.default_rng(0)
    pairs, same = orl.sample_pairs(rng, n_people=40, per_person=5)
    assert pairs.shape == (400, 2) and pairs.dtype == np.int32 and same.sum() == 200
    person = pairs // 5
    assert np.all(pairs[:, 0] != pairs[:, 1])
    np.testing.assert_array_equal(person[:, 0] == person[:, 1], same == 1)
    assert pairs.min() >= 0 and pairs.max() < 200


def test_missing_faces_folder_is_an_error_naming_it(tmp_path):
    with pytest.raises(MissingFileError, match=str(tmp_path / "nowhere")):
        orl.find_faces(str(tmp_path / "nowhere"))


@pytest.mark.skipif(not (FACES / "s1" / "1.pgm").is_file(), reason="../shared/data/orl is absent")
def test_quick_run_writes_the_table_json(tmp_path, capsys):
    assert orl.main(["--quick", "--steps", "5", "--models", "cauchy,clipped_l1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "orl.json").read_text())
    assert set(result["summary"]) == {"cauchy", "clipped_l1"}
    for kind in ("cauchy", "clipped_l1"):
        assert 0 <= result["summary"][kind]["mean"] <= 100
    assert set(result["ranking"]) == {"cauchy", "pixels"}
    assert result["ranking"]["pixels"]["top1"]["mean"] > 0.5  # raw pixels already find most faces
    printed = capsys.readouterr().out
    assert "94.30 (1.70)" in printed and "Cauchy" in printed
    assert json.loads(printed.strip().splitlines()[-1])["benchmark"] == "orl"


@pytest.mark.skipif(not (FACES / "s1" / "1.pgm").is_file(), reason="../shared/data/orl is absent")
def test_steps_are_searched_per_model_on_held_out_training_images(tmp_path, capsys, monkeypatch):
    seen = []
    train = orl.train

    def spy(kind, images, per_person, steps, *args, **kwargs):
        seen.append((len(images), steps, kwargs.get("alpha_init")))
        return train(kind, images, per_person, steps, *args, **kwargs)

    monkeypatch.setattr(orl, "train", spy)
    assert orl.main(["--splits", "1", "--search-steps", "2,3", "--models", "cauchy", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "orl.json").read_text())
    chosen = result["constants"]["cauchy"]
    assert result["steps_grid"] == [2, 3] and chosen["steps"] in (2, 3)
    assert result["steps"] == {"cauchy": chosen["steps"]}
    # alpha searched at the grid's first step count, then steps with the chosen alpha: all on 160 images
    assert seen[:3] == [(160, 2, 1.0), (160, 2, 10.0), (160, 3, chosen["alpha_init"])]
    assert seen[3] == (200, chosen["steps"], chosen["alpha_init"])  # the split trains on its 200 images
    assert "steps search" in capsys.readouterr().out


def test_a_bad_steps_grid_is_an_error_naming_the_flag(tmp_path):
    for grid in ("300,x", "0,300"):
        with pytest.raises(DataError, match="--search-steps"):
            orl.main(["--search-steps", grid, "--models", "cauchy", "--out", str(tmp_path)])


def test_a_bad_c_grid_is_an_error_naming_the_flag(tmp_path):
    for grid in ("0.1,x", "0,1", ""):
        with pytest.raises(DataError, match="--c-grid"):
            orl.main(["--c-grid", grid, "--models", "cauchy", "--out", str(tmp_path)])


def test_the_svm_picks_c_from_the_grid_it_is_given():
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 5)
    f = rng.normal(size=(20, 3)) + y[:, None]
    folds = np.tile(np.arange(5), 4)
    acc, C = orl.l2_svm(f, y, f, y, folds, grid=(0.003,))
    assert C == 0.003 and 0.0 <= acc <= 1.0
    assert orl.l2_svm(f, y, f, y, folds, grid=(0.001, 0.01))[1] in (0.001, 0.01)
