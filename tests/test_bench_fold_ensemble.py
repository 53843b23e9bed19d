"""benchmarks/flukes/fold_ensemble.py: each fold alone and the folds averaged, ranked by the matrices they make."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.flukes import fold_ensemble, shared  # noqa: E402


def _fold_run(comp: Path, run: Path, fold: int, signal: float) -> None:
    """A fold's score files as ``whale train --fold K`` writes them for ``comp``: fold ``K``'s validation queries
    against its gallery, the test against every known photo; the true individual's photos raised by ``signal``."""
    from whale.data import ImageSet, fold_data, load_competition
    from whale.inference.scorefile import write_scores

    c = load_competition(comp)
    data, known = fold_data(c, fold, 0), ImageSet.known(c)
    rng = np.random.default_rng(fold)
    truth = dict(zip(*[np.loadtxt(comp / "test_solution.csv", dtype=str, delimiter=",", skiprows=1, usecols=i)
                       for i in (0, 1)]))
    for split, queries, q_ids, gallery in (("val", data.val.names, data.val.ids, data.gallery),
                                           ("test", c.test_images, [truth[q] for q in c.test_images], known)):
        scores = rng.random((len(queries), len(gallery))).astype(np.float32) * 0.5
        scores += signal * (np.asarray(q_ids)[:, None] == np.asarray(gallery.ids)[None, :])
        identity = {"run": run.name, "run_id": run.name, "config_hash": "net", "fold": fold, "seed": 0,
                    "split": split}  # the folds of one model (whale/ensemble/models.py)
        write_scores(run / "scores" / f"{split}.npz", np.clip(scores, 0, 1), queries, gallery.names, gallery.ids,
                     query_ids=q_ids if split == "val" else None, identity=identity)


def test_each_fold_alone_and_the_folds_averaged_are_rows_with_their_gains(tmp_path):
    from tests.test_bench_humpback_learned import fake_source

    comp, truth, _ = shared.build_split(fake_source(tmp_path / "src"), tmp_path / "data", 0, log=lambda m: None)
    runs = {}
    for fold in (0, 1):
        _fold_run(comp, tmp_path / f"fold{fold}", fold, signal=0.3)
        runs[fold] = (tmp_path / f"fold{fold}", 10.0 + fold)
    from tests.test_bench_humpback_learned import _matcher_files

    _matcher_files(comp, tmp_path / "kp", 7)
    rows = fold_ensemble.rows_of(runs, comp, truth, tmp_path / "work", [tmp_path / "kp"], log=lambda m: None)
    assert [r["method"] for r in rows] == ["fold 0", "fold 1", "folds 0,1 averaged", "the matchers",
                                           "fold 0 + the matchers", "fold 1 + the matchers",
                                           "folds 0,1 averaged + the matchers"]
    assert [r["folds"] for r in rows[:3]] == [[0], [1], [0, 1]] and rows[2]["seconds"]["train"] == 21.0
    assert [r["fused"] for r in rows] == [False] * 3 + [True] * 4
    assert (tmp_path / "work" / "folds_0_1_averaged_the_matchers.calibration.json").is_file()
    from whale.ensemble.combine import average_score_files  # the ranking of the fusion as whale ensemble weighed it:
    from whale.ensemble.fusion import read_fusion  # the matcher one model, the two folds the other
    from whale.inference.scorefile import score_path

    fusion = read_fusion(tmp_path / "work" / "folds_0_1_averaged_the_matchers.calibration.json")
    fused = average_score_files([score_path(r, "test") for r in (tmp_path / "kp", runs[0][0], runs[1][0])],
                                [0.5, 0.25, 0.25], **fusion.maps())
    want = shared.ranking_metrics(fused.scores, fused.query, fused.gallery_ids, truth)["map5_known_no_new"]
    assert rows[-1]["map5_known_no_new"] == want
    assert all(0 <= r["map5"] <= 1 and 0 <= r["map5_known_no_new"] <= 1 for r in rows)
    assert (tmp_path / "work" / "folds_0_1_averaged.csv").is_file()
    text = fold_ensemble.table(rows)
    assert "| folds 0,1 averaged |" in text and "over the mean of its folds" in text
    assert "- folds 0,1 averaged + the matchers: MAP@5 all" in text
    mean = np.mean([rows[0]["map5_known_no_new"], rows[1]["map5_known_no_new"]])
    assert f"known, ids only {rows[2]['map5_known_no_new'] - mean:+.3f} over the mean" in text
