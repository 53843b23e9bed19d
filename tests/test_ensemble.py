"""ensemble.py and whale.ensemble: averaging, alignment, new_whale strategies, calibration."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from whale import NEW_WHALE
from whale.ensemble.cli import main
from whale.ensemble.combine import average_score_files, validation_groups
from whale.ranking import TopIds
from whale.ranking.calibrate import Calibrator, cross_validate, expected_map_insertion
from whale.core.errors import ConfigError, DataError
from whale.metrics import map_at_k
from whale.ranking import predict_top5, threshold_grid
from whale.submission import check_submission

ROOT = Path(__file__).resolve().parents[1]


def save(path, scores, query, gallery, gallery_ids, query_ids=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = dict(scores=np.asarray(scores), query=np.asarray(list(query), dtype=str),
                  gallery=np.asarray(list(gallery), dtype=str),
                  gallery_ids=np.asarray(list(gallery_ids), dtype=str))
    if query_ids is not None:
        arrays["query_ids"] = np.asarray(list(query_ids), dtype=str)
    np.savez(path, **arrays)


def make_run(root, name, test, val=None):
    """A run folder with scores/test.npz (and val.npz); ``test``/``val`` are save() tuples."""
    run = root / name
    save(run / "scores" / "test.npz", *test)
    if val is not None:
        save(run / "scores" / "val.npz", *val)
    return run


def read_rows(path):
    with open(path, newline="") as f:
        return [(r["Image"], r["Id"]) for r in csv.DictReader(f)]


def synthetic(rng, n_query, n_ids=12, per_id=3, new_share=0.3, prefix="q", dtype=np.float32):
    """Scores of queries vs a gallery of ``n_ids`` ids; known queries score high on their id."""
    gallery_ids = np.repeat([f"w{i}" for i in range(n_ids)], per_id)
    gallery = [f"g{i}.jpg" for i in range(len(gallery_ids))]
    truth = np.where(rng.random(n_query) < new_share, NEW_WHALE,
                     np.array([f"w{i}" for i in rng.integers(0, n_ids, n_query)]))
    scores = rng.uniform(0.0, 0.75, (n_query, len(gallery)))
    for q, t in enumerate(truth):
        if t != NEW_WHALE:
            cols = gallery_ids == t
            scores[q, cols] = rng.uniform(0.55, 1.0, cols.sum())
    query = [f"{prefix}{i}.jpg" for i in range(n_query)]
    return scores.astype(dtype), query, gallery, gallery_ids, truth


def run_ensemble(argv, log=print):
    """``ensemble.py ARGV``'s work on the parsed line, bad input raising (no one-line wrapper)."""
    from whale.cli import command_parser
    from whale.ensemble.cli import run

    return run(command_parser("ensemble").parse_args([str(a) for a in argv]), log=log)


def run_main(argv):
    lines = []
    assert main([str(a) for a in argv], log=lines.append) == 0
    return "\n".join(lines)


