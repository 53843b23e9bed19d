"""benchmarks/flukes/humpback.py's learned path: ``--keypoint-runs`` and ``--learned-runs`` reuse earlier runs' score
files of the same split only."""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.flukes import humpback, shared  # noqa: E402


def fake_source(root: Path, counts=(1,) * 8 + (3,) * 6 + (5,) * 4, seed=0) -> Path:
    """test_bench_humpback's fake source, with enough individuals of 3 and 5 photos for a fold to train on."""
    from tests.test_bench_humpback import fake_source as make

    return make(root, counts, seed)


def _matcher_files(comp: Path, run: Path, seed: int = 0) -> None:
    """Score files as ``whale score --matcher keypoints --fold 0`` writes them for ``comp`` (random scores)."""
    from whale.data import ImageSet, fold_data, load_competition
    from whale.inference.scorefile import write_scores

    c = load_competition(comp)
    data, known = fold_data(c, 0, 0), ImageSet.known(c)
    rng = np.random.default_rng(seed)
    write_scores(run / "val.npz", rng.random((len(data.val), len(data.gallery))).astype(np.float32),
                 data.val.names, data.gallery.names, data.gallery.ids, query_ids=data.val.ids)
    write_scores(run / "test.npz", rng.random((len(c.test_images), len(known))).astype(np.float32),
                 c.test_images, known.names, known.ids)
    (run / "run.json").write_text(json.dumps({"data": str(comp), "matcher": "keypoints"}))


def test_keypoint_runs_are_taken_for_their_own_split_only(tmp_path):
    src = fake_source(tmp_path / "src")
    comps = {s: shared.build_split(src, tmp_path / f"seed{s}" / "data", s, log=lambda m: None)[0] for s in (0, 1)}
    _matcher_files(comps[0], tmp_path / "seed0" / "keypoints")
    assert shared.earlier_run_of(tmp_path, 0, comps[0]) == tmp_path / "seed0" / "keypoints"
    copy = shutil.copytree(comps[0], tmp_path / "copy" / "data")  # the same split written elsewhere
    assert shared.earlier_run_of(tmp_path, 0, copy) == tmp_path / "seed0" / "keypoints"
    with pytest.raises(ValueError, match="another split"):
        shared.earlier_run_of(tmp_path, 0, comps[1])
    with pytest.raises(ValueError, match="--keypoint-runs: .* found none"):
        shared.earlier_run_of(tmp_path, 1, comps[1])


def test_learned_runs_are_found_by_their_scores_folder_and_split(tmp_path):
    """A trained run keeps its score files in ``scores/`` (what ``whale ensemble`` reads): found there."""
    src = fake_source(tmp_path / "src")
    comps = {s: shared.build_split(src, tmp_path / f"seed{s}" / "data", s, log=lambda m: None)[0] for s in (0, 1)}
    run = tmp_path / "seed0" / "learned"
    _matcher_files(comps[0], run / "scores")
    (run / "scores" / "run.json").rename(run / "run.json")
    assert shared.earlier_run_of(tmp_path, 0, comps[0], "learned") == run
    with pytest.raises(ValueError, match="another split"):
        shared.earlier_run_of(tmp_path, 0, comps[1], "learned")
    with pytest.raises(ValueError, match="--learned-runs: .* found none"):
        shared.earlier_run_of(tmp_path, 1, comps[1], "learned")
    named = shutil.copytree(run, tmp_path / "seed0" / "learned-head-random")  # a config's (and variant's) folder
    assert shared.earlier_run_of(tmp_path, 0, comps[0], "learned-head-random") == named
    with pytest.raises(ValueError, match="--learned-runs: .* found none"):
        shared.earlier_run_of(tmp_path, 1, comps[1], "learned-head-random")


