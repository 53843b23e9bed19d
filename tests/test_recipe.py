"""ensemble.py --recipe: a YAML recipe of runs, weights and threshold mode, checked key by key."""

from pathlib import Path

import pytest

from whale.ensemble.recipe import load_recipe, recipe_from_dict
from whale.core.errors import ConfigError


def test_a_recipe_gives_runs_weights_and_mode(tmp_path):
    for fold in range(4):
        (tmp_path / "dn" / f"fold{fold}").mkdir(parents=True)
    path = tmp_path / "r.yaml"
    path.write_text(f"runs:\n  - {{path: '{tmp_path}/dn/fold*', weight: 2}}\n  - {{path: other, weight: 1}}\n"
                    "threshold: {mode: fraction, value: 0.28}\n")
    r = load_recipe(path)
    # A pattern's folders share its weight: the model counts 2, whatever its number of folds.
    assert [p.name for p in r.runs] == ["fold0", "fold1", "fold2", "fold3", "other"]
    assert r.weights == (0.5, 0.5, 0.5, 0.5, 1.0)
    assert (r.new_whale_fraction, r.threshold, r.tune, r.calibrate) == (0.28, None, False, False)
    assert recipe_from_dict({"runs": [{"path": "a"}], "threshold": {"mode": "fixed", "value": 0.9}}).threshold == 0.9
    tuned = recipe_from_dict({"runs": [{"path": "a"}], "threshold": {"mode": "tune"}, "calibrate": True})
    assert tuned.tune and tuned.calibrate and tuned.weights == (1.0,)
    assert recipe_from_dict({"runs": [{"path": "a"}], "calibrate": "yes"}).calibrate


@pytest.mark.parametrize("raw, message", [
    ({"threshold": {"mode": "tune"}}, r"R: runs: required key is missing"),
    ({"runs": [], "threshold": {"mode": "tune"}}, r"R: runs: expected a non-empty list"),
    ({"runs": [{"weight": 1}], "threshold": {"mode": "tune"}}, r"R: runs\[0\]\.path: required key is missing"),
    ({"runs": [{"path": "a", "wieght": 1}], "threshold": {"mode": "tune"}}, r"runs\[0\]\.wieght: unknown key"),
    ({"runs": [{"path": "a"}, {"path": "b", "weight": -1}], "threshold": {"mode": "tune"}},
     r"runs\[1\]\.weight: expected a number >= 0.0, received -1"),
    ({"runs": [{"path": "/nonexistent/fold*"}], "threshold": {"mode": "tune"}},
     r"runs\[0\]\.path: expected a pattern matching at least one folder"),
    ({"runs": [{"path": "a"}]}, r"R: threshold: required key is missing \(or set calibrate: true\)"),
    ({"runs": [{"path": "a"}], "threshold": {"mode": "best"}}, r"threshold\.mode: expected one of fixed, fraction, tune"),
    ({"runs": [{"path": "a"}], "threshold": {"mode": "fixed"}}, r"threshold\.value: required with mode fixed"),
    ({"runs": [{"path": "a"}], "threshold": {"mode": "fraction", "value": 1.5}},
     r"threshold\.value: expected a number in \[0.0, 1.0\], received 1.5"),
    ({"runs": [{"path": "a"}], "threshold": {"mode": "tune", "value": 0.5}}, r"threshold\.value: expected no value"),
    ({"runs": [{"path": "a"}], "threshold": {"mode": "tune"}, "force_calibrated": True},
     r"force_calibrated: expected false unless calibrate is true"),
    ({"runs": [{"path": "a"}], "threshold": {"mode": "tune"}, "out": "x.csv"}, r"R: out: unknown key 'out'"),
    (["a", "b"], r"R: <top level>: expected a mapping"),
])
def test_a_bad_recipe_is_refused_naming_the_key(raw, message):
    with pytest.raises(ConfigError, match=message):
        recipe_from_dict(raw, "R")


def test_recipe_file_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="missing.yaml: cannot read the recipe"):
        load_recipe(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("runs: [\n")
    with pytest.raises(ConfigError, match="bad.yaml: expected valid YAML"):
        load_recipe(bad)
    with pytest.raises(ConfigError, match=r"flukes.yaml: a recipe of steps .*whale recipe --recipe"):
        load_recipe(Path(__file__).resolve().parent.parent / "recipes" / "flukes.yaml")  # whale recipe's kind


def test_recipe_and_flags_exclude_each_other(tmp_path, capsys):
    from whale.ensemble.cli import main

    path = tmp_path / "r.yaml"
    path.write_text("runs: [{path: a}]\nthreshold: {mode: tune}\n")
    assert main(["--recipe", str(path), "--threshold", "0.0", "--out", str(tmp_path / "s.csv")]) == 2
    err = capsys.readouterr().err
    assert "the recipe gives the runs, weights and threshold mode; received --threshold" in err
    assert main(["--recipe", str(path), "runA", "--out", str(tmp_path / "s.csv")]) == 2
    assert "received RUN_DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "s.csv"), "--tune"])  # neither runs nor a recipe: usage error


def test_shipped_paper_recipe_is_valid(tmp_path, monkeypatch):
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    recipe = root / "recipes" / "paper.yaml"
    monkeypatch.chdir(tmp_path)
    for model in ("densenet121", "convnet_v1", "convnet_v2", "seresnext50"):
        for fold in range(4):
            (tmp_path / "runs" / model / f"fold{fold}" / "scores" / "384").mkdir(parents=True)
            (tmp_path / "runs" / model / f"fold{fold}" / "scores" / "768").mkdir(parents=True)
    r = load_recipe(recipe)
    assert len(r.runs) == 20 and sum(r.weights) == pytest.approx(5.0)
    assert str(r.runs[4]) == "runs/seresnext50/fold0" and str(r.runs[16]) == "runs/convnet_v2/fold0/scores/768"
    assert r.new_whale_fraction is not None and not r.tune
