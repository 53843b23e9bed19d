"""The `whale` command (whale/cli.py): one parser tree whose subcommands are their entry points' flags
(the same add_arguments), help loads no Keras, --debug anywhere, backend start-up logs quiet."""
import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from whale import cli

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_help_lists_the_journey_in_order_and_imports_no_keras():
    res = _run("import sys\nfrom whale.cli import main\nstatus = main(['--help'])\n"
               "print('LOADED', sorted(m for m in ('keras', 'tensorflow', 'jax', 'torch') if m in sys.modules))\n"
               "sys.exit(status)")
    assert res.returncode == 0, res.stderr
    assert "LOADED []" in res.stdout, res.stdout
    listed = [line.split()[0] for line in res.stdout.split("in order:\n")[1].split("\n\n")[0].splitlines()]
    assert listed == [c.name for c in cli.COMMANDS]
    order = ["synth", "folds", "boxes", "train", "score", "ensemble", "submission"]  # Kaggle's folder -> a CSV
    assert [n for n in listed if n in order] == order
    for name in ("train", "score", "ensemble", "boxes", "explain", "duplicates", "pseudo", "kernels", "synth",
                 "folds", "submission"):
        assert name in cli.BY_NAME, name


def test_python_dash_m_whale_is_the_same_command():
    res = subprocess.run([sys.executable, "-m", "whale", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == cli.help_text().strip(), res.stderr


def _usage_and_rest(help_text: str, prog: str) -> tuple[str, str]:
    """(the usage paragraph with ``prog`` in place of the program and argparse's wrapping undone, the rest)."""
    usage, _, rest = help_text.partition("\n\n")
    assert usage.startswith(f"usage: {prog} "), usage
    return " ".join(usage.removeprefix(f"usage: {prog} ").split()), rest


@pytest.mark.parametrize("command", cli.COMMANDS, ids=lambda c: c.name)
def test_each_subcommand_is_its_entry_points_main_with_the_same_flags(command, capsys):
    """`whale NAME --help` prints exactly what the entry point it equals prints, under the name `whale NAME`."""
    with pytest.raises(SystemExit) as via_whale:
        cli.main([command.name, "--help"])
    ours = capsys.readouterr().out
    with pytest.raises(SystemExit) as direct:
        cli.command_main(command.name)(["--help"])
    theirs = capsys.readouterr().out
    assert via_whale.value.code == direct.value.code == 0
    parser = cli.command_parser(command.name)
    assert _usage_and_rest(ours, f"whale {command.name}") == _usage_and_rest(theirs, parser.prog) and "--" in ours
    assert parser.prog in command.same_as, (parser.prog, command.same_as)


def test_the_console_scripts_and_whale_name_the_same_functions():
    text = PYPROJECT.read_text()
    assert 'whale = "whale.cli:main"' in text
    for c in cli.COMMANDS:
        if c.name != "demo":  # make demo's command has no whale-* script
            assert f'"{c.module}:main"' in text, f"{PYPROJECT}: no whale-* script for {c.module}"


def test_a_subcommand_runs_and_returns_its_status(tmp_path, capsys):
    sample = tmp_path / "sample_submission.csv"
    sample.write_text("Image,Id\na.jpg,new_whale w_1 w_2 w_3 w_4\nb.jpg,new_whale w_1 w_2 w_3 w_4\n")
    good = tmp_path / "good.csv"
    good.write_text("Image,Id\na.jpg,w_1 new_whale w_2 w_3 w_4\nb.jpg,w_5 w_1 new_whale w_2 w_3\n")
    assert cli.main(["submission", "check", str(good), "--sample", str(sample)]) == 0
    assert "OK" in capsys.readouterr().out
    bad = tmp_path / "bad.csv"
    bad.write_text("Image,Id\na.jpg,w_1 w_1\n")
    assert cli.main(["submission", "check", str(bad), "--sample", str(sample)]) == 1


def test_an_unknown_subcommand_is_one_line_and_status_2(capsys):
    assert cli.main(["trian", "--fold", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("whale: error: unknown subcommand 'trian'") and "train" in err and "\n" not in err


def test_a_command_s_parser_parses_without_running_and_rejects_unknown_flags(capsys):
    parser = cli.command_parser("train")
    args = parser.parse_args(["--config", "configs/demo.yaml", "--fold", "1", "--data", "d", "--out", "runs/x",
                              "--resume"])
    assert (args.config, args.fold, args.out, args.resume) == ("configs/demo.yaml", 1, "runs/x", True)
    assert not (ROOT / "runs" / "x").exists()
    with pytest.raises(SystemExit) as bad:
        parser.parse_args(["--config", "configs/demo.yaml", "--flod", "1"])
    assert bad.value.code == 2 and "--flod" in capsys.readouterr().err
    assert "--code-dataset" in cli.flags(cli.command_parser("kernels"))["make"]


def test_bash_completion_knows_subcommands_and_flags_and_loads_no_keras():
    res = _run("import sys\nfrom whale.cli import main\nmain(['completion', 'bash'])\n"
               "print('LOADED', sorted(m for m in ('keras', 'tensorflow', 'jax') if m in sys.modules))")
    assert res.returncode == 0, res.stderr
    script, loaded = res.stdout.rsplit("LOADED", 1)
    assert loaded.strip() == "[]"
    train = next(line for line in script.splitlines() if line.strip().startswith("train)"))
    assert "--config" in train and "--resume" in train
    kernels = next(line for line in script.splitlines() if line.strip().startswith("kernels)"))
    assert "make" in kernels and "--code-dataset" in kernels
    if shutil.which("bash"):
        check = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
        assert check.returncode == 0, check.stderr


def _tree_flags(parser: argparse.ArgumentParser) -> dict:
    """Every (sub)parser's option strings, nested subcommands by their path."""
    from whale import command

    out = {(): sorted(o for a in parser._actions for o in a.option_strings)}
    for name, sub in command.subparsers(parser).items():
        out |= {(name, *path): flags for path, flags in _tree_flags(sub).items()}
    return out


def test_the_tree_holds_each_entry_point_s_parser_and_whale_s_own_flags():
    from whale import command

    tree = command.subparsers(cli.build_parser())
    assert list(tree) == [c.name for c in cli.COMMANDS] + ["completion"]
    for c in cli.COMMANDS:
        assert _tree_flags(tree[c.name]) == _tree_flags(cli.command_parser(c.name)), c.name
        assert tree[c.name].prog == f"whale {c.name}"
    assert tree["catalogue"].prog == "whale catalogue" and "add" in command.subparsers(tree["catalogue"])
    assert command.subparsers(tree["catalogue"])["add"].prog == "whale catalogue add"


@pytest.mark.parametrize("argv", [["--debug", "catalogue", "status", "CAT"], ["catalogue", "--debug", "status", "CAT"],
                                  ["catalogue", "status", "CAT", "--debug"], ["catalogue", "status", "CAT"]])
def test_debug_is_global_and_counts_anywhere(argv):
    args = cli.build_parser(only=["catalogue"]).parse_args(argv)
    assert args.debug is ("--debug" in argv) and args.catalogue == "CAT"


def test_a_flag_only_the_mode_knows_is_refused_by_the_subcommand(capsys):
    with pytest.raises(SystemExit) as bad:
        cli.main(["train", "--config", "configs/demo.yaml", "--fold", "0", "--data", "d"])
    err = capsys.readouterr().err
    assert bad.value.code == 2 and "whale train: error: the following arguments are required: --out" in err
    with pytest.raises(SystemExit):
        cli.main(["catalogue", "status", "CAT", "--frob"])
    assert "whale catalogue status: error: unrecognized arguments: --frob" in capsys.readouterr().err


def test_bad_input_through_whale_is_one_line_naming_the_subcommand(tmp_path, capsys):
    assert cli.main(["catalogue", "status", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("whale catalogue: error: ") and "\n" not in err


def test_quiet_backend_sets_the_log_level_unless_debug(monkeypatch):
    from whale import command

    seen = []
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.delenv(command.DEBUG_ENV, raising=False)
    parser = command.parser("tool", lambda p: None)
    run = lambda args: seen.append(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))  # noqa: E731
    assert command.execute(run, parser.parse_args(["--debug"]), "tool") == 0
    monkeypatch.setenv(command.DEBUG_ENV, "1")
    assert command.execute(run, parser.parse_args([]), "tool") == 0
    monkeypatch.setenv(command.DEBUG_ENV, "0")
    assert command.execute(run, parser.parse_args([]), "tool") == 0
    assert seen == [None, None, "2"]
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")  # the user's own level is kept
    assert command.execute(run, parser.parse_args([]), "tool") == 0 and seen[-1] == "0"


def test_scripts_outside_the_tree_are_quiet_unless_whale_debug(monkeypatch):
    from whale import command

    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.setenv(command.DEBUG_ENV, "1")
    command.quiet_unless_debugging()
    assert "TF_CPP_MIN_LOG_LEVEL" not in os.environ
    monkeypatch.delenv(command.DEBUG_ENV)
    command.quiet_unless_debugging()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "2"


def test_a_command_s_backend_start_up_logs_are_quiet():
    code = ("import sys\nfrom whale import command\n"
            "def run(args):\n    import tensorflow as tf\n    print('ran', int(tf.constant(1) + 1))\n"
            "sys.exit(command.main('tool', lambda p: None, run, []))")
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "WHALE_DEBUG")}
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**env, "KERAS_BACKEND": "tensorflow", "CUDA_VISIBLE_DEVICES": ""})
    if res.returncode != 0 and "No module named 'tensorflow'" in res.stderr:
        pytest.skip("TensorFlow is not installed")
    assert res.returncode == 0 and res.stdout.strip() == "ran 2", res.stderr
    assert res.stderr == "", res.stderr


def test_tensorflow_s_pre_logging_lines_are_filtered_and_the_rest_kept(capfd):
    """What ``port.cc`` prints on CPUs with AVX-512 before TF_CPP_MIN_LOG_LEVEL applies goes; errors and any
    other line written to file descriptor 2 stay, in order; INFO-level lines stay when the level asks for them."""
    from whale import command

    noise = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
             "I0000 00:00:1795764669.463146   12314 port.cc:153] oneDNN custom operations are on.\n")
    with command._filtered_stderr(command._tf_noise("2")):
        os.write(2, (noise + "E0000 00:00:1.5   7 x.cc:9] a real error\nkept line\n").encode())
    assert capfd.readouterr().err == "E0000 00:00:1.5   7 x.cc:9] a real error\nkept line\n"
    with command._filtered_stderr(command._tf_noise("0")):
        os.write(2, noise.encode())
    assert capfd.readouterr().err.count("\n") == 1  # the INFO line kept at level 0


def test_every_command_module_is_add_arguments_and_run_and_builds_no_parser_of_its_own():
    for c in cli.COMMANDS:
        path = ROOT / (c.module.replace(".", "/") + ".py")
        assert "ArgumentParser(" not in path.read_text(), f"{path}: parsers are built by whale.command / whale.cli"
        module = cli.command_module(c.name)
        missing = [name for name in ("PROG", "add_arguments", "run", "main") if not hasattr(module, name)]
        assert not missing, f"{c.module}: lacks {missing}"
