"""The `whale` command (whale/cli.py): each subcommand is its entry point's main, help loads no Keras."""
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


@pytest.mark.parametrize("command", cli.COMMANDS, ids=lambda c: c.name)
def test_each_subcommand_is_its_entry_points_main_with_the_same_flags(command, capsys):
    """`whale NAME --help` prints exactly what the entry point it equals prints."""
    with pytest.raises(SystemExit) as via_whale:
        cli.main([command.name, "--help"])
    ours = capsys.readouterr().out
    with pytest.raises(SystemExit) as direct:
        cli.command_main(command.name)(["--help"])
    theirs = capsys.readouterr().out
    assert via_whale.value.code == direct.value.code == 0
    assert ours == theirs and "--" in ours
    parser, _ = cli.parse_only(cli.command_main(command.name), [], parse=False)
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


def test_parse_only_parses_without_running_and_rejects_unknown_flags(capsys):
    main = cli.command_main("train")
    _, args = cli.parse_only(main, ["--config", "configs/demo.yaml", "--fold", "1", "--out", "runs/x", "--resume"])
    assert (args.config, args.fold, args.out, args.resume) == ("configs/demo.yaml", 1, "runs/x", True)
    assert not (ROOT / "runs" / "x").exists()
    with pytest.raises(SystemExit) as bad:
        cli.parse_only(main, ["--config", "configs/demo.yaml", "--flod", "1"])
    assert bad.value.code == 2 and "--flod" in capsys.readouterr().err
    kernels, _ = cli.parse_only(cli.command_main("kernels"), [], parse=False)
    assert "--code-dataset" in cli.flags(kernels)["make"]


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
