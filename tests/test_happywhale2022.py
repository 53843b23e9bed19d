"""The Happywhale 2022 format end to end: profiles, reader, folds, ranking, submission, and a round trip.

Synthetic 2022 data -> run_fold.py -> ensemble.py -> a checked ``image,predictions`` submission scored
with MAP@5 against the synthetic truth; the 2019 format's behaviour is checked beside it.
"""

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from whale.core.errors import ConfigError, DataError
from whale.formats import FORMATS, HAPPYWHALE2022, HUMPBACK2019, detect_format, get_format

ROOT = Path(__file__).resolve().parent.parent
NEW = HAPPYWHALE2022.open_label

QUICK_STAGES = [{"epochs": 2, "k": 1000.0, "lr": 1.0e-3, "image_size": 32, "dataset": "main"}]
"""The round trip's schedule on conftest's tiny run (:data:`TINY_RUN`): two epochs at 32 px."""


@pytest.fixture(scope="module")
def comp2022(tmp_path_factory):
    from whale.data.synth import generate

    return generate(tmp_path_factory.mktemp("hw2022") / "data", n_ids=24, seed=5, size=64, progress=False,
                    fmt="happywhale2022", n_species=4)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_profiles_are_detected_from_the_header_and_can_be_overridden(tmp_path):
    _write(tmp_path / "a" / "train.csv", "Image,Id\nx.jpg,new_whale\n")
    _write(tmp_path / "b" / "train.csv", "image,species,individual_id\nx.jpg,beluga,abc\n")
    assert detect_format(tmp_path / "a") is HUMPBACK2019
    assert detect_format(tmp_path / "b") is HAPPYWHALE2022
    assert detect_format(tmp_path / "a", "happywhale2022") is HAPPYWHALE2022
    assert get_format(None) is HUMPBACK2019 and set(FORMATS) == {"humpback2019", "happywhale2022"}
    with pytest.raises(ConfigError, match="unknown competition format 'kaggle'.*humpback2019, happywhale2022"):
        get_format("kaggle")
    _write(tmp_path / "c" / "train.csv", "image,individual\nx.jpg,abc\n")
    with pytest.raises(DataError, match=r"c/train\.csv, line 1: header 'image,individual' fits no competition "
                                        r"format; expected Image,Id \(humpback2019\); image,species,individual_id"):
        detect_format(tmp_path / "c")


def test_reader_keeps_species_and_names_the_bad_row(tmp_path):
    from whale.data import read_train_csv

    path = _write(tmp_path / "train.csv", "image,species,individual_id\na.jpg,beluga,w1\nb.jpg,kiler_whale,w1\n")
    df = read_train_csv(path)
    assert df.columns.tolist() == ["Image", "Id", "species"]
    assert df["species"].tolist() == ["beluga", "kiler_whale"] and df["Id"].tolist() == ["w1", "w1"]
    _write(path, "image,species,individual_id\na.jpg,beluga,w1\nb.jpg,beluga,\n")
    with pytest.raises(DataError, match=r"train\.csv, line 3 \(data row 2\): empty individual_id for image "
                                        r"'b\.jpg' \(expected an individual's id or new_individual\)"):
        read_train_csv(path)
    _write(path, "image,species,individual_id\na.jpg,,w1\n")
    with pytest.raises(DataError, match=r"line 2 \(data row 1\): empty species"):
        read_train_csv(path)
    _write(path, "image,species,individual_id\na.jpg,beluga,w1\na.jpg,beluga,w2\n")
    with pytest.raises(DataError, match=r"image 'a\.jpg' appears more than once, on lines 2, 3"):
        read_train_csv(path)
    _write(path, "image,individual_id\na.jpg,w1\n")  # the 2022 columns minus species: neither format
    with pytest.raises(DataError, match=r"train\.csv, line 1: missing column\(s\) Image, Id.*"
                                        r"\(or image,species,individual_id \(happywhale2022\)\)"):
        read_train_csv(path)
    with pytest.raises(DataError, match=r"line 1: missing column\(s\) species"):
        read_train_csv(path, "happywhale2022")


