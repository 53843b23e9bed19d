"""pyproject.toml: `pip install .` gives the package (every subpackage) and its console scripts."""

import configparser
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pip_install_puts_every_package_and_the_console_scripts_in_place(tmp_path):
    # A copy of the project, so the in-tree build leaves nothing in the checkout.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (src / name).write_bytes((ROOT / name).read_bytes())
    subprocess.run(["cp", "-r", str(ROOT / "whale"), str(src / "whale")], check=True)
    target = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                          "--no-build-isolation", "--target", str(target), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    packages = sorted(p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "whale").rglob("__init__.py"))
    for pkg in packages:
        assert (target / pkg / "__init__.py").is_file(), pkg
    (dist,) = target.glob("whale-*.dist-info")
    entry_points = configparser.ConfigParser()
    entry_points.read(dist / "entry_points.txt")
    scripts = dict(entry_points["console_scripts"])
    assert scripts["whale-train"] == "whale.training.cli:main"
    assert scripts["whale-ensemble"] == "whale.ensemble.cli:main"
    # Every console script points at a function that exists.
    code = ("import importlib, sys\nfor ref in sys.argv[1:]:\n    mod, fn = ref.split(':')\n"
            "    assert callable(getattr(importlib.import_module(mod), fn)), ref\nprint('ok')")
    res = subprocess.run([sys.executable, "-c", code, *scripts.values()], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]
