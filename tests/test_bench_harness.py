"""benchmarks/harness.py: rows kept as each run ends, resumed, skipped by group when data is absent, reported; and
the benchmarks on it (objectives, homography_pretrain) resume and reproduce their tables with --report, trained by
a stand-in (no training here)."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import common, harness  # noqa: E402


def test_a_row_file_keeps_rows_by_key_replaces_one_of_the_same_key_and_names_a_bad_file(tmp_path):
    rows = harness.RowFile(tmp_path / "out" / "results.json", ("fold", "method"))
    assert rows.rows() == [] and rows.done() == set()
    rows.add({"fold": 0, "method": "pixels", "top1": 0.1}, args={"seed": 0})
    rows.add({"fold": 1, "method": "pixels", "top1": 0.2})
    other = harness.RowFile(tmp_path / "out" / "results.json", ("fold", "method"))  # a second command, same file
    other.add({"fold": 0, "method": "pixels", "top1": 0.3}, args={"seed": 1})
    assert [r["top1"] for r in rows.rows()] == [0.2, 0.3] and rows.done() == {(0, "pixels"), (1, "pixels")}
    assert json.loads(rows.path.read_text())["args"] == {"seed": 1}
    rows.path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"results.json: expected a JSON object with a list 'rows'"):
        rows.rows()


def test_jobs_run_once_in_order_and_absent_data_skips_its_group(tmp_path):
    rows = harness.RowFile(tmp_path / "results.json", ("set", "seed"))
    ran, said = [], []

    def job(name, seed):
        def run():
            ran.append((name, seed))
            if name == "lions":
                raise FileNotFoundError("../shared/data/lions not found")
            return {"set": name, "seed": seed, "map5": seed / 10}
        return harness.Job((name, seed), run, name)

    jobs = [job(name, seed) for seed in (0, 1) for name in ("synthetic", "lions")]
    kept = harness.run_jobs(rows, jobs, log=said.append, args={"quick": True})
    assert ran == [("synthetic", 0), ("lions", 0), ("synthetic", 1)]  # lions tried once, then its group skipped
    assert said == ["lions: skipped (../shared/data/lions not found)"]
    assert [(r["set"], r["seed"]) for r in kept] == [("synthetic", 0), ("synthetic", 1)]
    assert json.loads(rows.path.read_text())["args"] == {"quick": True}
    ran.clear()
    assert harness.run_jobs(rows, jobs[:1] + [job("synthetic", 2)], log=said.append)[-1]["seed"] == 2
    assert ran == [("synthetic", 2)]  # the kept rows are not run again

    def broken():
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        harness.run_jobs(rows, [job("synthetic", 3), harness.Job(("synthetic", 4), broken)])
    assert (("synthetic", 3)) in rows.done()  # each row is kept as soon as it ends


def test_finish_prints_the_tables_then_the_final_json_line(capsys):
    def summary(rows):
        return "| a |\n| 1 |", {"a": len(rows)}

    assert harness.finish("toy", [{}, {}], summary, seconds=2.04) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == ["", "| a |", "| 1 |"]
    assert json.loads(out[-1]) == {"benchmark": "toy", "metrics": {"summary": {"a": 2}}, "seconds": 2.0}
    harness.finish("toy", [], summary, lambda s: {"n": s["a"]})
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["metrics"] == {"n": 0}


def test_the_parser_opens_with_out_and_asks_for_seeds_and_report_where_wanted():
    p = harness.parser("doc", "work folder", seeds="0,1,2", report=True)
    args = p.parse_args(["--out", "x", "--report"])
    assert (args.out, args.seeds, args.report) == ("x", "0,1,2", True)
    assert not hasattr(harness.parser("doc", "w").parse_args(["--out", "x"]), "seeds")
    assert harness.seed_list("0, 2,") == [0, 2]


def _fake_runs(monkeypatch, module, metrics):
    """``module.run_one`` replaced by a stand-in that trains nothing; the rows it was asked for."""
    asked = []

    def run_one(set_name, what, seed, args, sets, log):
        asked.append((set_name, what, seed))
        name = module.label(what, args.sampler, args.set) if hasattr(module, "label") else what
        return {"set": set_name, ("objective" if hasattr(module, "label") else "variant"): name, "seed": seed,
                "train_s": 1.0, "steps": 10, "train_val_map5": 0.5 + seed / 10,
                **{k: 0.1 * (seed + 1) for k in metrics}}

    monkeypatch.setattr(module, "run_one", run_one)
    monkeypatch.setattr(common, "setup_tensorflow", lambda *a, **k: None)
    return asked


def test_objectives_resumes_from_its_rows_and_reports_the_same_table(tmp_path, monkeypatch, capsys):
    from benchmarks.seeds import objectives

    asked = _fake_runs(monkeypatch, objectives, objectives.METRICS["synthetic"])
    argv = ["--out", str(tmp_path), "--sets", "synthetic", "--objectives", "head,triplet", "--seeds", "0,1"]
    assert objectives.main(argv) == 0
    first = capsys.readouterr().out
    assert asked == [("synthetic", o, s) for s in (0, 1) for o in ("pixels", "head", "triplet")]
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [(r["objective"], r["seed"]) for r in rows] == [(o, s) for s in (0, 1) for o in ("pixels", "head", "triplet")]
    table = objectives.summary(rows)[0]
    assert table in first and "| head | 2 | 0.150 +- 0.071 |" in table
    asked.clear()
    assert objectives.main(argv) == 0 and asked == []  # every row kept: nothing run again
    assert objectives.main(["--out", str(tmp_path), "--report"]) == 0
    out = capsys.readouterr().out
    assert out.count(table) == 2 and json.loads(out.splitlines()[-1])["benchmark"] == "objectives"


def test_homography_pretrain_resumes_from_its_rows_and_reports_the_same_table(tmp_path, monkeypatch, capsys):
    from benchmarks.seeds import homography_pretrain as hp

    asked = _fake_runs(monkeypatch, hp, hp.METRICS["synthetic"])
    argv = ["--out", str(tmp_path), "--sets", "synthetic", "--seeds", "0,1", "--fractions", "0.5"]
    assert hp.main(argv) == 0
    first = capsys.readouterr().out
    assert asked == [("synthetic", v, s) for s in (0, 1) for v in ("none", "0.5")]
    table = hp.summary(json.loads((tmp_path / "results.json").read_text())["rows"], ["0.5"])[0]
    assert table in first and "| homography f=0.5 (chosen) | 2 |" in table
    asked.clear()
    assert hp.main(argv) == 0 and asked == []
    capsys.readouterr()
    assert hp.main(["--out", str(tmp_path), "--fractions", "0.5", "--report"]) == 0
    assert table in capsys.readouterr().out
