"""run_fold.py --plan, the one planner: the schedule's pairs, minings, hours from a rates file, kernel
versions and weeks of Kaggle's GPU quota."""

import json

import pytest

from whale.config import config_from_dict
from whale.core.errors import ConfigError
from whale.training.plan import KERNEL_HOURS_PER_VERSION, fold_cost, format_plan, load_rates, plan_fold
from whale.training.schedule import Schedule

CFG = {"name": "plan", "seed": 0, "mining_interval": 2, "precision": "mixed_bfloat16",
       "model": {"branch": "densenet121"},
       "stages": [{"epochs": 3, "k": 1.0, "lr": 1.0e-4, "image_size": 384, "dataset": "playground"},
                  {"epochs": 4, "k": 0.5, "lr": 1.0e-4, "image_size": 512, "dataset": "main"},
                  {"epochs": 2, "k": 0.5, "lr": 1.0e-4, "image_size": 256, "dataset": "main"}]}
RATES = {"rates": [{"branch": "densenet121", "image_size": 384, "precision": "mixed_bfloat16",
                    "model_pairs_s": 300.0, "end_to_end_pairs_s": 200.0},
                   {"branch": "densenet121", "image_size": 512, "precision": "mixed_bfloat16",
                    "model_pairs_s": 100.0},
                   {"branch": "densenet121", "image_size": 512, "precision": "float32", "model_pairs_s": 1.0}]}


def test_plan_counts_pairs_minings_and_hours_by_hand(tmp_path):
    cfg = config_from_dict(CFG)
    path = tmp_path / "rates.json"
    path.write_text(json.dumps(RATES))
    plan = plan_fold(cfg, {"main": 1000, "playground": 500}, load_rates(path))
    assert [p.pairs_per_epoch for p in plan] == [1000, 2000, 2000]
    assert [p.minings for p in plan] == [2, 2, 1]
    assert sum(p.minings for p in plan) == Schedule.from_config(cfg).minings()
    assert plan[0].pairs_s == 200.0 and plan[0].rate_source == "end_to_end"  # end to end preferred
    assert plan[1].pairs_s == 100.0 and plan[1].rate_source == "model"
    assert plan[2].pairs_s == pytest.approx(200.0 * (384 / 256) ** 2)  # nearest size, scaled by pixels
    assert plan[0].hours == pytest.approx(3 * 1000 / 200 / 3600)
    text = format_plan(cfg, plan, str(path))
    total = sum(p.hours for p in plan)
    assert f"estimated {total:.1f} h per fold" in text and "mining not included (--mining-seconds)" in text
    assert "validation not included" in text and "kernel versions of 7.75 h" in text


def test_two_stages_by_hand_with_slowdown_mining_versions_and_quota(tmp_path):
    """2 stages: 10 epochs at 512 px (200 pairs/s) then 5 at 256 px (scaled: 800 pairs/s), 1,000 images."""
    cfg = config_from_dict({**CFG, "mining_interval": 5, "stages": [
        {"epochs": 10, "k": 1.0, "lr": 1.0e-4, "image_size": 512, "dataset": "main"},
        {"epochs": 5, "k": 1.0, "lr": 1.0e-4, "image_size": 256, "dataset": "main"}]})
    path = tmp_path / "rates.json"
    path.write_text(json.dumps({"rates": [{"branch": "densenet121", "image_size": 512,
                                           "precision": "mixed_bfloat16", "model_pairs_s": 200.0}]}))
    plan = plan_fold(cfg, {"main": 1000}, load_rates(path), slowdown=3.0, mining_seconds=600.0)
    # training: (10 x 2,000 / 200 + 5 x 2,000 / 800) s = 112.5 s, x 3 = 337.5 s; mining: 3 x 600 s
    assert [p.minings for p in plan] == [2, 1]
    assert [p.train_hours for p in plan] == pytest.approx([300.0 / 3600, 37.5 / 3600])
    assert [p.mining_hours for p in plan] == pytest.approx([1200.0 / 3600, 600.0 / 3600])
    cost = fold_cost(plan, hours_per_version=0.5)
    assert cost.hours == pytest.approx(2137.5 / 3600)
    assert cost.versions == 2 and cost.quota_weeks == pytest.approx(2137.5 / 3600 / 30)
    assert fold_cost(plan, hours_per_version=0.6).versions == 1
    text = format_plan(cfg, plan, str(path), slowdown=3.0, mining_seconds=600.0, hours_per_version=0.5)
    assert "estimated 0.6 h per fold: 0.1 h of training" in text and "x 3 (--slowdown)" in text
    assert "(35.6 minutes in all)" in text  # 2,137.5 s: a total under an hour is also given in minutes
    assert "+ 0.5 h of mining (3 x 600 s)" in text
    assert "= 2 kernel versions of 0.5 h = 0.0 weeks of the 30 h weekly GPU quota" in text
    with pytest.raises(ConfigError, match="slowdown"):
        plan_fold(cfg, {"main": 1000}, load_rates(path), slowdown=0.0)
    with pytest.raises(ConfigError, match="hours-per-version"):
        fold_cost(plan, hours_per_version=0.0)