def test_a_finished_step_is_not_run_again_after_a_kill(tmp_path, monkeypatch):
    """A train or score step that finished with the same arguments is skipped (its measured time reported); other
    arguments, a failed step or an ensemble run again."""
    calls = []

    class Done:
        returncode = 0

    def fake_run(cmd, log_path, **kw):
        calls.append(cmd[3:])
        return Done.returncode, 1.5, {"resident": 0.0, "anonymous": 0.0}

    monkeypatch.setattr(shared.common, "run_measured", fake_run)
    log = tmp_path / "x.train.log"
    first = shared.whale_command(["train", "--fold", "0"], log, log=lambda m: None)
    assert shared.whale_command(["train", "--fold", "0"], log, log=lambda m: None) == first
    assert calls == [["train", "--fold", "0"]]
    shared.whale_command(["train", "--fold", "1"], log, log=lambda m: None)
    shared.whale_command(["ensemble", "A"], tmp_path / "e.log", log=lambda m: None)
    shared.whale_command(["ensemble", "A"], tmp_path / "e.log", log=lambda m: None)
    assert calls[1:] == [["train", "--fold", "1"], ["ensemble", "A"], ["ensemble", "A"]]
    Done.returncode = 1
    with pytest.raises(RuntimeError, match="x.train.log"):
        shared.whale_command(["train", "--fold", "2"], log, log=lambda m: None)
    Done.returncode = 0
    shared.whale_command(["train", "--fold", "1"], log, log=lambda m: None)  # the failure removed the marker
    assert calls[-1] == ["train", "--fold", "1"]


def test_gpu_tarballs_unpack_into_their_own_job_folders(tmp_path):
    """flukes_arcface_s0_resumed.tgz holds arcface_s0/ as flukes_arcface_s0.tgz does: each lands in its job's folder;
    unpacking again from the same files keeps what was written into them since."""
    import tarfile

    from benchmarks.flukes import humpback_runs

    tars = tmp_path / "tars"
    tars.mkdir()
    for job, epoch in (("arcface_s0", 1), ("arcface_s0_resumed", 3), ("arcface_s1", 1)):
        run = tmp_path / "build" / job / "arcface_s0"
        run.mkdir(parents=True)
        (run / "epoch.txt").write_text(str(epoch))
        with tarfile.open(tars / f"flukes_{job}.tgz", "w:gz") as tar:
            tar.add(run, arcname="arcface_s0")
    runs = humpback_runs.gpu_runs(tars, 0, tmp_path / "gpu")
    assert sorted(runs) == ["arcface_s0", "arcface_s0_resumed"]
    assert [(runs[j] / "epoch.txt").read_text() for j in sorted(runs)] == ["1", "3"]
    (runs["arcface_s0"] / "scores").mkdir()
    assert humpback_runs.gpu_runs(tars, 0, tmp_path / "gpu") == runs and (runs["arcface_s0"] / "scores").is_dir()


def test_report_gathers_the_seeds_run_apart_and_pairs_fusion_gains_by_seed(tmp_path, capsys):
    """--report: the rows of every OUT/seedN/results.json in one table; a fusion row's gain is taken against the
    matcher of its own seed (a seed without a matcher row is left out of the gain)."""
    metrics = dict(map5_known=0.5, map5_new=0.9, top1=0.5, new_whale_first=0.3)
    for seed, kp, fu in ((0, 0.60, 0.65), (1, 0.62, 0.66), (2, None, 0.9)):
        rows = [{"method": "fusion x", "seed": seed, "map5": fu, "map5_known_no_new": fu, "top5": fu, **metrics}]
        if kp is not None:
            rows.append({"method": "keypoints", "seed": seed, "map5": kp, "map5_known_no_new": kp, "top5": kp,
                         **metrics})
        (tmp_path / f"seed{seed}").mkdir()
        (tmp_path / f"seed{seed}" / "results.json").write_text(json.dumps(rows))
    humpback.main(["--out", str(tmp_path), "--report"])
    out = capsys.readouterr().out
    assert "| fusion x | 0.737 +- 0.142 |" in out and "| keypoints | 0.610 +- 0.014 |" in out
    assert "| fusion x | +0.0450 +- 0.0071 | +0.0450 +- 0.0071 | +0.0450 +- 0.0071 | 2 |" in out


