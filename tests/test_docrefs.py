"""Every ``:mod:``/``:func:``/``:class:`` reference in the docstrings and docs names something in the tree.

The references are resolved on the source, without importing it (importing the models would load
the backend): ``whale.a.b`` is a module when ``whale/a/b.py`` or ``whale/a/b/__init__.py`` exists
now, ``whale.a.b.name`` a name that module defines or imports (a class's method as
``Class.method``), and an unqualified ``name`` is looked up in the module whose docstring holds
it. So references to modules added later (``whale.objectives`` after its merge) pass exactly when
those modules are in the tree. References outside the toolkit (``numpy.savez``) are not checked.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REF = re.compile(r":(mod|func|class):`~?([A-Za-z_][\w.]*)(?:\(\))?`")
SOURCES = sorted(ROOT.glob("whale/**/*.py")) + sorted(ROOT.glob("*.py")) + sorted(ROOT.glob("benchmarks/**/*.py"))
DOCS = sorted(ROOT.glob("docs/*.md"))


def _module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=None)
def _names(path: Path) -> dict[str, ast.AST | None]:
    """Names a module defines (top level: functions, classes, assignments) or imports anywhere."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: dict[str, ast.AST | None] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        names[n.id] = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.setdefault((alias.asname or alias.name).split(".")[0], None)
    return names


def _in_class(node: ast.AST | None, attrs: list[str]) -> bool:
    for attr in attrs:
        if not isinstance(node, ast.ClassDef):
            return False
        members = {n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
        members.update({t.id: None for n in node.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                        for t in ast.walk(n.targets[0] if isinstance(n, ast.Assign) else n.target)
                        if isinstance(t, ast.Name)})
        if attr not in members:
            return False
        node = members[attr]
    return True


def resolves(kind: str, target: str, context: str | None) -> bool:
    """Whether ``target`` names a module (``kind == "mod"``) or a name in the tree; ``context``:
    the dotted module the reference sits in (unqualified names are looked up there)."""
    parts = target.split(".")
    if parts[0] not in ("whale", "benchmarks"):  # the toolkit and its benchmarks are in the tree
        if context is None or len(parts) > 2:
            return True  # outside the toolkit
        path = _module_file(context)
        if path is None or parts[0] not in _names(path):
            return False
        return len(parts) == 1 or _in_class(_names(path)[parts[0]], parts[1:]) or _names(path)[parts[0]] is None
    if kind == "mod":
        return _module_file(target) is not None
    for cut in range(len(parts) - 1, 0, -1):
        path = _module_file(".".join(parts[:cut]))
        if path is None:
            continue
        rest = parts[cut:]
        names = _names(path)
        if rest[0] not in names:
            return False
        return len(rest) == 1 or names[rest[0]] is None or _in_class(names[rest[0]], rest[1:])
    return False


def _references():
    for path in SOURCES + DOCS:
        rel = path.relative_to(ROOT)
        context = ".".join(rel.with_suffix("").parts) if path.suffix == ".py" else None
        if context and context.endswith(".__init__"):
            context = context[: -len(".__init__")]
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for kind, target in REF.findall(line):
                yield f"{rel}:{lineno}", kind, target.rstrip("."), context


def test_every_doc_reference_resolves():
    refs = list(_references())
    assert len(refs) > 100  # the scan sees the docstrings
    broken = [f"{where}: :{kind}:`{target}`" for where, kind, target, context in refs
              if not resolves(kind, target, context)]
    assert broken == [], "references to nothing in the tree:\n" + "\n".join(broken)


def test_the_resolver_tells_real_references_from_moved_ones():
    assert resolves("mod", "whale.data.synth", None)
    assert resolves("func", "whale.core.files.atomic_write", None)
    assert resolves("class", "whale.data.ImageSet", None)  # re-exported by the package
    assert resolves("func", "whale.models.scorer.HeadScorer.matrix", None)
    assert not resolves("mod", "whale.synth", None)
    assert not resolves("func", "whale.train.train_fold", None)
    assert not resolves("func", "whale.core.files.no_such_function", None)
    assert resolves("func", "atomic_write", "whale.core.files") and not resolves("func", "nothing_here", "whale.core.files")


def test_every_test_named_in_the_bad_inputs_catalogue_exists():
    """docs/bad-inputs.md: each ``file.py::name`` (and a bare ``name`` after it, same file) is a test."""
    missing = []
    for line in (ROOT / "docs" / "bad-inputs.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            continue
        current = None
        for token in re.findall(r"`([^`]+)`", line.rsplit("|", 2)[-2]):
            file, _, name = token.rpartition("::") if "::" in token else (None, "", token)
            if file:
                current = ROOT / "tests" / Path(file).name
            if not re.fullmatch(r"test_\w+", name or "") or current is None:
                continue
            if not current.is_file() or not re.search(rf"^def {name}\(", current.read_text(), re.M):
                missing.append(f"{current.name}::{name}")
    assert missing == []
