"""``whale recipe`` (:mod:`whale.recipe`): the shipped recipe's exact commands, a bad recipe refused naming the file
and the key, resuming after a failed, interrupted or changed step, the progress display, and the demo recipe end to
end on a tiny synthetic competition, rerun to the same submission byte for byte.

The recipes' steps here are mostly ``whale submission check`` (a second each): a real ``whale`` command that fails
or passes as the files it checks say. (``tests/test_recipe.py`` is the ensemble's recipe, ``whale ensemble
--recipe``.)
"""
import io
import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from whale import cli
from whale.core.errors import ConfigError
from whale.recipe.__main__ import main
from whale.recipe.display import Display, left_text, times_table
from whale.recipe.runner import LogTail, clean
from whale.recipe.state import RecipeState, plan
from whale.recipe.steps import load_recipe

ROOT = Path(__file__).resolve().parents[1]
PY = shlex.quote(sys.executable)
SAMPLE = "Image,Id\na.jpg,new_whale w1 w2 w3 w4\nb.jpg,new_whale w1 w2 w3 w4\n"
GOOD = "Image,Id\na.jpg,w1 new_whale w2 w3 w4\nb.jpg,w5 w1 new_whale w2 w3\n"
BAD = "Image,Id\na.jpg,w1 w1\nb.jpg,w5 w1 new_whale w2 w3\n"