def test_fusion_rows_give_each_calibrated_rule_with_and_without_the_share_and_each_grid(tmp_path):
    """Every fusion row is a checked submission with the fused test matrix's ranking figures: a calibrated rule's
    matrix as the ensemble fitted it (read back from its calibration file), a grid's with its tuned weights."""
    from types import SimpleNamespace

    from benchmarks.flukes import humpback_runs

    src = fake_source(tmp_path / "src")
    comp, truth, _ = shared.build_split(src, tmp_path / "seed0" / "data", 0, log=lambda m: None)
    kp, net, work = tmp_path / "kp", tmp_path / "net", tmp_path / "work"
    _matcher_files(comp, kp)
    _matcher_files(comp, net, seed=1)
    work.mkdir()
    rows = humpback_runs.fusion_rows(SimpleNamespace(fusion=["mean", "log"]), "net", [kp, net], comp, truth, work,
                                     log=lambda m: None)
    assert [r["method"] for r in rows] == ["fusion net, calibrated mean",
                                           f"fusion net, calibrated mean, --tune-new-share {shared.KAGGLE_NEW_SHARE}",
                                           "fusion net, log grid"]
    for r in rows:
        assert 0 <= r["map5"] <= 1 and 0 <= r["top1"] <= r["top5"] <= 1 and "map5_known_no_new" in r
    assert len(rows[2]["weights"]) == 2 and "weights" not in rows[0]


def test_a_learned_variant_trains_the_config_again_with_its_overrides(tmp_path, monkeypatch):
    """``--learned-variant random='A=1 B=2'``: the config as it is, then again with ``--set A=1 --set B=2`` into its own
    folder and row; a variant name that is not a plain word is refused by name."""
    from types import SimpleNamespace

    from benchmarks.flukes import humpback_runs

    calls = []
    monkeypatch.setattr(humpback_runs, "whale_command", lambda args, log_path, log: calls.append(args) or 2.0)
    args = SimpleNamespace(methods=["learned"], learned_configs=["configs/head.yaml"], learned_runs=None,
                           out=str(tmp_path), gpu_runs=None,
                           learned_variants=[humpback_runs.learned_variant("random=stages[1].k=1000 stages[2].k=1000")])
    runs = humpback_runs.learned_runs(args, 0, tmp_path / "data", tmp_path / "seed0", log=lambda m: None)
    assert list(runs) == ["learned head", "learned head random"]
    assert runs["learned head random"][0] == tmp_path / "seed0" / "learned-head-random"
    assert "--set" not in calls[0]
    assert calls[1][calls[1].index("--out") + 1] == str(tmp_path / "seed0" / "learned-head-random")
    assert calls[1][-4:] == ["--set", "stages[1].k=1000", "--set", "stages[2].k=1000"]
    for bad in ("random", "Random Neg=k=1", "fixed="):
        with pytest.raises(ValueError, match="--learned-variant"):
            humpback_runs.learned_variant(bad)


def test_variants_only_trains_the_variants_and_not_the_config_as_written(tmp_path, monkeypatch):
    """``--variants-only``: the config as written was measured before, so only each ``--learned-variant`` is trained
    (its own folder and row); without a variant the flag changes nothing."""
    from types import SimpleNamespace

    from benchmarks.flukes import humpback_runs

    calls = []
    monkeypatch.setattr(humpback_runs, "whale_command", lambda args, log_path, log: calls.append(args) or 2.0)
    fixed = humpback_runs.learned_variant("fixed=stages[0].k=0.5 stages[1].k=0.5")
    args = SimpleNamespace(methods=["learned"], learned_configs=["configs/head.yaml"], learned_runs=None,
                           out=str(tmp_path), gpu_runs=None, learned_variants=[fixed], variants_only=True)
    runs = humpback_runs.learned_runs(args, 0, tmp_path / "data", tmp_path / "seed0", log=lambda m: None)
    assert list(runs) == ["learned head fixed"] and len(calls) == 1
    assert calls[0][-4:] == ["--set", "stages[0].k=0.5", "--set", "stages[1].k=0.5"]
    args.learned_variants = []
    assert list(humpback_runs.learned_runs(args, 0, tmp_path / "data", tmp_path / "seed0", log=lambda m: None)) == [
        "learned head"]