# ----------------------------------------------------------------------------- paper Table 2
def test_paper_table2_through_the_command_line(tmp_path):
    gallery_ids = ["w1", "w10", "w1", "w5", "w7", "w8"]
    scores = np.array([[0.995, 0.991, 0.985, 0.8, 0.7, 0.55]], dtype=np.float32)
    run = make_run(tmp_path, "run", (scores, ["a.jpg"], [f"g{i}.jpg" for i in range(6)], gallery_ids))
    out = tmp_path / "sub" / "table2.csv"
    proc = subprocess.run([sys.executable, str(ROOT / "ensemble.py"), str(run), "--threshold", "0.98",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert read_rows(out) == [("a.jpg", "w1 w10 new_whale w5 w7")]
    assert check_submission(out) == []
    assert "r3 1.000" in proc.stdout  # new_whale share at rank 3


def test_command_line_reports_bad_input_without_traceback(tmp_path):
    run = make_run(tmp_path, "run", synthetic(np.random.default_rng(0), 6)[:4])
    proc = subprocess.run([sys.executable, str(ROOT / "ensemble.py"), str(run), "--weights", "1", "2",
                           "--threshold", "0.5", "--out", str(tmp_path / "x.csv")],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "one weight per run (1 runs), got 2 weights" in proc.stderr
    assert "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- weights and alignment
def test_weighted_mean_of_two_runs(tmp_path):
    rng = np.random.default_rng(1)
    a, query, gallery, gids, _ = synthetic(rng, 20, dtype=np.float16)
    b = rng.uniform(0, 1, a.shape).astype(np.float32)
    ra = make_run(tmp_path, "a", (a, query, gallery, gids))
    rb = make_run(tmp_path, "b", (b, query, gallery, gids))
    avg = average_score_files([ra / "scores/test.npz", rb / "scores/test.npz"], [3, 1])
    expected = (3 * a.astype(np.float32) + b) / 4
    assert avg.scores.dtype == np.float32
    np.testing.assert_allclose(avg.scores, expected, rtol=1e-6, atol=1e-6)

    out = tmp_path / "w.csv"
    text = run_main([ra, rb, "--weights", 3, 1, "--threshold", 0.7, "--out", out])
    want = predict_top5(expected, gids, 0.7)
    assert read_rows(out) == [(q, " ".join(p)) for q, p in zip(query, want)]
    assert "0.7500" in text and "0.2500" in text


def test_weight_count_must_match_runs(tmp_path):
    rng = np.random.default_rng(2)
    r = make_run(tmp_path, "a", synthetic(rng, 5)[:4])
    with pytest.raises(ConfigError, match=r"one weight per run \(2 runs\), got 3"):
        run_ensemble([str(r), str(r), "--weights", "1", "1", "1", "--threshold", "0.5",
              "--out", str(tmp_path / "x.csv")], log=lambda *_: None)
    with pytest.raises(ConfigError, match="not all zero"):
        run_ensemble([str(r), "--weights", "0", "--threshold", "0.5", "--out", str(tmp_path / "x.csv")],
             log=lambda *_: None)


def test_alignment_by_names_gives_the_same_submission(tmp_path):
    rng = np.random.default_rng(3)
    scores, query, gallery, gids, _ = synthetic(rng, 25)
    pq = rng.permutation(len(query))
    pg = rng.permutation(len(gallery))
    ra = make_run(tmp_path, "a", (scores, query, gallery, gids))
    rb = make_run(tmp_path, "b", (scores[pq][:, pg], np.array(query)[pq], np.array(gallery)[pg], gids[pg]))
    outs = []
    for runs, name in (([ra], "a"), ([rb], "b"), ([ra, rb], "ab")):
        out = tmp_path / f"{name}.csv"
        run_main([*runs, "--threshold", 0.8, "--out", out])
        outs.append(sorted(read_rows(out)))
    assert outs[0] == outs[1] == outs[2]
    avg = average_score_files([ra / "scores/test.npz", rb / "scores/test.npz"])
    np.testing.assert_allclose(avg.scores, scores, rtol=1e-6)


@pytest.mark.parametrize("what", ["gallery", "query"])
def test_missing_image_names_run_and_image(tmp_path, what):
    rng = np.random.default_rng(4)
    scores, query, gallery, gids, _ = synthetic(rng, 8)
    ra = make_run(tmp_path, "full", (scores, query, gallery, gids))
    if what == "gallery":
        rb = make_run(tmp_path, "short", (scores[:, 1:], query, gallery[1:], gids[1:]))
        missing = gallery[0]
    else:
        rb = make_run(tmp_path, "short", (scores[1:], query[1:], gallery, gids))
        missing = query[0]
    with pytest.raises(DataError) as err:
        run_ensemble([str(ra), str(rb), "--threshold", "0.5", "--out", str(tmp_path / "x.csv")], log=lambda *_: None)
    msg = str(err.value)
    assert "short" in msg and missing in msg and what in msg
    assert not (tmp_path / "x.csv").exists()


def test_gallery_ids_must_agree(tmp_path):
    rng = np.random.default_rng(5)
    scores, query, gallery, gids, _ = synthetic(rng, 4)
    ra = make_run(tmp_path, "a", (scores, query, gallery, gids))
    other = gids.copy()
    other[0] = "w99"
    rb = make_run(tmp_path, "b", (scores, query, gallery, other))
    with pytest.raises(DataError, match="gallery ids differ"):
        average_score_files([ra / "scores/test.npz", rb / "scores/test.npz"])


def test_pickled_arrays_are_refused(tmp_path):
    path = tmp_path / "r" / "scores" / "test.npz"
    path.parent.mkdir(parents=True)
    np.savez(path, scores=np.zeros((1, 1), np.float32), query=np.array(["a"], dtype=object),
             gallery=np.array(["g"]), gallery_ids=np.array(["w1"]))
    with pytest.raises(DataError, match="test.npz"):
        average_score_files([path])


# ----------------------------------------------------------------------------- fraction mode
def test_new_whale_fraction_hits_the_requested_share(tmp_path):
    rng = np.random.default_rng(6)
    scores, query, gallery, gids, _ = synthetic(rng, 200)
    run = make_run(tmp_path, "a", (scores, query, gallery, gids))
    out = tmp_path / "f.csv"
    run_main([run, "--new-whale-fraction", 0.3, "--out", out])
    first = [ids.split()[0] for _, ids in read_rows(out)]
    assert first.count(NEW_WHALE) == 60
    assert check_submission(out) == []


# ----------------------------------------------------------------------------- tuning
def brute_force_maps(parts, grid):
    """MAP@5 at each threshold, from predict_top5 + map_at_k over the concatenated groups."""
    out = []
    for t in grid:
        pred, truth = [], []
        for scores, gids, q_ids in parts:
            pred += predict_top5(scores, gids, t)
            truth += list(q_ids)
        out.append(map_at_k(pred, truth))
    return np.array(out)


def fold_runs(tmp_path, rng):
    """Two models x two folds: folds validate disjoint queries against different galleries."""
    test = synthetic(rng, 40, prefix="t")[:4]
    runs, parts = [], []
    for fold in range(2):
        s, q, g, gids, truth = synthetic(rng, 60, n_ids=10 + fold, prefix=f"v{fold}_")
        other = np.clip(s + rng.normal(0, 0.1, s.shape), 0, 1).astype(np.float32)
        perm = rng.permutation(len(q))  # the second model stores its queries in another order
        runs.append(make_run(tmp_path, f"m1_f{fold}", test, (s, q, g, gids, truth)))
        runs.append(make_run(tmp_path, f"m2_f{fold}", test,
                             (other[perm], np.array(q)[perm], g, gids, truth[perm])))
        parts.append(((s + other) / 2, gids, truth))
    return runs, parts


def test_tune_picks_the_grid_maximum_over_fold_groups(tmp_path):
    rng = np.random.default_rng(7)
    runs, parts = fold_runs(tmp_path, rng)
    groups = validation_groups([r / "scores/val.npz" for r in runs])
    assert len(groups) == 2 and all(g.n_query == 60 for g in groups)
    np.testing.assert_allclose(groups[0].scores, parts[0][0], atol=1e-6)

    out = tmp_path / "sub" / "tuned.csv"
    text = run_main([*runs, "--tune", "--fusion", "scores", "--out", out])  # the raw scores' average
    grid = threshold_grid()
    brute = brute_force_maps(parts, grid)
    best = int(np.argmax(brute))

    with open(tmp_path / "sub" / "tuned.threshold.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["threshold", "map5"]
    np.testing.assert_allclose([float(r["threshold"]) for r in rows], grid)
    np.testing.assert_allclose([float(r["map5"]) for r in rows], brute, atol=1e-9)
    assert f"tuned threshold {grid[best]:.6g}: validation MAP@5 {brute[best]:.5f}" in text
    assert (tmp_path / "sub" / "tuned.threshold.png").read_bytes()[:4] == b"\x89PNG"
    assert "test share of new_whale at rank 1" in text
    assert check_submission(out) == []


def test_a_submission_that_cannot_be_written_leaves_no_threshold_files(tmp_path, monkeypatch):
    import whale.submission
    from whale.core.errors import OutputError

    runs, _ = fold_runs(tmp_path, np.random.default_rng(7))

    def full_disk(path, *args, **kwargs):
        raise OutputError(f"{path}: no space left on the device")

    monkeypatch.setattr(whale.submission, "write_submission", full_disk)
    assert main([*map(str, runs), "--tune", "--out", str(tmp_path / "sub" / "tuned.csv")], log=lambda m: None) == 2
    assert not (tmp_path / "sub" / "tuned.threshold.csv").exists()
    assert not (tmp_path / "sub" / "tuned.threshold.png").exists()
    assert not (tmp_path / "sub" / "tuned.threshold.json").exists()


def test_overlapping_but_different_validation_sets_are_an_error(tmp_path):
    rng = np.random.default_rng(8)
    s, q, g, gids, truth = synthetic(rng, 10)
    test = (s, q, g, gids)
    ra = make_run(tmp_path, "a", test, (s, q, g, gids, truth))
    rb = make_run(tmp_path, "b", test, (s[2:], q[2:], g, gids, truth[2:]))
    with pytest.raises(DataError, match="overlap"):
        validation_groups([ra / "scores/val.npz", rb / "scores/val.npz"])


def test_tune_needs_validation_files(tmp_path):
    run = make_run(tmp_path, "a", synthetic(np.random.default_rng(9), 5)[:4])
    with pytest.raises(DataError, match="val.npz"):
        run_ensemble([str(run), "--tune", "--out", str(tmp_path / "x.csv")], log=lambda *_: None)


# ----------------------------------------------------------------------------- calibration
def test_expected_map_insertion_matches_brute_force():
    rng = np.random.default_rng(10)
    for _ in range(200):
        probs = rng.dirichlet(np.ones(7) * 0.5)  # new, id1..id5, "none of them"
        p, c = probs[0], probs[1:6]
        gains = []
        for r in range(1, 7):
            labels = ["i1", "i2", "i3", "i4", "i5"]
            if r <= 5:
                labels = (labels[: r - 1] + ["new"] + labels[r - 1 :])[:5]
            outcomes = [("new", p)] + [(f"i{k + 1}", c[k]) for k in range(5)]
            gains.append(sum(pr / (labels.index(o) + 1) for o, pr in outcomes if o in labels))
        assert expected_map_insertion(np.array([p]), c[None])[0] == int(np.argmax(gains)) + 1


def test_calibrate_is_cross_validated_on_held_out_folds(tmp_path, monkeypatch):
    rng = np.random.default_rng(11)
    runs, _ = fold_runs(tmp_path, rng)
    seen = {"fit": [], "predict": []}
    real_fit, real_predict = Calibrator.fit, Calibrator.predict

    def spy_fit(self, top):
        seen["fit"].append(top.scores.copy())
        return real_fit(self, top)

    def spy_predict(self, top):
        seen["predict"].append(top.scores.copy())
        return real_predict(self, top)

    monkeypatch.setattr(Calibrator, "fit", spy_fit)
    monkeypatch.setattr(Calibrator, "predict", spy_predict)
    out = tmp_path / "cal.csv"
    text = run_main([*runs, "--tune", "--calibrate", "--cv-folds", 4, "--out", out])

    # 4 CV folds + 1 final fit on all validation queries; 4 held-out predictions + the test
    assert len(seen["fit"]) == 5 and len(seen["predict"]) == 5
    for fitted, scored in zip(seen["fit"][:4], seen["predict"][:4]):
        fit_rows = {row.tobytes() for row in fitted}
        assert not any(row.tobytes() in fit_rows for row in scored)
    assert sum(len(s) for s in seen["predict"][:4]) == 120
    assert "cross-validated MAP@5: tuned threshold" in text and "| calibrated" in text
    assert check_submission(out) == []


def test_cross_validate_folds_partition_the_queries():
    rng = np.random.default_rng(12)
    n = 80
    truth = np.where(rng.random(n) < 0.3, NEW_WHALE, np.array([f"w{i}" for i in rng.integers(0, 8, n)]))
    scores = np.sort(rng.uniform(0, 1, (n, 20)), axis=1)[:, ::-1].astype(np.float32)
    names = np.array([[f"w{(i + j) % 20}" for j in range(20)] for i in range(n)])
    # known queries: right id first with a high score; new ones: lower scores
    for i in np.flatnonzero(truth != NEW_WHALE):
        names[i, names[i] == truth[i]] = names[i, 0]
        names[i, 0] = truth[i]
        scores[i, 0] = max(scores[i, 0], 0.9)
    top = TopIds(names, scores, truth)
    cv = cross_validate(top, n_splits=4, seed=0)
    held = np.concatenate([h for _, h in cv.folds])
    assert sorted(held.tolist()) == list(range(n))
    for fit_rows, h in cv.folds:
        assert not set(fit_rows.tolist()) & set(h.tolist())
        assert len(fit_rows) + len(h) == n
    sizes = np.array([len(h) for _, h in cv.folds])
    assert cv.threshold_map == pytest.approx((cv.fold_maps[:, 0] * sizes).sum() / n)
    assert 0.5 < cv.calibrated_map <= 1.0


# ----------------------------------------------------------------------------- submission order
def test_sample_order_explicit_and_recorded(tmp_path):
    rng = np.random.default_rng(13)
    scores, query, gallery, gids, _ = synthetic(rng, 12)
    data = tmp_path / "data"
    data.mkdir()
    order = list(np.array(query)[rng.permutation(len(query))])
    sample = data / "sample_submission.csv"
    sample.write_text("Image,Id\n" + "".join(f"{q},new_whale\n" for q in order))
    run = make_run(tmp_path, "a", (scores, query, gallery, gids))

    out = tmp_path / "s.csv"
    run_main([run, "--threshold", 0.6, "--sample", sample, "--out", out])
    assert [im for im, _ in read_rows(out)] == order
    assert check_submission(out, sample) == []

    (run / "run.json").write_text(json.dumps({"data": str(data)}))
    out2 = tmp_path / "s2.csv"
    text = run_main([run, "--threshold", 0.6, "--out", out2])
    assert read_rows(out2) == read_rows(out)
    assert "run.json" in text

    (run / "run.json").unlink()
    out3 = tmp_path / "s3.csv"
    run_main([run, "--threshold", 0.6, "--out", out3])
    assert [im for im, _ in read_rows(out3)] == list(query)
    assert sorted(read_rows(out3)) == sorted(read_rows(out))


def test_a_mode_is_required(tmp_path):
    run = make_run(tmp_path, "a", synthetic(np.random.default_rng(14), 3)[:4])
    with pytest.raises(SystemExit):
        main([str(run), "--out", str(tmp_path / "x.csv")], log=lambda *_: None)
    with pytest.raises(SystemExit):
        main([str(run), "--tune", "--threshold", "0.5", "--out", str(tmp_path / "x.csv")], log=lambda *_: None)
