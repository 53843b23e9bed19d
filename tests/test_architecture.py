"""The layout's rules, checked on the source: no import circle (in ``whale/`` and in ``benchmarks/``), arrows only
downwards, every module importable.

Imports are read with ``ast`` (those inside functions too: a lazy import is still an arrow of
the design). ``from whale.pkg import name`` is an arrow to the submodule ``whale.pkg.name``
when there is one, else to the package ``whale.pkg`` (its ``__init__``), which in turn points
at the submodules it re-exports.
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "whale"
BENCHMARKS = ROOT / "benchmarks"

# Lower layers never import higher ones (docs/ARCHITECTURE.md draws the same picture).
LAYERS = {
    "whale": 0,  # the top-level modules: command, imagesize, metrics, baseline, submission, formats
    "whale.core": 0,  # errors, files, arrays, progress
    "whale.config": 0,  # the run config's schema, objectives, homography, inputs, overrides, checker, doc
    "whale.data": 1,
    "whale.ranking": 1,
    "whale.models": 2,
    "whale.duplicates": 2,  # perceptual hashes of the competition's images (uses whale.data)
    "whale.objectives": 2.5,  # losses, embedding heads and their scorers (uses whale.models)
    "whale.mining": 3,
    "whale.boxes": 3,
    "whale.inference": 4,
    "whale.identify": 4.5,  # one identification from every source's evidence (whale score --matcher joint)
    "whale.outline": 4.5,  # the trailing edge's outline, learned (whale score --matcher outline; uses inference)
    "whale.keypoints": 3.5,  # the training-free keypoint matcher (uses whale.data); its score files: whale.inference.keypoints
    "whale.training": 5,
    "whale.ensemble": 5,
    "whale.explain": 5,
    "whale.kaggle": 6,
    "whale.demo": 6,
    "whale.pseudo": 6,  # pseudo-label rounds (score files averaged by whale.ensemble)
    "whale.catalogue": 6,  # a catalogue of individuals: matching new batches, the review page (uses whale.explain)
    "whale.recipe": 6,  # a recipe of whale commands run as one (each step a process: it imports no layer above 0)
}

# Entry points above every layer: `whale SUBCOMMAND` dispatches to each package's command, so
# whale.cli may point at any module, but only lazily (imports inside functions: `whale --help`
# loads no package), and no module of whale points at an entry point.
ENTRY_POINTS = {"whale.cli", "whale.__main__", "whale.inference.__main__", "whale.recipe.__main__"}
"""``whale.inference.__main__`` is ``python -m whale.inference`` (``whale score``), whose ``--matcher joint`` and
``--matcher outline`` reach whale.identify and whale.outline above it, lazily; ``whale.recipe.__main__`` (``whale recipe``) checks each step's line with whale.cli's
parser tree, lazily."""


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(package.rglob("*.py"))}


def _graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: modules of the same package it imports}`` of ``package`` (``whale`` or ``benchmarks``)."""
    modules = _modules(package)
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            for t in targets:
                if t.split(".")[0] == package.name and t in modules and t != name:
                    edges.add(t)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _layer(module: str) -> tuple[str, int]:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return prefix, LAYERS[prefix]
    raise AssertionError(f"{module}: not in any layer")


def test_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, f"import circles: {cycles}"


def test_no_import_cycles_in_benchmarks():
    graph = _graph(BENCHMARKS)
    cycles = _cycles(graph)
    assert not cycles, f"import circles in benchmarks/: {cycles}"
    # what the fluke benchmarks share lives in one module that imports none of them
    shared = "benchmarks.flukes.shared"
    assert graph[shared] <= {"benchmarks", "benchmarks.common"}, graph[shared]
    users = {m for m, edges in graph.items() if shared in edges}
    assert {"benchmarks.flukes.humpback", "benchmarks.flukes.humpback_runs", "benchmarks.flukes.humpback_pack",
            "benchmarks.gpu.gpu_flukes"} <= users, sorted(users)
    assert "benchmarks.common" in graph["benchmarks.flukes.humpback"]  # the graph sees `from benchmarks import common`


def test_imports_only_point_to_the_same_or_a_lower_layer():
    bad = []
    for module, edges in _graph().items():
        if module in ENTRY_POINTS:
            continue  # test_entry_points_import_lazily_and_nothing_imports_them
        pkg, level = _layer(module)
        for target in edges:
            tpkg, tlevel = _layer(target)
            # Layer 0 is one layer in packages (whale.core, whale.config and whale's top-level modules): they
            # may use each other, test_no_import_cycles keeps them out of a circle.
            if tpkg != pkg and tlevel >= level and not (level == tlevel == 0):
                bad.append(f"{module} -> {target}")
    assert not bad, "imports against the layers of docs/ARCHITECTURE.md: " + "; ".join(sorted(bad))


