"""benchmarks/seeds/objectives.py: its splits, its equal-steps rule and its table; the whole --quick run is slow."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def test_held_out_characters_are_half_of_each_alphabet_and_seeded():
    from benchmarks.seeds.objectives import held_out_characters

    rows = [{"id": f"{a}_{c}", "alphabet": a} for a, n in (("x", 5), ("y", 4)) for c in range(n) for _ in range(3)]
    held = held_out_characters(rows, seed=0)
    assert len([h for h in held if h.startswith("x_")]) == 3 and len([h for h in held if h.startswith("y_")]) == 2
    assert held == held_out_characters(rows, seed=0) and held != held_out_characters(rows, seed=1)


def test_identity_objectives_get_twice_the_epochs_for_the_same_optimiser_steps():
    from benchmarks.seeds.objectives import objective_config

    path = ROOT / "configs" / "demo.yaml"
    head, triplet = objective_config(path, "head", 1, 1.0), objective_config(path, "triplet", 1, 1.0)
    assert [s.epochs * 2 for s in head.stages] == [s.epochs for s in triplet.stages]
    assert head.seed == triplet.seed == 1 and triplet.objective.name == "triplet"
    half = objective_config(path, "contrastive", 0, 0.5)
    assert [s.epochs for s in half.stages] == [max(1, round(s.epochs * 0.5)) for s in head.stages]


def test_summary_gives_mean_and_sd_per_set_and_objective():
    from benchmarks.seeds.objectives import summary

    rows = [{"set": "synthetic", "objective": "head", "seed": s, "map5": m, "top1": 0.1, "top5": 0.2, "top10": 0.3,
             "val_map5": 0.5, "train_s": 10.0} for s, m in ((0, 0.5), (1, 0.7))]
    table, stats = summary(rows)
    assert "| head | 2 | 0.600 +- 0.141 |" in table
    assert stats["synthetic/head"]["map5"]["mean"] == pytest.approx(0.6) and stats["synthetic/head"]["seeds"] == [0, 1]


def test_random_sampler_rows_are_named_apart_and_pixels_shared():
    from benchmarks.seeds.objectives import label, summary

    assert label("triplet", "mined") == "triplet" and label("triplet", "random") == "triplet (random)"
    assert label("pixels", "random") == "pixels"  # one pixel baseline per seed, whatever the sampler
    rows = [{"set": "lions", "objective": label("arcface", s), "seed": 0, "top1": t, "top5": t, "top10": t,
             "tpr_at_far": t, "auc": t, "val_map5": t, "train_s": 1.0} for s, t in (("mined", 0.2), ("random", 0.1))]
    table, stats = summary(rows)
    assert stats["lions/arcface"]["top10"]["mean"] == pytest.approx(0.2)
    assert stats["lions/arcface (random)"]["top10"]["mean"] == pytest.approx(0.1)


def test_set_flags_name_their_rows_and_reach_the_config():
    from benchmarks.seeds.objectives import label, objective_config
    from whale.config.overrides import overrides

    assert label("tgloss", "mined", ["flip_ids=true"]) == "tgloss [flip_ids=true]"
    assert label("head", "random", ["b=2", "a=1"]) == "head (random) [a=1, b=2]"
    assert label("pixels", "mined", ["flip_ids=true"]) == "pixels"
    cfg = objective_config(ROOT / "configs" / "omniglot.yaml", "tgloss", 2, 1.0,
                           overrides(["flip_ids=true", "stages[0].image_size=32"]))
    assert cfg.flip_ids and cfg.stages[0].image_size == 32 and cfg.seed == 2 and cfg.objective.name == "tgloss"
    per = objective_config(ROOT / "configs" / "omniglot.yaml", "global", 2, 1.0, overrides(["objective.pairs=triplet"]))
    assert per.objective.name == "global" and per.objective["pairs"] == "triplet"
    assert label("global", "mined", ["objective.pairs=triplet"]) == "global [objective.pairs=triplet]"


def test_a_bad_set_flag_fails_before_training(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "seeds" / "objectives.py"), "--out", str(tmp_path),
           "--sets", "synthetic", "--objectives", "triplet", "--set", "flip_ids=maybe"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 2 and "flip_ids" in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "results.json").exists()


@pytest.mark.slow
def test_quick_run_trains_scores_and_resumes_from_its_results(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "seeds" / "objectives.py"), "--out", str(tmp_path), "--quick",
           "--sets", "synthetic", "--objectives", "head,arcface", "--seeds", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [r["objective"] for r in rows] == ["pixels", "head", "arcface"]
    assert all(0 <= r["map5"] <= 1 for r in rows)
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert again.returncode == 0 and "arcface" in again.stdout  # nothing retrained: rows read back
    assert json.loads((tmp_path / "results.json").read_text())["rows"] == rows
