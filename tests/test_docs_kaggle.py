"""docs/kaggle.md: every `python ...` command of ours runs with --help and accepts every flag written
there; every row of its cost table is what `run_fold.py --plan` prints for that row's command."""
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "kaggle.md"


def doc_commands() -> list[str]:
    """Command lines inside the doc's ``` blocks (backslash continuations joined)."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", DOC.read_text(), re.M | re.S)
    lines = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            lines.append(line.split(" #", 1)[0].strip())
    return [line for line in lines if line]


def our_commands() -> dict[tuple[str, ...], set[str]]:
    """``{argv prefix to run with --help: flags written in the doc}`` for every `python` command."""
    found: dict[tuple[str, ...], set[str]] = {}
    for line in doc_commands():
        if not line.startswith("python "):
            continue  # kaggle CLI, shell, or the generated run.py (rehearsed by tests/test_kernels.py)
        words = shlex.split(line.replace("[", " ").replace("]", " ").replace("|", " "))
        if words[1] == "-m":
            head = ("-m", words[2])
            rest = words[3:]
        else:
            head, rest = (words[1],), words[2:]
        if rest and re.fullmatch(r"[a-z][a-z-]*", rest[0]) and head[-1] in ("whale.kaggle.kernels", "whale.submission"):
            head, rest = head + (rest[0],), rest[1:]
        found.setdefault(head, set()).update(w for w in rest if re.fullmatch(r"--[a-z][a-z0-9-]*", w))
    return found


def test_the_doc_covers_the_whole_journey():
    text = DOC.read_text()
    for needle in ("kaggle competitions download -c humpback-whale-identification",
                   "bounding_boxes.csv", "kaggle datasets create -p build/whale-code",
                   "kaggle kernels push -p kernels/densenet121/fold0", "30 hours", "python run_fold.py --plan",
                   "kaggle kernels output", "python ensemble.py",
                   "kaggle competitions submit -c humpback-whale-identification -f"):
        assert needle in text, f"{DOC}: expected {needle!r}"
    heads = our_commands()
    assert ("-m", "whale.kaggle.kernels", "code-dataset") in heads and ("ensemble.py",) in heads, heads


@pytest.mark.parametrize("head", sorted(our_commands()), ids=" ".join)
def test_every_command_of_ours_in_the_doc_runs_with_help_and_knows_its_flags(head):
    res = subprocess.run([sys.executable, *head, "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, f"python {' '.join(head)} --help: {res.stderr[-2000:]}"
    unknown = sorted(f for f in our_commands()[head] if f not in res.stdout)
    assert not unknown, f"{DOC}: python {' '.join(head)} does not accept {unknown}"


ROW = re.compile(r"^\| [^|]+ \| `(--config [^`]+)` \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| (\d+) \| ([\d.]+) \|$", re.M)


def _plan_output(argv: list[str], capsys) -> str:
    from whale.training.cli import main

    assert main(argv) == 0, argv
    return capsys.readouterr().out


def test_the_cost_table_is_what_the_planner_prints(capsys):
    """Each row = the doc's common `run_fold.py --plan` command + the row's flags, run here."""
    common = [line for line in doc_commands() if line.startswith("python run_fold.py --plan --pair-images")]
    assert len(common) == 1, f"{DOC}: expected one common 'python run_fold.py --plan --pair-images ...' line"
    base = shlex.split(common[0])[2:]
    rows = ROW.findall(DOC.read_text())
    assert len(rows) >= 9, f"{DOC}: expected the cost table's rows, found {len(rows)}"
    for flags, *cells in rows:
        out = _plan_output(base + shlex.split(flags), capsys)
        total = re.search(r"estimated ([\d.]+) h per fold: ([\d.]+) h of training.*?\+ ([\d.]+) h of mining",
                          out)
        quota = re.search(r"^= (\d+) kernel versions of 7.75 h = ([\d.]+) weeks of the 30 h weekly GPU quota",
                          out, re.M)
        assert total and quota, out
        printed = [total[2], total[3], total[1], quota[1], quota[2]]
        assert cells == printed, f"{DOC}: the row {flags!r} is stale: the planner prints {printed}"
    out = _plan_output(base + ["--config", "configs/convnet_v1.yaml"], capsys)
    assert "no estimate of hours" in out
    assert "| `--config configs/convnet_v1.yaml` | no rate measured" in DOC.read_text()