def test_synthetic_2022_folder_loads_with_species_and_open_set_truth(comp2022):
    from whale.data import load_competition, read_solution

    assert (comp2022 / "train_images").is_dir() and (comp2022 / "test_images").is_dir()
    assert not (comp2022 / "train").exists()
    with open(comp2022 / "sample_submission.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["image", "predictions"] and rows[1][1].split()[0] == NEW
    comp = load_competition(comp2022)
    assert comp.format is HAPPYWHALE2022 and comp.open_label == NEW
    assert comp.train_path(comp.train["Image"][0]).parent.name == "train_images"
    assert NEW not in set(comp.train["Id"])  # 2022's train.csv has no open-set rows
    species = comp.train.groupby("Id")["species"].nunique()
    assert (species == 1).all() and comp.train["species"].nunique() >= 2  # one species per individual
    sol = read_solution(comp2022, comp.test_images)
    unseen = [image for image, i in sol.items() if i not in set(comp.train["Id"])]
    assert unseen and all(sol[image] == NEW for image in unseen)


def test_folds_validate_singletons_as_new_individual_and_2019_is_unchanged():
    from whale.data.folds import assign_folds, fold_summary, split

    rng = np.random.default_rng(0)
    rows = [(f"m{i}.jpg", f"big{i % 6}") for i in range(36)] + [(f"s{i}.jpg", f"single{i}") for i in range(20)]
    df = pd.DataFrame(rows, columns=["Image", "Id"]).iloc[rng.permutation(len(rows))].reset_index(drop=True)
    f19 = assign_folds(df, seed=1)
    assert f19.equals(assign_folds(df, seed=1, fmt="humpback2019"))
    assert (f19[df["Id"].str.startswith("single")] == -1).all()  # 2019: ids seen once never validate
    f22 = assign_folds(df, seed=1, fmt=HAPPYWHALE2022)
    singles = df["Id"].str.startswith("single")
    assert (f22[singles] >= 0).sum() == 12  # round(9 known / 3) per fold, 4 folds
    assert f22[~singles].equals(f19[~singles])  # the known ids' draw is the same
    for k in range(4):
        train_part, val_part = split(df, f22, k, fmt=HAPPYWHALE2022)
        assert (val_part["Id"] == NEW).sum() == 3 and NEW not in set(train_part["Id"])
        known = val_part[val_part["Id"] != NEW]
        assert known["Id"].isin(set(train_part["Id"])).all()
        _, val19 = split(df, f19, k)
        assert NEW not in set(val19["Id"])
    assert "new_individual" in fold_summary(df, f22, fmt=HAPPYWHALE2022).splitlines()[0]
    assert fold_summary(df, f19).splitlines()[0].split() == ["fold", "known", "new_whale", "nw", "share", "ids"]


def test_ranking_inserts_and_checks_the_format_open_label():
    from whale.ranking import map_by_threshold, predict_top5
    from whale.ranking.newwhale import new_whale_shares
    from whale.ranking.topids import TopIds, concat_top_ids

    scores = np.array([[0.9, 0.2, 0.8, 0.1, 0.3, 0.05, 0.99]], dtype=np.float32)
    gallery = ["a", "b", "c", "d", "e", "f", NEW]  # an open-set gallery image never ranks
    preds = predict_top5(scores, gallery, 0.5, open_label=NEW)
    assert preds == [["a", "c", NEW, "e", "b"]]
    assert predict_top5(scores, gallery[:-1] + ["g"], 0.5) == [["g", "a", "c", "new_whale", "e"]]
    assert new_whale_shares(preds, NEW).tolist() == [0, 0, 1, 0, 0]
    names, idx, vals = np.array(["a", "c", "e"]), np.array([[0, 1, 2]]), np.array([[0.9, 0.8, 0.3]])
    assert map_by_threshold(names, idx, vals, [NEW], [0.5], open_label=NEW).tolist() == [1 / 3]
    assert map_by_threshold(names, idx, vals, [NEW], [0.5]).tolist() == [0.0]  # 2019's label: not open-set
    top = TopIds(np.array([["a"]]), np.array([[0.1]], np.float32), None, NEW)
    with pytest.raises(ValueError, match="different open-set labels"):
        concat_top_ids([top, TopIds(top.names, top.scores)])


def test_submission_writes_and_checks_image_predictions(tmp_path):
    from whale.submission import check_submission, main, write_submission

    cols = HAPPYWHALE2022.submission_columns
    sample = _write(tmp_path / "sample.csv", "image,predictions\nb.jpg,x\na.jpg,x\n")
    out = write_submission(tmp_path / "sub.csv", ["a.jpg", "b.jpg"], [[NEW, "1", "2", "3", "4"], "5 6 7 8 " + NEW],
                           sample=sample, columns=cols)
    assert out.read_text().splitlines() == ["image,predictions", "b.jpg,5 6 7 8 new_individual",
                                            "a.jpg,new_individual 1 2 3 4"]
    assert check_submission(out, sample, cols) == []
    assert check_submission(out) == [f"{out}: line 1: expected the header Image,Id, got 'image,predictions'"]
    assert main(["check", str(out), "--sample", str(sample)]) == 0  # the header says which format


def test_round_trip_synth_run_fold_ensemble_to_a_scored_submission(comp2022, tiny_config, tmp_path):
    """2022 data -> run_fold.py (tiny, 2 epochs) -> ensemble.py --tune -> checked image,predictions + MAP@5."""
    from whale.data import read_solution
    from whale.metrics import map_at_k
    from whale.submission import check_submission

    config = _write(tmp_path / "quick.yaml", tiny_config("hw2022-test", 3, QUICK_STAGES))
    run, sub = tmp_path / "run", tmp_path / "sub.csv"
    cmd = [sys.executable, str(ROOT / "run_fold.py"), "--config", str(config), "--fold", "1",
           "--data", str(comp2022), "--out", str(run), "--verbose", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert json.loads((run / "run.json").read_text())["format"] == "happywhale2022"  # ensemble.py reads it
    val = np.load(run / "scores" / "val.npz", allow_pickle=False)
    assert NEW in set(val["query_ids"]) and NEW not in set(val["gallery_ids"])
    out = subprocess.run([sys.executable, str(ROOT / "ensemble.py"), str(run), "--tune", "--out", str(sub)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "format: happywhale2022" in out.stdout and "of them new_individual" in out.stdout
    sample = comp2022 / "sample_submission.csv"
    assert check_submission(sub, sample, HAPPYWHALE2022.submission_columns) == []
    rows = pd.read_csv(sub, dtype=str, keep_default_na=False)
    assert rows.columns.tolist() == ["image", "predictions"]
    labels = [p.split() for p in rows["predictions"]]
    assert all(len(set(x)) == 5 for x in labels) and not any("new_whale" in x for x in labels)
    assert any(NEW in x for x in labels)
    sol = read_solution(comp2022, rows["image"].tolist())
    score = map_at_k(labels, [sol[i] for i in rows["image"]])
    assert 0.0 < score <= 1.0
