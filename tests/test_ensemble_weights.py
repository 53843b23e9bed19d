"""``ensemble.py --tune-weights``: the simplex grid, and weights that follow the informative run."""
import numpy as np
import pytest

from whale.ensemble.cli import main as ensemble_main
from whale.ensemble.weights import simplex_grid, tune_weights
from whale.core.errors import ConfigError
from whale.inference.scorefile import write_scores


def test_simplex_grid_points_sum_to_one():
    g = simplex_grid(3, 0.25)
    assert g.shape == (15, 3) and np.allclose(g.sum(1), 1) and (g >= 0).all()
    assert tuple(g[0]) == (1.0, 0.0, 0.0)  # grid order: most weight on the first run first
    assert simplex_grid(1, 0.1).tolist() == [[1.0]]
    with pytest.raises(ConfigError, match="must divide 1"):
        simplex_grid(2, 0.3)


def _runs(tmp_path, n_q=60, n_ids=20, seed=0):
    """Two runs of one fold: ``good`` ranks the true id first, ``noise`` is random; a third of queries new."""
    rng = np.random.default_rng(seed)
    gallery_ids = np.repeat([f"w{i:02d}" for i in range(n_ids)], 2)
    gallery = [f"g{i}.jpg" for i in range(len(gallery_ids))]
    query_ids = np.array([f"w{rng.integers(n_ids):02d}" if i % 3 else "new_whale" for i in range(n_q)])
    query = [f"q{i}.jpg" for i in range(n_q)]
    good = rng.random((n_q, len(gallery))) * 0.5
    for i, t in enumerate(query_ids):
        good[i, gallery_ids == t] += 0.5
    noise = rng.random((n_q, len(gallery)))
    return _write_runs(tmp_path, {"noise": noise, "good": good}, query, gallery, gallery_ids, query_ids)


def _write_runs(root, matrices: dict, query, gallery, gallery_ids, query_ids) -> list:
    """One run folder per ``matrices`` entry (name -> scores), its val.npz and test.npz of the same scores."""
    runs = []
    for name, s in matrices.items():
        for split in ("val", "test"):
            write_scores(root / name / f"{split}.npz", s.astype(np.float32), query, gallery, gallery_ids,
                         query_ids=query_ids if split == "val" else None,
                         identity={"run_id": name, "fold": 0, "split": split}, trained_on=[] if split == "val" else None)
        runs.append(root / name)
    return runs


def test_tune_weights_follows_the_informative_run(tmp_path):
    runs = _runs(tmp_path)
    w, best, table = tune_weights([r / "val.npz" for r in runs], "new_whale", step=0.25)
    assert len(table) == 5 and w[1] >= 0.75 and best == max(m for _, m, _ in table)
    noise_only = [m for ww, m, _ in table if ww[0] == 1.0][0]
    assert best > noise_only + 0.3


def test_ensemble_cli_tune_weights(tmp_path):
    runs = _runs(tmp_path)
    lines = []
    out = tmp_path / "sub.csv"
    assert ensemble_main([*map(str, runs), "--tune-weights", "--weight-step", "0.5", "--tune", "--out", str(out)],
                         log=lines.append) == 0
    assert out.is_file() and any(line.startswith("tuned weights 0.00, 1.00") for line in lines)
    assert ensemble_main([*map(str, runs), "--tune-weights", "--weights", "1", "1", "--tune", "--out",
                          str(out)], log=lines.append) == 2


def test_open_share_weights_the_mean_like_a_loop():
    from whale.metrics import map_at_k
    from whale.ranking.newwhale import map_by_threshold, open_share_weights, predict_top5

    rng = np.random.default_rng(1)
    ids = np.array(["a", "b", "c", "d", "e", "f"])
    scores = rng.random((9, 6))
    truth = np.array(["a", "new_whale", "c", "b", "new_whale", "f", "e", "d", "a"])
    from whale.ranking import top_id_scores

    names, idx, vals = top_id_scores(scores, ids, 5)
    grid = [0.2, 0.5, 0.8]
    got = map_by_threshold(names, idx, vals, truth, grid, open_share=0.6)
    w = open_share_weights(truth == "new_whale", 0.6)
    assert w.sum() == pytest.approx(1) and w[truth == "new_whale"].sum() == pytest.approx(0.6)
    for t, g in zip(grid, got):
        preds = predict_top5(scores, ids, t)
        per_query = np.array([map_at_k([p], [a]) for p, a in zip(preds, truth)])
        assert g == pytest.approx(float(per_query @ w))
    plain = map_by_threshold(names, idx, vals, truth, grid)
    assert plain == pytest.approx([map_at_k(predict_top5(scores, ids, t), truth) for t in grid])
    with pytest.raises(ValueError, match="both kinds"):
        open_share_weights(np.zeros(4, bool), 0.3)