def test_a_rate_is_used_for_its_stem_only_and_an_entry_without_one_is_the_default_stem(tmp_path):
    stage = {"epochs": 1, "k": 1.0, "lr": 1.0e-3, "image_size": 64, "dataset": "main"}
    path = tmp_path / "rates.json"
    path.write_text(json.dumps({"rates": [
        {"branch": "small", "image_size": 64, "precision": "float32", "end_to_end_pairs_s": 70.0},
        {"branch": "small", "stem": "pool", "image_size": 64, "precision": "float32", "end_to_end_pairs_s": 110.0}]}))
    rates = load_rates(path)

    def rate(**model):
        cfg = config_from_dict({**CFG, "precision": "float32", "model": {"branch": "small", **model}, "stages": [stage]})
        return plan_fold(cfg, {"main": 100}, rates)[0].pairs_s

    assert rate() == 70.0 and rate(stem="conv") == 70.0 and rate(stem="pool") == 110.0


def test_a_rate_is_used_for_its_batching_only_and_an_entry_without_one_is_the_paper_s(tmp_path):
    stage = {"epochs": 1, "k": 1.0, "lr": 1.0e-3, "image_size": 64, "dataset": "main"}
    path = tmp_path / "rates.json"
    entry = {"branch": "small", "image_size": 64, "precision": "float32"}
    path.write_text(json.dumps({"rates": [{**entry, "end_to_end_pairs_s": 70.0}]}))

    def plan(batching, rates):
        cfg = config_from_dict({**CFG, "precision": "float32", "batching": batching, "model": {"branch": "small"},
                                "stages": [stage]})
        return plan_fold(cfg, {"main": 100}, rates)[0]

    assert plan("pairs", load_rates(path)).pairs_s == 70.0
    missing = plan("images", load_rates(path))
    assert missing.pairs_s is None and missing.rate_source == "no rate for small float32 batching images"
    path.write_text(json.dumps({"rates": [{**entry, "end_to_end_pairs_s": 70.0},
                                          {**entry, "batching": "images", "end_to_end_pairs_s": 130.0}]}))
    assert plan("pairs", load_rates(path)).pairs_s == 70.0 and plan("images", load_rates(path)).pairs_s == 130.0


def test_the_default_version_length_is_the_kernels_budget_less_the_scoring_margin():
    from whale.kaggle.kernels import DEFAULT_BUDGET_HOURS, DEFAULT_SCORE_MARGIN_MINUTES

    assert KERNEL_HOURS_PER_VERSION == DEFAULT_BUDGET_HOURS - DEFAULT_SCORE_MARGIN_MINUTES / 60 == 7.75


def test_plan_without_rates_says_no_estimate_and_bad_files_are_named(tmp_path):
    cfg = config_from_dict(CFG)
    plan = plan_fold(cfg, {"main": 10, "playground": 10})
    assert all(p.hours is None for p in plan)
    assert "no estimate of hours: pass --rates" in format_plan(cfg, plan)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"rates": [{"branch": "densenet121", "image_size": 384}]}))
    with pytest.raises(ConfigError, match="bad.json"):
        load_rates(bad)
    with pytest.raises(ConfigError, match="playground"):
        plan_fold(cfg, {"main": 10})


def test_run_fold_plan_reads_the_fold_from_data(tmp_path, capsys):
    from whale.data import fold_data, load_competition
    from whale.data.synth import generate
    from whale.training.cli import main

    data = generate(tmp_path / "data", n_ids=12, seed=1, size=64, progress=False)
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(config_from_dict({**CFG, "stages": CFG["stages"][1:]}).to_yaml())
    assert main(["--config", str(cfg_path), "--data", str(data), "--plan"]) == 0
    out = capsys.readouterr().out
    n = len(fold_data(load_competition(data), 0, 0).pairs)
    assert f"{2 * n:>11}" in out and "no estimate of hours" in out
    assert "kernel versions" not in out


def test_plan_shows_what_training_the_playground_once_saves(tmp_path):
    from whale.training.plan import pretrain_saving

    cfg = config_from_dict(CFG)  # 3 PlayGround epochs at 384, then 4 + 2 main epochs
    path = tmp_path / "rates.json"
    path.write_text(json.dumps(RATES))
    plan = plan_fold(cfg, {"main": 1000, "playground": 500}, load_rates(path))
    text = pretrain_saving(cfg, plan)
    # 4 folds: 3 + 4 x 6 = 27 epochs instead of 4 x 9 = 36.
    assert "stages 1-1 (3 epochs)" in text and "3 + 4 x 6 = 27 epochs instead of 4 x 9 = 36: 9 epochs (25%)" in text
    pre, rest = plan[0].hours, plan[1].hours + plan[2].hours
    assert f"{pre + 4 * rest:.1f} h instead of {4 * (pre + rest):.1f} h ({3 * pre:.1f} h" in text
    assert text in format_plan(cfg, plan, str(path))
    no_rates = pretrain_saving(cfg, plan_fold(cfg, {"main": 1000, "playground": 500}))
    assert no_rates.endswith("9 epochs (25%) fewer")
    main_only = config_from_dict({**CFG, "stages": CFG["stages"][1:]})
    assert pretrain_saving(main_only, plan_fold(main_only, {"main": 1000})) is None