def test_report_pairs_every_row_with_the_gains_over_row_and_draws_the_learned_runs_curves(tmp_path, capsys):
    """--report --gains-over A: each other row minus A on the same seed; the learned runs' log.csv drawn as one
    figure of validation MAP@5 by epoch (a run without a validated epoch yet adds no line and breaks nothing)."""
    metrics = dict(map5_known=0.5, map5_new=0.9, top1=0.5, new_whale_first=0.3)
    for seed, a, b in ((0, 0.40, 0.45), (1, 0.38, 0.41), (2, 0.37, 0.40)):
        rows = [{"method": m, "seed": seed, "map5": v, "map5_known_no_new": v, "top5": v, **metrics}
                for m, v in (("learned head random", a), ("learned head", b))]
        (tmp_path / f"seed{seed}").mkdir()
        (tmp_path / f"seed{seed}" / "results.json").write_text(json.dumps(rows))
        for name, rows_csv in (("head", "1,,\n2,0.2,\n4,0.3,\n"), ("head-random", "1,,\n")):
            (tmp_path / f"seed{seed}" / f"learned-{name}").mkdir()
            (tmp_path / f"seed{seed}" / f"learned-{name}" / "log.csv").write_text("epoch,val_map5,k\n" + rows_csv)
    humpback.main(["--out", str(tmp_path), "--report", "--gains-over", "learned head random"])
    out = capsys.readouterr().out
    assert "| learned head | +0.0367 +- 0.0115 | +0.0367 +- 0.0115 | +0.0367 +- 0.0115 | 3 |" in out
    assert (tmp_path / "learning_curves.png").stat().st_size > 1000 and "learning_curves.png" in out


def test_learned_runs_given_are_measured_again_not_trained(tmp_path, monkeypatch):
    """``--methods learned --learned-runs DIR``: each config's and variant's run of DIR (looked up by its folder name,
    of the same split) becomes the row; nothing is trained."""
    from types import SimpleNamespace

    from benchmarks.flukes import humpback_runs

    monkeypatch.setattr(humpback_runs, "whale_command", lambda *a, **k: pytest.fail("trained again"))
    monkeypatch.setattr(humpback_runs, "earlier_run_of", lambda folder, seed, comp, kind: Path(folder) / kind)
    for name in ("learned-head", "learned-head-random"):
        (tmp_path / "seed0" / name).mkdir(parents=True)
    args = SimpleNamespace(methods=["learned"], learned_configs=["configs/head.yaml"], learned_runs=str(tmp_path),
                           out=str(tmp_path / "new"), gpu_runs=None,
                           learned_variants=[humpback_runs.learned_variant("random=stages[1].k=1000")])
    runs = humpback_runs.learned_runs(args, 0, tmp_path / "data", tmp_path / "new" / "seed0", log=lambda m: None)
    assert runs == {"learned head": (tmp_path / "learned-head", None),
                    "learned head random": (tmp_path / "learned-head-random", None)}


def test_a_variant_without_its_own_earlier_folder_is_refused_not_given_the_plain_run(tmp_path, monkeypatch):
    """``--learned-runs DIR`` holding only the plain ``learned`` folder: the variant's row is looked up under its own
    name (and refused there), never filled with the plain run's scores."""
    from types import SimpleNamespace

    from benchmarks.flukes import humpback_runs

    kinds = []
    monkeypatch.setattr(humpback_runs, "earlier_run_of", lambda folder, seed, comp, kind: kinds.append(kind) or folder)
    (tmp_path / "seed0" / "learned").mkdir(parents=True)
    args = SimpleNamespace(methods=["learned"], learned_configs=["configs/head.yaml"], learned_runs=str(tmp_path),
                           out=str(tmp_path / "new"), gpu_runs=None,
                           learned_variants=[humpback_runs.learned_variant("random=stages[1].k=1000")])
    humpback_runs.learned_runs(args, 0, tmp_path / "data", tmp_path / "new" / "seed0", log=lambda m: None)
    assert kinds == ["learned", "learned-head-random"]
