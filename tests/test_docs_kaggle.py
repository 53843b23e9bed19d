"""docs/kaggle.md: every `python ...` command of ours runs with --help and accepts every flag written
there; the version estimates in its table are what `python -m whale.kaggle.plan` computes."""
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
                   "kaggle kernels push -p kernels/densenet121/fold0", "30 hours", "python -m whale.kaggle.plan",
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


def test_the_estimate_table_is_what_plan_computes():
    from whale.config import load_config
    from whale.kaggle.plan import H100_SPEED, estimate

    text = DOC.read_text()
    for name in ("densenet121", "seresnext50"):
        cfg = load_config(ROOT / "configs" / f"{name}.yaml")
        est = estimate(cfg, H100_SPEED[name])
        row = re.search(rf"^\| `{name}`[^|]*\| (\S+) \| (\S+) \| (\S+) \|$", text, re.M)
        assert row, f"{DOC}: no table row for {name}"
        assert row.groups() == (f"{est.hours:.0f}", str(est.versions), f"{4 * est.quota_weeks:.1f}"), (
            f"{DOC}: the {name} row is stale; python -m whale.kaggle.plan --config configs/{name}.yaml gives "
            f"{est.hours:.1f} h, {est.versions} versions")


def test_plan_arithmetic_on_a_one_stage_schedule():
    from whale.config import RunConfig, Stage
    from whale.kaggle.plan import estimate, speed_at

    assert speed_at(512, {512: 200.0}) == 200.0
    assert speed_at(256, {512: 200.0}) == pytest.approx(800.0)  # a quarter of the pixels
    cfg = RunConfig(name="one", stages=(Stage(epochs=10, k=1.0, lr=1e-4, image_size=512),), mining_interval=5)
    est = estimate(cfg, {512: 200.0}, main_images=1000, mining_seconds=60.0, hours_per_version=0.1)
    # 10 epochs x 2,000 pairs / 200 pairs/s = 100 s, plus 2 minings x 60 s
    assert est.hours == pytest.approx(220.0 / 3600)
    assert est.versions == 1