def test_the_shipped_recipe_s_dry_run_prints_the_best_recipe_s_exact_commands(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["--data", "data/humpback", "--out", "runs/best", "--dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    commands = [line for line in printed if not line.startswith("#")]
    d, o = "--data data/humpback --fold 0", "runs/best"
    assert commands == [
        f"{PY} -m whale score --matcher keypoints --config configs/keypoints_checked.yaml {d} --out {o}/sift "
        f"--cache {o}/store",
        f"{PY} -m whale score --matcher keypoints --config configs/keypoints_xfeat_checked.yaml {d} --out {o}/xfeat "
        f"--cache {o}/store",
        f"{PY} -m whale train --config configs/flukes_lite0_cpu_long.yaml --fold 0 --data data/humpback "
        f"--out {o}/lite0 --trunk-cache {o}/trunk-cache --resume",
        f"{PY} -m whale score --matcher joint --config configs/joint.yaml --with-run {o}/lite0 {d} --out {o}/joint "
        f"--cache {o}/store --set check.validation=thinned --set check.columns=individuals",
        f"{PY} -m whale ensemble {o}/joint --tune --fusion logodds --tune-new-share 0.276 --out {o}/submission.csv "
        "--sample data/humpback/sample_submission.csv",
        f"{PY} -m whale ensemble {o}/sift {o}/xfeat {o}/lite0 {o}/joint --tune --fusion logodds --tune-new-share 0.276 "
        f"--thin-validation --out {o}/fused.csv --sample data/humpback/sample_submission.csv",
        f"{PY} -m whale submission check {o}/submission.csv --sample data/humpback/sample_submission.csv",
    ]
    assert printed[0] == "# recipes/flukes.yaml: 7 of 7 steps, from this folder"
    assert printed[1].startswith("# 1/7 sift: RootSIFT")
    for line in commands:  # each one is a line `whale` itself accepts, and every config it names is shipped
        words = shlex.split(line)[3:]
        tree = cli.build_parser(only=[words[0]])
        tree.parse_args(words)
        for config in [words[i + 1] for i, w in enumerate(words) if w == "--config"]:
            assert (ROOT / config).is_file(), config
    assert not (ROOT / "runs" / "best").exists()  # a dry run writes nothing


def test_a_shared_trunk_cache_is_given_to_every_network_step_and_the_default_stays_under_out(monkeypatch, capsys):
    """``--trunk-cache DIR`` (``{trunk}``) reaches each training step of a recipe that trains two networks; without
    it the lines are those of ``OUT/trunk-cache``, so a recipe run before the flag existed finds its steps done."""
    monkeypatch.chdir(ROOT)
    args = ["--data", "data/humpback", "--out", "runs/best", "--recipe", "recipes/flukes_outline.yaml", "--dry-run"]
    assert main([*args, "--trunk-cache", "runs/shared-trunk"]) == 0
    shared = [line for line in capsys.readouterr().out.splitlines() if "whale train" in line]
    assert len(shared) == 2 and all("--trunk-cache runs/shared-trunk --resume" in line for line in shared)
    assert main(args) == 0
    plain = [line for line in capsys.readouterr().out.splitlines() if "whale train" in line]
    assert plain == [line.replace("runs/shared-trunk", "runs/best/trunk-cache") for line in shared]
    assert not (ROOT / "runs" / "shared-trunk").exists()


def _commands(recipe: str) -> dict[str, list[str]]:
    """Each step of ``recipes/RECIPE`` by name, its command filled as ``--data data/humpback --out runs/best``."""
    from whale.recipe.steps import placeholder_values

    values = placeholder_values("data/humpback", "runs/best", configs=ROOT / "configs")
    return {s.name: s.command(values) for s in load_recipe(ROOT / "recipes" / recipe).steps}


def test_the_joint_recipe_fuses_the_joint_run_s_own_kinds_as_the_best_recipe_fuses_its_matchers():
    """recipes/flukes_joint.yaml: no standalone matcher run; its submission is flukes.yaml's (the joint alone), its
    other candidate fuses the joint run's thinned views of its kinds (named as configs/joint.yaml names its feature
    kinds) and of Lite0, and the joint itself, with flukes.yaml's fusion flags (its views thinned by the joint run,
    where flukes.yaml's ensemble thins its runs' own)."""
    from whale.identify.config import load_joint_config
    steps = _commands("flukes_joint.yaml")
    best = _commands("flukes.yaml")
    assert not any(w[:3] == ["score", "--matcher", "keypoints"] for w in steps.values())
    assert steps["check"] == best["check"]
    assert steps["lite0"] == best["lite0"] and steps["joint"] == best["joint"]  # the check on the thinned validation
    ensemble = cli.build_parser(only=["ensemble"])
    assert steps["submission"] == best["submission"]  # the joint alone, in both
    ours, theirs = ensemble.parse_args(steps["fused_csv"]), ensemble.parse_args(best["fused_csv"])
    joint = steps["joint"]
    kinds = load_joint_config(joint[joint.index("--config") + 1]).kinds
    assert [str(r) for r in ours.runs] == [f"runs/best/joint/thinned/{name}" for name, _ in kinds] + [
        "runs/best/joint/thinned/lite0", "runs/best/joint"]  # the views the joint run writes, and the joint itself
    assert not ours.thin_validation and theirs.thin_validation  # the joint run's views are thinned already
    differ = ("runs", "thin_validation", "out")
    assert {k: v for k, v in vars(ours).items() if k not in differ} == \
        {k: v for k, v in vars(theirs).items() if k not in differ}


def test_the_full_data_recipe_is_the_joint_recipe_with_the_test_scored_by_a_network_of_every_known_photo():
    """recipes/flukes_all.yaml: flukes_joint.yaml's steps, with a ``lite0_all`` step (the same training, ``--fold -1``,
    into its own folder, from the same trunk cache) whose test scores the joint reads (``--with-run RUN:ALL``)."""
    steps = _commands("flukes_all.yaml")
    joint = _commands("flukes_joint.yaml")
    assert list(steps) == ["lite0", "lite0_all"] + list(joint)[1:]
    assert all(steps[k] == joint[k] for k in joint if k != "joint")
    lite, full = steps["lite0"], steps["lite0_all"]
    changed = [i for i, (a, b) in enumerate(zip(lite, full)) if a != b]
    assert len(lite) == len(full) and [(lite[i], full[i]) for i in changed] == [
        (lite[lite.index("--fold") + 1], "-1"), ("runs/best/lite0", "runs/best/lite0-all")]
    at = joint["joint"].index("--with-run") + 1
    assert steps["joint"] == joint["joint"][:at] + ["runs/best/lite0:runs/best/lite0-all"] + joint["joint"][at + 1:]


def test_the_deep_recipe_is_the_joint_recipe_with_the_deeper_network_config_and_nothing_else():
    """recipes/flukes_deep.yaml: flukes_joint.yaml's steps, word for word, but the network's config, which is
    flukes_lite0_cpu_long.yaml's settings with the trunk cut at ``block6a_project_bn``."""
    from dataclasses import replace

    from whale.config import load_config
    deep = _commands("flukes_deep.yaml")
    joint = _commands("flukes_joint.yaml")
    assert list(deep) == list(joint) and all(deep[k] == joint[k] for k in joint if k != "lite0")
    at = joint["lite0"].index("--config") + 1
    assert deep["lite0"][:at] + deep["lite0"][at + 1:] == joint["lite0"][:at] + joint["lite0"][at + 1:]
    ours, theirs = load_config(deep["lite0"][at]), load_config(joint["lite0"][at])
    assert ours.trunk.layer == "block6a_project_bn" != theirs.trunk.layer
    assert replace(ours.trunk, layer=theirs.trunk.layer) == theirs.trunk
    assert replace(ours, name=theirs.name, trunk=theirs.trunk) == theirs


def test_the_deep_full_data_recipe_is_the_full_data_recipe_with_the_deep_recipe_s_config_in_both_trainings():
    """recipes/flukes_deep_all.yaml: flukes_all.yaml's steps, word for word, but both trainings' config, which is
    flukes_deep.yaml's network."""
    ours, full, deep = _commands("flukes_deep_all.yaml"), _commands("flukes_all.yaml"), _commands("flukes_deep.yaml")
    assert list(ours) == list(full) and all(ours[k] == full[k] for k in full if k not in ("lite0", "lite0_all"))
    assert ours["lite0"] == deep["lite0"]
    at = full["lite0_all"].index("--config") + 1
    assert ours["lite0_all"] == full["lite0_all"][:at] + [deep["lite0"][at]] + full["lite0_all"][at + 1:]


def test_the_outline_recipe_is_the_deep_full_data_recipe_with_the_outline_as_the_joint_s_second_source():
    """recipes/flukes_outline.yaml: flukes_deep_all.yaml's steps, word for word, with an ``outline`` step before the
    joint (``whale score --matcher outline``, the fold's and the recipe's store), its folder the joint's second
    ``--with-run`` and its thinned view among the other candidate's runs."""
    ours, deep = _commands("flukes_outline.yaml"), _commands("flukes_deep_all.yaml")
    at = list(deep).index("joint")
    assert list(ours) == list(deep)[:at] + ["outline"] + list(deep)[at:]
    assert all(ours[k] == deep[k] for k in deep if k not in ("joint", "fused_csv"))
    outline = cli.build_parser(only=["score"]).parse_args(ours["outline"])
    joint = cli.build_parser(only=["score"]).parse_args(ours["joint"])
    assert outline.matcher == "outline" and (ROOT / outline.config).is_file()
    assert (outline.fold, outline.data, outline.cache) == (joint.fold, joint.data, joint.cache)
    at = ours["joint"].index("--with-run") + 2
    assert ours["joint"] == deep["joint"][:at] + ["--with-run", str(outline.out)] + deep["joint"][at:]
    ensemble = cli.build_parser(only=["ensemble"])
    mine, theirs = ensemble.parse_args(ours["fused_csv"]), ensemble.parse_args(deep["fused_csv"])
    assert [str(r) for r in mine.runs] == [str(r) for r in theirs.runs][:-1] + [
        "runs/best/joint/thinned/outline", "runs/best/joint"]
    assert {k: v for k, v in vars(mine).items() if k != "runs"} == \
        {k: v for k, v in vars(theirs).items() if k != "runs"}


def test_the_dry_run_fills_every_placeholder_from_the_flags(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)  # outside the checkout: {configs} is the checkout's folder, absolute
    assert main(["--recipe", str(ROOT / "recipes" / "demo.yaml"), "--data", "my data", "--out", "o", "--fold", "2",
                 "--store", "/s", "--steps", "check,sift", "--dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].endswith("demo.yaml: 2 of 7 steps, from this folder")
    assert [line.split(":")[0] for line in printed if line.startswith("# ")][1:] == ["# 1/7 sift", "# 7/7 check"]
    sift = shlex.split(printed[2])
    assert sift[:4] == [sys.executable, "-m", "whale", "score"]
    assert sift[sift.index("--config") + 1] == str(ROOT / "configs" / "keypoints_demo.yaml")
    assert (sift[sift.index("--data") + 1], sift[sift.index("--fold") + 1], sift[sift.index("--cache") + 1],
            sift[sift.index("--out") + 1]) == ("my data", "2", "/s", "o/sift")
    assert shlex.split(printed[-1])[3:] == ["submission", "check", "o/submission.csv", "--sample",
                                            "my data/sample_submission.csv"]


BAD_RECIPES = [
    ("about: nothing\n", r"R\.yaml: steps: required key is missing"),
    ("steps: []\n", r"R\.yaml: steps: expected a non-empty list"),
    ("steps:\n  - {name: a, rn: whale folds}\n", r"R\.yaml: steps\[0\]\.rn: unknown key 'rn'"),
    ("steps:\n  - {name: a}\n", r"R\.yaml: steps\[0\]\.run: required key is missing"),
    ("steps:\n  - {name: Sift, run: whale folds --data d}\n", r"steps\[0\]\.name: expected a name of lowercase"),
    ("steps:\n  - {name: a, run: whale folds --data d}\n  - {name: a, run: whale folds --data e}\n",
     r"steps\[1\]\.name: 'a' names steps\[0\] already"),
    ("steps:\n  - {name: a, run: score --data d}\n", r"steps\[0\]\.run: expected a whale command line"),
    ("steps:\n  - {name: a, run: whale recipe --data d --out o}\n", r"steps\[0\]\.run: expected a whale subcommand "
                                                                    r"other than recipe and completion"),
    ("steps:\n  - {name: a, run: 'whale folds --data {dta}'}\n", r"steps\[0\]\.run: unknown placeholder \{dta\}; "
                                                                 r"expected one of \{data\}, \{out\}"),
    ("steps:\n  - {name: a, run: \"whale folds --data 'd\"}\n", r"steps\[0\]\.run: expected a command line a shell "
                                                                r"can split"),
    ("steps:\n  - {name: a, run: whale folds --data d}\nsubmission: '{out}/{nme}.csv'\n",
     r"submission: unknown placeholder \{nme\}"),
    ("steps: [a: b\n", r"R\.yaml: not valid YAML"),
    ("runs:\n  - {path: runs/x}\nthreshold: {mode: tune}\n", r"R\.yaml: an ensemble recipe .*whale ensemble --recipe"),
]


@pytest.mark.parametrize("text, message", BAD_RECIPES, ids=[m[:30] for _, m in BAD_RECIPES])
def test_a_bad_recipe_is_refused_naming_the_file_and_the_key(tmp_path, text, message):
    path = tmp_path / "R.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_recipe(path)


def data_folder(root: Path) -> Path:
    """A folder ``whale recipe`` accepts as --data (a train.csv) holding a sample and two submissions."""
    data = root / "data"
    data.mkdir()
    (data / "train.csv").write_text("Image,Id\n")
    (data / "sample_submission.csv").write_text(SAMPLE)
    (data / "first.csv").write_text(GOOD)
    (data / "second.csv").write_text(GOOD)
    return data


def checks(tmp_path, *steps: tuple[str, str]) -> Path:
    """A recipe of ``whale submission check`` steps: ``(name, the file it checks in {data}, extra flags)``."""
    lines = ["submission: '{out}/nothing.csv'", "steps:"]
    for name, target in steps:
        lines.append(f"  - {{name: {name}, run: 'whale submission check {{data}}/{target} "
                     f"--sample {{data}}/sample_submission.csv'}}")
    path = tmp_path / "checks.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def statuses(out: Path) -> dict[str, str]:
    return {r["name"]: r["status"] for r in json.loads((out / "recipe-times.json").read_text())["steps"]}


def test_steps_the_recipe_lacks_a_line_whale_refuses_and_a_missing_data_folder_are_one_line(tmp_path, capsys):
    recipe, data = checks(tmp_path, ("first", "first.csv")), data_folder(tmp_path)
    out = str(tmp_path / "out")
    assert main(["--recipe", str(recipe), "--data", str(data), "--out", out, "--steps", "first,nope,none"]) == 2
    assert f"--steps: unknown steps 'nope', 'none'; {recipe} has first" in capsys.readouterr().err
    assert main(["--recipe", str(recipe), "--data", str(tmp_path / "absent"), "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--data {tmp_path / 'absent'}: no such folder" in err and "\n" not in err
    recipe.write_text(recipe.read_text() + "  - {name: late, run: 'whale submision check {data}/x.csv'}\n")
    assert main(["--recipe", str(recipe), "--data", str(data), "--out", out]) == 2
    assert f"{recipe}: steps[1].run: whale has no subcommand 'submision'" in capsys.readouterr().err
    recipe.write_text(recipe.read_text().replace("submision check {data}/x.csv", "submission check --smaple x"))
    assert main(["--recipe", str(recipe), "--data", str(data), "--out", out]) == 2
    err = capsys.readouterr().err
    assert f"{recipe}: steps[1].run: whale submission refuses it:" in err and "--smaple" in err
    assert not (tmp_path / "out").exists()  # refused before the first step ran


def test_a_failed_step_names_itself_and_the_same_command_goes_on_from_it(tmp_path, capsys):
    recipe = checks(tmp_path, ("first", "first.csv"), ("second", "second.csv"), ("third", "second.csv"))
    data, out = data_folder(tmp_path), tmp_path / "out"
    (data / "second.csv").write_text(BAD)
    line = ["--recipe", str(recipe), "--data", str(data), "--out", str(out)]
    assert main(line) == 2
    err = capsys.readouterr().err
    assert "step 2/3 second failed with exit code 1" in err and "goes on from step second" in err
    assert "repeats label" in err  # the last lines of its log: what `whale submission check` said
    assert statuses(out) == {"first": "ran", "second": "failed (exit 1)", "third": "not run"}
    state = json.loads((out / "recipe.json").read_text())["steps"]
    assert state["first"]["done"] and not state["second"]["done"] and "third" not in state
    assert state["first"]["command"][:3] == ["submission", "check", f"{data}/first.csv"]
    assert 10 < state["first"]["peak_mb"] < 10_000 and state["first"]["seconds"] > 0
    (data / "second.csv").write_text(GOOD)
    (data / "first.csv").unlink()  # were the first step run again, it would now fail
    assert main(line) == 0
    report = capsys.readouterr()
    assert statuses(out) == {"first": "done before", "second": "ran", "third": "ran"}
    assert "step 1/3 first: done before" in report.err
    assert report.out.splitlines()[0].split() == ["step", "status", "time", "seconds", "peak", "MB"]
    logged = (out / "logs" / "second.log").read_text()
    assert logged.count("=== whale recipe") == 2 and "OK:" in logged  # the failed attempt's lines kept above


def test_a_changed_step_runs_again_with_every_step_after_it(tmp_path, capsys):
    recipe = checks(tmp_path, ("a", "first.csv"), ("b", "second.csv"), ("c", "first.csv"))
    data, out = data_folder(tmp_path), tmp_path / "out"
    line = ["--recipe", str(recipe), "--data", str(data), "--out", str(out), "--quiet"]
    assert main(line) == 0
    assert main(line) == 0
    assert statuses(out) == {"a": "done before", "b": "done before", "c": "done before"}
    recipe.write_text(recipe.read_text().replace("second.csv --sample", "second.csv --format humpback2019 --sample"))
    assert main(line) == 0
    assert statuses(out) == {"a": "done before", "b": "ran", "c": "ran"}
    assert main([*line, "--steps", "b", "--redo"]) == 0  # b again: c was made from b's output, no longer done
    assert statuses(out) == {"a": "done before", "b": "ran", "c": "not chosen"}
    assert main(line) == 0
    assert statuses(out) == {"a": "done before", "b": "done before", "c": "ran"}
    assert main([*line, "--fold", "1"]) == 0  # a placeholder's value is part of each command; none uses {fold}
    assert set(statuses(out).values()) == {"done before"}
    capsys.readouterr()


def test_the_plan_matches_the_rule_step_by_step():
    state = RecipeState(Path("unused.json"), "r", {
        "a": {"command": ["x", "1"], "done": True}, "b": {"command": ["x", "2"], "done": True},
        "c": {"command": ["x", "3"], "done": False}, "d": {"command": ["x", "4"], "done": True}})
    names, commands = ["a", "b", "c", "d"], [["x", "1"], ["x", "2"], ["x", "3"], ["x", "4"]]
    assert plan(names, commands, state, names) == [False, False, True, True]  # c unfinished: c and d run
    assert plan(names, [["x", "1"], ["x", "9"], ["x", "3"], ["x", "4"]], state, names) == [False, True, True, True]
    assert plan(names, commands, state, ["a", "d"]) == [False, False, False, False]  # d is done, c not chosen
    assert plan(names, commands, state, ["a", "d"], redo=True) == [True, False, False, True]
    assert plan(names, commands, RecipeState(Path("u"), "r"), ["b"]) == [False, True, False, False]


def test_a_state_file_that_is_not_one_is_refused_by_name(tmp_path):
    (tmp_path / "recipe.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"recipe\.json: not a recipe state file .*delete it"):
        RecipeState.load(tmp_path, "r")
    state = RecipeState.load(tmp_path / "new", "r")
    state.started("a", ["x"], ["b"])
    state.finished("a", ["x"], 1.5, 20.0)
    again = RecipeState.load(tmp_path / "new", "r")
    assert again.done("a", ["x"]) and not again.done("a", ["y"]) and again.seconds("a") == 1.5
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["recipe.json"]  # written atomically, nothing left


def test_sigterm_ends_the_running_step_and_the_same_command_goes_on(tmp_path):
    """SIGTERM reaches the recipe while its second step (a synthetic competition of 150 whales) runs."""
    recipe = checks(tmp_path, ("quick", "first.csv"), ("last", "second.csv"))
    recipe.write_text(recipe.read_text().replace("  - {name: last", "  - {name: slow, run: 'whale synth --out "
                                                 "{out}/big --ids 150 --size 96 --force --quiet'}\n  - {name: last"))
    data, out = data_folder(tmp_path), tmp_path / "out"
    line = [sys.executable, "-m", "whale", "recipe", "--recipe", str(recipe), "--data", str(data), "--out", str(out)]
    proc = subprocess.Popen(line, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300  # generous: a loaded machine starts a process slowly
    while time.monotonic() < deadline and "slow" not in _state(out):
        time.sleep(0.1)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "interrupted during step 2/3 slow" in err and "goes on from step slow" in err
    assert _state(out)["quick"]["done"] and not _state(out)["slow"]["done"]
    assert statuses(out) == {"quick": "ran", "slow": "interrupted", "last": "not run"}
    done = subprocess.run(line, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert statuses(out) == {"quick": "done before", "slow": "ran", "last": "ran"}
    assert (out / "big" / "train.csv").is_file()


def _state(out: Path) -> dict:
    try:
        return json.loads((out / "recipe.json").read_text())["steps"]
    except (OSError, ValueError):
        return {}


def test_the_display_passes_a_step_s_lines_through_and_estimates_what_is_left(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the live line is cut to the terminal's width
    log = tmp_path / "s.log"
    log.write_bytes(b"header\n")
    tail = LogTail(log, len(b"header\n"))
    stream, now = io.StringIO(), [0.0]
    display = Display(3, "lines", stream, clock=lambda: now[0])
    display.start(2, "sift", "whale score ...", tail, [100.0, 50.0])
    with open(log, "ab") as fh:
        fh.write(b"extracting\n\x1b[32mfeatures:  10%|#\r features:  90%|#########\r")
    now[0] = 30.0
    display.tick(30.0)
    assert stream.getvalue().splitlines()[-1] == "  sift | extracting"
    assert tail.latest == "features:  90%|#########"  # the bar's latest state, its escape codes removed
    now[0] = 95.0
    display.tick(95.0)  # a minute without a line: its latest state and the time left
    assert stream.getvalue().splitlines()[-1] == ("  sift | 0:01:35 (recipe 0:01:35, ~0:00:55 left): "
                                                  "features:  90%|#########")
    display.end("done in 0:01:40")
    assert stream.getvalue().splitlines()[-1] == "step 2/3 sift: done in 0:01:40"
    assert stream.getvalue().splitlines()[0] == "step 2/3 sift: whale score ... (log " + str(log) + "; ~0:02:30 left)"
    assert left_text([None, 50.0], 10.0) == ">=0:00:50 left" and left_text([None, None], 0.0) == ""
    assert clean("a\r\r  \r") == "a"
    live = io.StringIO()
    shown = Display(1, "live", live)
    shown.start(1, "x", "whale x", LogTail(log, 0), [None])
    shown.tick(1.0)
    assert live.getvalue().endswith("[1/1 x] 0:00:01 (recipe 0:00:00) | features:  90%|#########")
    quiet = io.StringIO()
    Display(1, "quiet", quiet).skipped(1, "x", "done before")
    assert quiet.getvalue() == ""
    table = times_table([{"name": "a", "status": "ran", "seconds": 61.25, "peak_mb": 1234.4},
                         {"name": "bb", "status": "not chosen", "seconds": None, "peak_mb": None}])
    assert table.splitlines() == ["step  status         time  seconds  peak MB",
                                  "a     ran         0:01:01     61.2    1,234",
                                  "bb    not chosen        -        -        -",
                                  "all               0:01:01     61.2"]


@pytest.mark.slow  # every step of the demo on a small competition: 80 s of CPU, minutes on a loaded machine
def test_the_demo_recipe_makes_a_checked_submission_and_a_rerun_the_same_bytes(tmp_path, monkeypatch, capsys):
    """Every step of recipes/demo.yaml on a tiny synthetic competition: both matchers, the network, the joint
    identification, both submissions (the joint's and the fusion's), the check; then the last three steps' records
    dropped (a kill there) and the recipe run again: the same submission, byte for byte, and the steps before them
    not run again."""
    pytest.importorskip("cv2")
    from whale.data.synth import generate
    from whale.submission import check_submission

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the steps' gradient-boosted trees: no spinning threads on 2 cores
    monkeypatch.setenv("WHALE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(ROOT)
    data = generate(tmp_path / "data", n_ids=12, seed=3, size=96, progress=False)
    out = tmp_path / "out"
    line = ["--recipe", "recipes/demo.yaml", "--data", str(data), "--out", str(out), "--quiet"]
    assert main(line) == 0
    printed = capsys.readouterr().out
    assert f"submission: {out / 'submission.csv'}" in printed
    assert set(statuses(out).values()) == {"ran"}
    assert check_submission(out / "submission.csv", data / "sample_submission.csv") == []
    assert check_submission(out / "fused.csv", data / "sample_submission.csv") == []
    assert "OK:" in (out / "logs" / "check.log").read_text()
    first = (out / "submission.csv").read_bytes(), (out / "fused.csv").read_bytes()
    state = json.loads((out / "recipe.json").read_text())
    for name in ("submission", "fused_csv", "check"):
        del state["steps"][name]
    (out / "recipe.json").write_text(json.dumps(state))
    (out / "submission.csv").unlink()
    (out / "fused.csv").unlink()
    assert main(line) == 0
    assert statuses(out) == {"sift": "done before", "xfeat": "done before", "network": "done before",
                             "joint": "done before", "submission": "ran", "fused_csv": "ran", "check": "ran"}
    assert ((out / "submission.csv").read_bytes(), (out / "fused.csv").read_bytes()) == first
    capsys.readouterr()


@pytest.mark.slow  # the network and the joint on a small competition: about a minute of CPU
@pytest.mark.parametrize("shape", ["joint", "all", "outline"])
def test_the_joint_recipe_s_shape_makes_a_checked_submission_from_the_joint_s_kinds(tmp_path, monkeypatch, capsys,
                                                                                   shape):
    """recipes/flukes_joint.yaml's shape on the demo's configs (recipes/demo.yaml without its standalone matchers, the
    joint's check on the thinned validation with each individual's columns, the submission the joint's, the other
    candidate fusing its views of the kinds and the network, and the joint): checked submissions. ``all``:
    recipes/flukes_all.yaml's, the same network trained again on every known photo (``--fold -1``) scoring the
    joint's test (``--with-run RUN:ALL``). ``outline``: recipes/flukes_outline.yaml's, the learned outline (a short
    training, photos of 128 px: at 96 the synthetic flukes give no edge) as the joint's second source."""
    pytest.importorskip("cv2")
    import yaml

    from whale.data.synth import generate
    from whale.submission import check_submission

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("WHALE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(ROOT)
    raw = yaml.safe_load((ROOT / "recipes" / "demo.yaml").read_text())
    steps = [s for s in raw["steps"] if s["name"] not in ("sift", "xfeat")]
    for s in steps:
        assert s["name"] != "joint" or s["run"].endswith(" --set check.validation=thinned --set check.columns="
                                                         "individuals")
        if s["name"] == "fused_csv":
            s["run"] = s["run"].replace("{out}/sift {out}/xfeat {out}/network {out}/joint", "{out}/joint/thinned/"
                                        "keypoints_demo {out}/joint/thinned/keypoints_xfeat_demo "
                                        "{out}/joint/thinned/network {out}/joint").replace(" --thin-validation", "")
    if shape == "all":
        at = next(i for i, s in enumerate(steps) if s["name"] == "network")
        train = steps[at]["run"].replace("--fold {fold}", "--fold -1").replace("{out}/network", "{out}/network-all")
        steps.insert(at + 1, {"name": "network_all", "about": "the same network on every known photo", "run": train})
        joint = next(s for s in steps if s["name"] == "joint")
        joint["run"] = joint["run"].replace("--with-run {out}/network", "--with-run {out}/network:{out}/network-all")
    if shape == "outline":
        at = next(i for i, s in enumerate(steps) if s["name"] == "joint")
        steps.insert(at, {"name": "outline", "about": "the learned outline", "run": "whale score --matcher outline "
                          "--data {data} --fold {fold} --out {out}/outline --cache {store} --set steps=30"})
        for s in steps:
            s["run"] = s["run"].replace("--with-run {out}/network", "--with-run {out}/network --with-run {out}/outline"
                                        ).replace("{out}/joint/thinned/network", "{out}/joint/thinned/network "
                                                  "{out}/joint/thinned/outline")
    recipe = tmp_path / "joint_demo.yaml"
    recipe.write_text(yaml.safe_dump({**raw, "steps": steps}))
    data = generate(tmp_path / "data", n_ids=12, seed=3, size=128 if shape == "outline" else 96, progress=False)
    out = tmp_path / "out"
    assert main(["--recipe", str(recipe), "--data", str(data), "--out", str(out), "--quiet"]) == 0
    assert set(statuses(out).values()) == {"ran"} and "sift" not in statuses(out)
    assert check_submission(out / "submission.csv", data / "sample_submission.csv") == []
    assert check_submission(out / "fused.csv", data / "sample_submission.csv") == []
    assert "fusion" in (out / "logs" / "fused_csv.log").read_text()
    if shape == "all":  # the test scored by the network of every known photo, the check fitted on the fold's
        meta = json.loads((out / "joint" / "run.json").read_text())
        assert meta["with_runs"] == [str(out / "network")] and meta["test_runs"] == [str(out / "network-all")]
        assert json.loads((out / "network-all" / "run.json").read_text())["fold"] == -1
    if shape == "outline":  # the outline's photos in the joint's shortlists, its thinned view fused beside it
        meta = json.loads((out / "joint" / "run.json").read_text())
        assert meta["with_runs"] == [str(out / "network"), str(out / "outline")]
        assert (out / "joint" / "thinned" / "outline" / "val.npz").is_file()
