"""``whale ensemble``'s four steps, each alone: resolve the rule, combine the runs, decide, report."""

import numpy as np
import pytest

from whale import NEW_WHALE
from whale.core.errors import ConfigError
from whale.ensemble.combined import Combined, combine_runs
from whale.ensemble.decide import Decision, Tuned, decide
from whale.ensemble.report import report, summary
from whale.ensemble.rule import Rule, resolve_rule
from whale.formats import DEFAULT
from whale.inference.scorefile import ScoreFile, write_scores
from whale.ranking import predict_top5
from whale.ranking.newwhale import map_for_thresholds, predict_for_fraction, tune
from whale.ranking.topids import top_ids


def parse(*argv):
    from whale.cli import command_parser

    return command_parser("ensemble").parse_args([str(a) for a in argv])


def rule_of(tmp_path, **fields):
    base = dict(runs=(tmp_path / "a",), weights=np.ones(1), fusion="scores", why_fusion="one run", fmt=DEFAULT,
                out=tmp_path / "sub.csv")
    return Rule(**(base | fields))


def tops(rng, n_query=20, truth=True):
    """Best ids of random scores: 6 ids x 2 gallery images; a third of the queries new."""
    gallery_ids = np.repeat([f"w{i}" for i in range(6)], 2)
    ids = np.where(np.arange(n_query) % 3 == 0, NEW_WHALE, np.array([f"w{i % 6}" for i in range(n_query)]))
    scores = rng.random((n_query, 12)).astype(np.float32)
    for q, t in enumerate(ids):
        scores[q, gallery_ids == t] += 0.5
    sf = ScoreFile(None, scores, np.array([f"q{i}.jpg" for i in range(n_query)]),
                   np.array([f"g{i}.jpg" for i in range(12)]), gallery_ids, ids if truth else None)
    return sf, top_ids(sf)


# ----------------------------------------------------------------------------- resolve
def test_resolve_reads_the_flags_without_reading_a_score_file(tmp_path):
    rule = resolve_rule(parse(tmp_path / "missing", "--threshold", "0.4", "--out", tmp_path / "s.csv"))
    assert rule.runs == (tmp_path / "missing",) and rule.weights.tolist() == [1.0]
    assert (rule.threshold, rule.tune, rule.new_whale_fraction) == (0.4, False, None)
    assert (rule.fusion, rule.why_fusion, rule.fmt) == ("scores", "one run", DEFAULT)
    assert rule.beside_out(".threshold.json") == tmp_path / "s.threshold.json"
    with pytest.raises(ConfigError, match="--tune-new-share weighs"):
        resolve_rule(parse(tmp_path / "missing", "--threshold", "0.4", "--tune-new-share", "0.3",
                           "--out", tmp_path / "s.csv"))


def test_resolve_takes_a_recipe_without_changing_the_parsed_line(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"runs:\n  - {{path: {tmp_path}/a, weight: 3}}\n  - {{path: {tmp_path}/b}}\n"
                      "threshold: {mode: fraction, value: 0.25}\n")
    args = parse("--recipe", recipe, "--out", tmp_path / "s.csv")
    rule = resolve_rule(args)
    assert rule.runs == (tmp_path / "a", tmp_path / "b") and rule.weights.tolist() == [0.75, 0.25]
    assert rule.new_whale_fraction == 0.25 and rule.fusion == "scores"  # a recipe's weights weigh raw scores
    assert args.runs == [] and args.weights is None and args.new_whale_fraction is None  # no setattr on args
    with pytest.raises(ConfigError, match="received RUN_DIR"):
        resolve_rule(parse(tmp_path / "a", "--recipe", recipe, "--out", tmp_path / "s.csv"))