def test_a_larger_open_share_tunes_a_threshold_at_least_as_high(tmp_path):
    runs = _runs(tmp_path)
    lines = []
    for share in (None, 0.8):
        extra = [] if share is None else ["--tune-new-share", str(share)]
        assert ensemble_main([str(runs[1]), "--tune", "--out", str(tmp_path / f"s{share}.csv"), *extra],
                             log=lines.append) == 0
    tuned = [float(line.split("tuned threshold ")[1].split(":")[0]) for line in lines if line.startswith("tuned threshold")]
    assert len(tuned) == 2 and tuned[1] >= tuned[0]
    assert ensemble_main([str(runs[1]), "--threshold", "0.5", "--tune-new-share", "0.3", "--out",
                          str(tmp_path / "x.csv")], log=lines.append) == 2


@pytest.mark.parametrize("how", [["--tune"], ["--tune-weights", "--tune"], ["--tune-weights", "--weight-grid", "log",
                                                                           "--tune"],
                                 ["--fusion", "mean", "--tune"]])
def test_an_open_share_without_open_set_validation_queries_is_one_line(tmp_path, how, capsys):
    from whale.ensemble.cli import main

    rng = np.random.default_rng(0)
    gallery_ids = np.repeat([f"w{i:02d}" for i in range(10)], 2)
    gallery = [f"g{i}.jpg" for i in range(len(gallery_ids))]
    query_ids = np.array([f"w{i % 10:02d}" for i in range(30)])  # a cleaned train.csv: no new_whale query
    query = [f"q{i}.jpg" for i in range(30)]
    runs = _write_runs(tmp_path, {"a": rng.random((30, 20)), "b": rng.random((30, 20))}, query, gallery,
                       gallery_ids, query_ids)
    out = tmp_path / "sub.csv"
    assert main([*map(str, runs), *how, "--tune-new-share", "0.276", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tune-new-share 0.276" in err[0] and "no new_whale query (0 of 30)" in err[0]
    assert str(runs[0] / "val.npz") in err[0] and not out.exists()


def test_log_grid_holds_the_first_run_at_1_and_the_others_on_a_factor_2_ladder():
    from whale.ensemble.weights import LOG_RATIOS, log_grid

    g = log_grid(2)
    assert g.shape == (1 + len(LOG_RATIOS), 2) and np.allclose(g.sum(1), 1) and tuple(g[0]) == (1.0, 0.0)
    ratios = g[1:, 1] / g[1:, 0]
    assert np.allclose(ratios, 2.0 ** np.arange(-17, 7)) and ratios.min() < 1e-5 and ratios.max() == 64
    assert log_grid(3).shape == ((1 + len(LOG_RATIOS)) ** 2, 3) and log_grid(1).tolist() == [[1.0]]
    with pytest.raises(ConfigError, match="at most 3 runs"):
        log_grid(4)


def _matcher_and_network(tmp_path, n_q=90, n_ids=30, seed=0):
    """A matcher-like run (the true id verified for half the queries, at 0.005-0.9 log-uniform; every other
    score votes alone, under 2e-4, the true id's no higher) and a network-like run (probabilities 0.2-1.0, the
    true id +0.25): the network helps where the matcher has no verified match, and at a weight of 0.1 it also
    pushes weakly verified true ids down; near 1e-3 it does only the first."""
    rng = np.random.default_rng(seed)
    gallery_ids = np.repeat([f"w{i:02d}" for i in range(n_ids)], 2)
    gallery = [f"g{i}.jpg" for i in range(len(gallery_ids))]
    query_ids = np.array([f"w{rng.integers(n_ids):02d}" for _ in range(n_q)])
    query = [f"q{i}.jpg" for i in range(n_q)]
    matcher = rng.random((n_q, len(gallery))) * 2e-4
    network = 0.2 + rng.random((n_q, len(gallery))) * 0.8
    for i, t in enumerate(query_ids):
        if i % 2:
            matcher[i, gallery_ids == t] = 10 ** rng.uniform(np.log10(0.005), np.log10(0.9))
        network[i, gallery_ids == t] += 0.25
    return _write_runs(tmp_path, {"matcher": matcher, "network": network}, query, gallery, gallery_ids, query_ids)


def test_the_log_grid_finds_the_small_weight_a_linear_step_cannot(tmp_path):
    runs = _matcher_and_network(tmp_path)
    val = [r / "val.npz" for r in runs]
    w_lin, best_lin, table_lin = tune_weights(val, "new_whale", step=0.1)
    w_log, best_log, table_log = tune_weights(val, "new_whale", grid="log")
    alone = table_lin[0][1]
    assert tuple(table_lin[0][0]) == (1.0, 0.0) and tuple(table_log[0][0]) == (1.0, 0.0)
    assert table_log[0][1] == alone  # the first point of both: the matcher alone
    assert alone < best_lin < best_log - 0.03  # both re-rank the unverified half; 0.1 also moves verified hits
    assert 0 < w_log[1] / w_log[0] < 0.1 / 0.9  # below the linear grid's smallest ratio


def test_ensemble_cli_weight_grid(tmp_path):
    runs = _matcher_and_network(tmp_path)
    lines = []
    out = tmp_path / "sub.csv"
    assert ensemble_main([*map(str, runs), "--tune-weights", "--weight-grid", "log", "--tune", "--out", str(out)],
                         log=lines.append) == 0
    assert any(line.startswith("weights tuned on validation (log grid") for line in lines)
    tuned = next(line for line in lines if line.startswith("tuned weights "))
    assert 0 < float(tuned.split(",")[1].split(":")[0]) < 0.1
    for bad in (["--tune-weights", "--weight-grid", "log", "--weight-step", "0.1"], ["--weight-grid", "log"],
                ["--weight-step", "0.5"]):
        assert ensemble_main([*map(str, runs), *bad, "--tune", "--out", str(tmp_path / "bad.csv")],
                             log=lines.append) == 2


def test_tune_weights_on_runs_of_different_folds_names_the_mismatch(tmp_path, capsys):
    """Runs validated on different folds (or data) share no validation query: the weights cannot be tuned on them,
    and the message says so instead of a weight vector of one fold's runs summing to zero."""
    rng = np.random.default_rng(0)
    gallery_ids = np.repeat([f"w{i:02d}" for i in range(10)], 2)
    gallery = [f"g{i}.jpg" for i in range(len(gallery_ids))]
    runs = []
    for fold in (0, 1):
        query = [f"f{fold}q{i}.jpg" for i in range(12)]
        query_ids = np.array([f"w{rng.integers(10):02d}" for _ in query])
        for split in ("val", "test"):
            names = query if split == "val" else [f"t{i}.jpg" for i in range(8)]
            scores = rng.random((len(names), len(gallery))).astype(np.float32)
            write_scores(tmp_path / f"r{fold}" / f"{split}.npz", scores, names, gallery, gallery_ids,
                         query_ids=query_ids if split == "val" else None, identity={"run_id": f"r{fold}", "fold": fold, "split": split},
                         trained_on=[] if split == "val" else None)
        runs.append(tmp_path / f"r{fold}")
    out = tmp_path / "sub.csv"
    assert ensemble_main([*map(str, runs), "--tune-weights", "--tune", "--out", str(out)], log=lambda m: None) == 2
    err = capsys.readouterr().err
    assert "--tune-weights: " in err and "validates 12 queries (fold 1)" in err
    assert "12 (fold 0), 0 of them shared" in err
    assert "weights must be finite" not in err and not out.exists()


def test_tune_weights_reads_each_validation_file_once(tmp_path, monkeypatch):
    """The log grid's 25 points combine in memory: every validation file is loaded once per tuning."""
    import whale.ensemble.combine as combine

    runs = _runs(tmp_path)
    loads = []
    real = combine.load_score_file
    monkeypatch.setattr(combine, "load_score_file", lambda path, *a, **k: loads.append(path) or real(path, *a, **k))
    w, best, table = tune_weights([r / "val.npz" for r in runs], "new_whale", grid="log")
    assert len(table) == 25 and sorted(map(str, loads)) == sorted(str(r / "val.npz") for r in runs)


def test_held_validation_groups_equal_validation_groups(tmp_path):
    """Two models of one fold (averaged) and a fold of its own (concatenated), its queries in another order:
    the held files combine to the same float32 sums as validation_groups reading them."""
    from whale.ensemble.combine import HeldValidation, validation_groups

    rng = np.random.default_rng(3)
    gallery_ids = np.repeat(["a", "b", "c"], 2)
    gallery = [f"g{i}.jpg" for i in range(6)]
    query = [f"q{i}.jpg" for i in range(5)]
    query_ids = np.array(["a", "b", "new_whale", "c", "a"])
    paths = []
    for name, (q, ids) in {"m1": (query, query_ids), "m2": (query[::-1], query_ids[::-1]),
                           "f1": ([f"u{i}.jpg" for i in range(4)], query_ids[:4])}.items():
        path = tmp_path / name / "val.npz"
        write_scores(path, rng.random((len(q), 6)).astype(np.float16), q, gallery[::-1] if name == "m2" else gallery,
                     gallery_ids[::-1] if name == "m2" else gallery_ids, query_ids=ids,
                     identity={"run_id": name, "fold": 0, "split": "val"}, trained_on=[])
        paths.append(path)
    held = HeldValidation.read(paths)
    for w in ([1, 1, 1], [0.7, 0.1, 0.2], [1.0, 0.0, 3.0]):
        ours, theirs = held.groups(w), validation_groups(paths, w)
        assert len(ours) == len(theirs) == 2
        for a, b in zip(ours, theirs):
            assert a.scores.dtype == np.float32 and a.scores.tobytes() == b.scores.tobytes()
            assert a.query.tolist() == b.query.tolist() and a.query_ids.tolist() == b.query_ids.tolist()
            assert a.gallery_ids.tolist() == b.gallery_ids.tolist() and a.sources == b.sources