def _top_level_imports(path: Path) -> set[str]:
    """Modules of whale imported at module level (not inside a function) by the file at ``path``."""
    found = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name.split(".")[0] == "whale"}


def test_entry_points_import_lazily_and_nothing_imports_them():
    modules, graph = _modules(), _graph()
    assert _top_level_imports(modules["whale.cli"]) <= {"whale"}, "whale.cli: imports a package at module level"
    assert _top_level_imports(modules["whale.__main__"]) == {"whale.cli"}
    users = sorted(f"{m} -> {t}" for m, edges in graph.items() if m not in ENTRY_POINTS
                   for t in edges if t in ENTRY_POINTS)
    assert not users, f"modules importing an entry point: {users}"
    # whale.cli reaches its commands through importlib, by name: every name is a module of the package.
    from whale.cli import COMMANDS

    assert {c.module for c in COMMANDS} <= set(modules), "whale.cli names a module that does not exist"


def test_every_layer_is_listed_and_every_module_is_in_one():
    for module in _modules():
        _layer(module)  # raises for a module outside the layers
    packages = {m for m, p in _modules().items() if p.name == "__init__.py"}
    assert packages <= set(LAYERS), f"packages without a layer: {sorted(packages - set(LAYERS))}"


def test_every_module_imports_in_a_fresh_interpreter():
    names = sorted(_modules())
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\nprint('ok')"
    res = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]


def test_no_module_is_over_450_lines_unless_listed():
    # One concept per module; a module listed here says in its docstring why it is one concept (none now).
    allowed = set()
    long = {m: len(p.read_text().splitlines()) for m, p in _modules().items()}
    over = {m: n for m, n in long.items() if n > 450 and m not in allowed}
    assert not over, f"modules over 450 lines: {over}"


def test_the_catalogue_s_sql_lives_in_db_and_sql_only():
    # whale.catalogue.db: connection, schema, transactions; whale.catalogue.sql: every statement by name.
    statement = re.compile(r"\b(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b")
    found = {m: [i for i, line in enumerate(p.read_text().splitlines(), 1) if statement.search(line)]
             for m, p in _modules().items() if m.startswith("whale.catalogue.")
             and m not in ("whale.catalogue.db", "whale.catalogue.sql")}
    assert not {m: lines for m, lines in found.items() if lines}, "SQL outside whale.catalogue.db/sql"


def test_the_catalogue_s_inserts_name_their_columns():
    positional = re.compile(r"INSERT (OR \w+ )?INTO \w+ VALUES")
    for m in ("whale.catalogue.db", "whale.catalogue.sql"):
        text = _modules()[m].read_text()
        lines = [line for line in text.splitlines() if positional.search(line)]
        assert not lines, f"{m}: INSERT without column names: {lines}"


def _name_dispatch(path: Path, names: set[str]) -> list[str]:
    """Comparisons of an objective's name (``name``, ``self.name``, ``cfg.objective.name``, ``objective``, ...) with a
    name in ``names``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        literals = {c.value for o in operands for c in ([o] if isinstance(o, ast.Constant) else getattr(o, "elts", []))
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        asks = any(re.search(r"objective|\bcfg\b|^(self\.)?name$", ast.unparse(o)) for o in operands
                   if not isinstance(o, (ast.Constant, ast.Tuple, ast.List, ast.Set)))
        if literals & names and asks:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_dispatch_on_objective_names_outside_the_registry():
    # An objective is one module of whale/objectives registered by name: nothing asks `if name == "triplet"`.
    from whale.config.objectives import objective_modules, objective_names

    names = set(objective_names())
    assert {"head", "triplet", "arcface"} <= names
    registry = {_modules()[m] for m in ("whale.objectives.registry", *objective_modules())}
    planted = ROOT / "tests" / "test_architecture.py"
    found = [line for p in [*_modules().values(), ROOT / "run_fold.py", ROOT / "ensemble.py"] if p not in registry
             for line in _name_dispatch(p, names)]
    assert not found, "dispatch on objective names outside the registry: " + "; ".join(found)
    assert _name_dispatch(planted, {"planted"}) == [f"tests/test_architecture.py:{_PLANTED}: self.name == 'planted'"]


def _planted_dispatch(self):  # the rule's own check: one comparison it must find
    return self.name == "planted"


_PLANTED = _planted_dispatch.__code__.co_firstlineno + 1
