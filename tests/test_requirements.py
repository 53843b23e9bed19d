"""Pinned means pinned: every distribution the requirements file pulls in is pinned in it.

Runs in whichever virtualenv runs the tests: `.venv` checks `requirements.txt`, the Kaggle
rehearsal (`make test-kaggle`, `.venv-kaggle`, ``WHALE_KAGGLE_ENV=1``) checks `requirements-kaggle.txt`.
The closure is read from the installed distributions' metadata (``Requires-Dist`` with markers
evaluated here), so extra packages installed by hand are not blamed on the file.
"""
import os
import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
KAGGLE_ENV = os.environ.get("WHALE_KAGGLE_ENV") == "1"
REQUIREMENTS = ROOT / ("requirements-kaggle.txt" if KAGGLE_ENV else "requirements.txt")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> dict[str, str]:
    """``{normalised name: version}`` of the ``name==version`` lines; anything else is an error."""
    pins = {}
    for i, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", line)
        assert m, f"{path.name}:{i}: expected NAME==VERSION, received {line!r}"
        pins[_norm(m[1])] = m[2]
    return pins


def closure(names) -> dict[str, str]:
    """``{name: installed version}`` of ``names`` and everything they require, recursively."""
    seen, todo = {}, list(names)
    while todo:
        name = _norm(todo.pop())
        if name in seen:
            continue
        dist = metadata.distribution(name)
        seen[name] = dist.version
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def test_every_distribution_pulled_in_is_pinned_at_its_installed_version():
    pins = read_pins(REQUIREMENTS)
    installed = closure(pins)
    unpinned = sorted(f"{n}=={v}" for n, v in installed.items() if n not in pins)
    assert not unpinned, f"{REQUIREMENTS.name}: pulled in but not pinned: {', '.join(unpinned)}"
    wrong = sorted(f"{n}: pinned {pins[n]}, installed {v}" for n, v in installed.items() if pins[n] != v)
    assert not wrong, f"{REQUIREMENTS.name}: {'; '.join(wrong)}"


def test_keras_cv_is_not_required_and_never_imported():
    """Dropped: nothing imports it and it drags unpinned keras-core, tensorflow-datasets, kagglehub."""
    assert "keras-cv" not in read_pins(ROOT / "requirements.txt")
    hits = [p for p in (ROOT / "whale").rglob("*.py") if re.search(r"^\s*(import|from)\s+keras_cv", p.read_text(), re.M)]
    assert not hits, hits


def test_the_kaggle_rehearsal_has_no_lap():
    """Kaggle's image has no lap: the rehearsal must mine without it (skipped in .venv)."""
    import importlib.util

    if not KAGGLE_ENV:
        pytest.skip("only in the Kaggle rehearsal (WHALE_KAGGLE_ENV=1)")
    assert importlib.util.find_spec("lap") is None, "lap is installed in the Kaggle rehearsal's venv"