# ----------------------------------------------------------------------------- combine
def test_combine_averages_the_runs_to_their_best_ids(tmp_path):
    rng = np.random.default_rng(0)
    (test, _), (val, _) = tops(rng, truth=False), tops(rng)
    runs = []
    for name, noise in (("a", 0.0), ("b", 0.2)):
        for split, sf in (("test", test), ("val", val)):
            write_scores(tmp_path / name / f"{split}.npz", sf.scores + np.float32(noise), sf.query, sf.gallery,
                         sf.gallery_ids, query_ids=sf.query_ids, identity={"run_id": name, "fold": 0, "split": split},
                         trained_on=[] if split == "val" else None)
        runs.append(tmp_path / name)
    lines = []
    combined = combine_runs(rule_of(tmp_path, runs=tuple(runs), weights=np.array([0.5, 0.5])), log=lines.append)
    assert combined.fusion is None and combined.weights.tolist() == [0.5, 0.5]
    assert combined.query == test.query.tolist()
    assert combined.test_top.names.tolist() == top_ids(test).names.tolist()
    assert np.allclose(combined.test_top.scores, top_ids(test).scores + 0.1, equal_nan=True)
    assert combined.val_top.truth.tolist() == val.query_ids.tolist() and "runs and weights:" in lines


# ----------------------------------------------------------------------------- decide
def test_decide_given_fraction_and_tuned_thresholds(tmp_path):
    rng = np.random.default_rng(1)
    (test, test_top), (_, val_top) = tops(rng, 30, truth=False), tops(rng)
    combined = Combined(np.ones(1), None, test.query.tolist(), test_top, val_top)

    given = decide(rule_of(tmp_path, threshold=0.9), combined)
    assert given.predictions == predict_top5(test.scores, test.gallery_ids, 0.9)
    assert (given.method, given.threshold, given.how, given.tuned, given.cv) == ("threshold", 0.9, "given", None, None)
    assert given.expected == {"threshold 0.9": float(map_for_thresholds(val_top, [0.9])[0])}

    fraction = decide(rule_of(tmp_path, new_whale_fraction=0.4), combined)
    assert (fraction.predictions, fraction.threshold) == predict_for_fraction(test_top, 0.4)

    tuned = decide(rule_of(tmp_path, tune=True, tune_new_share=0.2), combined)
    t, best, grid, maps = tune(val_top, open_share=0.2)
    assert tuned.threshold == t and tuned.tuned.best_map == best and tuned.tuned.maps.tolist() == maps.tolist()
    assert list(tuned.expected) == [f"threshold {t:.6g} (in-sample: tuned on these queries)",
                                    f"threshold {t:.6g} (in-sample: tuned on these queries), new_whale weighted to 0.2"]

    calibrated = decide(rule_of(tmp_path, calibrate=True, cv_folds=3), combined)
    assert calibrated.method == "calibrated" and calibrated.threshold is None and calibrated.cv is not None
    assert "--calibrate without a threshold mode" in calibrated.why and len(calibrated.predictions) == 30


# ----------------------------------------------------------------------------- report
def test_report_writes_the_submission_the_tuned_files_and_the_summary(tmp_path):
    rng = np.random.default_rng(2)
    (test, test_top), (_, val_top) = tops(rng, 12, truth=False), tops(rng)
    combined = Combined(np.ones(1), None, test.query.tolist(), test_top, val_top)
    predictions = predict_top5(test.scores, test.gallery_ids, 0.7)
    grid = np.array([0.5, 0.7, 0.9])
    decision = Decision(predictions, "threshold", 0.7, "tuned on validation MAP@5", None, {"threshold 0.7": 0.5},
                        Tuned(0.5, grid, np.array([0.4, 0.5, 0.3])))
    rule = rule_of(tmp_path, runs=(tmp_path / "a", tmp_path / "b"), weights=np.array([0.5, 0.5]), tune=True)
    lines, written = [], []
    report(rule, combined, decision, lines.append, written)
    assert [p.name for p in written] == ["sub.threshold.csv", "sub.threshold.png", "sub.threshold.json"]
    assert (tmp_path / "sub.threshold.csv").read_text().splitlines()[1:] == ["0.5,0.4", "0.7,0.5", "0.9,0.3"]
    rows = (tmp_path / "sub.csv").read_text().splitlines()
    assert len(rows) == 13 and rows[1] == f"q0.jpg,{' '.join(predictions[0])}"
    assert lines[-1] == f"  wrote {tmp_path / 'sub.csv'} (12 rows, checked)"
    assert summary(rule, combined, decision) == lines[2:-1]
    assert "  expected MAP@5 from validation, threshold 0.7: 0.50000" in lines
