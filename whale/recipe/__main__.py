"""Run a recipe, the commands from a competition folder to a checked submission, as one: ``python -m whale.recipe``.

Example:
    whale recipe --data data/humpback --out runs/best                 # recipes/flukes.yaml: the best on real flukes
    whale recipe --data data/humpback --out runs/best --dry-run       # its commands, to run by hand
    whale recipe --data data/recipe-demo --out runs/recipe-demo --recipe recipes/demo.yaml

Each step of the recipe (a YAML file: :mod:`whale.recipe.steps`) is a ``whale`` command line run as a process of its
own under this Python, its output in ``OUT/logs/STEP.log``. A step that exits 0 is done: ``OUT/recipe.json`` records
it with its command, so the same ``whale recipe`` line after a kill or a failure goes on from the first step not done,
and a step whose command changed (another recipe, ``--data``, ``--fold``, ...) runs again with every step after it
(:mod:`whale.recipe.state`). ``--steps a,b`` runs only those; ``--redo`` runs them even when done; ``--dry-run``
prints the exact commands. Every step's line is checked with ``whale``'s own parsers before the first one runs. At
the end: a table of each step's time and peak memory (also ``OUT/recipe-times.json``).

Exit status: 0 when every chosen step is done, 2 on bad input or a failed step (one line naming it, after the last
lines of its log), 130 after Ctrl-C or SIGTERM (the running step ended as on its own Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import signal
import sys
from pathlib import Path

from whale import command

PROG = "python -m whale.recipe"


def main(argv=None) -> int:
    """``python -m whale.recipe``; 2 on bad input (:func:`whale.command.main`)."""
    return command.main(PROG, add_arguments, run, argv)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``python -m whale.recipe`` and ``whale recipe`` (:mod:`whale.command`)."""
    p.description, p.formatter_class = __doc__, argparse.RawDescriptionHelpFormatter
    p.add_argument("--data", required=True, help="Kaggle-format competition folder ({data})")
    p.add_argument("--out", required=True, help="the recipe's folder: each step's output, logs/, recipe.json ({out})")
    p.add_argument("--recipe", default=None,
                   help="recipe YAML (default: recipes/flukes.yaml, the best submission on real flukes)")
    p.add_argument("--fold", type=int, default=0, help="validation fold of the steps ({fold}; default 0)")
    p.add_argument("--store", default=None, help="keypoint feature store ({store}; default OUT/store)")
    p.add_argument("--trunk-cache", default=None,
                   help="the networks' trunk maps ({trunk}; default OUT/trunk-cache): kept by photo content, so "
                        "recipes and split seeds on the same photos may share one")
    p.add_argument("--configs", default=None, help="the configs folder ({configs}; default the toolkit's configs/)")
    p.add_argument("--steps", default=None, metavar="A,B", help="run only these steps (comma-separated names)")
    p.add_argument("--redo", action="store_true", help="run the chosen steps even when done with the same command")
    p.add_argument("--dry-run", action="store_true", help="print the exact commands (shell-quoted); run nothing")
    p.add_argument("--quiet", action="store_true", help="no progress; only the closing table and errors")


def check_lines(recipe, values: dict[str, str]) -> None:
    """Parse every step's line with ``whale``'s own parser tree (as ``whale X ...`` would, running nothing).

    Raises:
        ConfigError: naming the recipe file, the step's key and what ``whale`` refused.
    """
    from whale import cli  # lazily: this module is an entry point above every layer (tests/test_architecture.py)
    from whale.core.errors import ConfigError

    for i, step in enumerate(recipe.steps):
        words = step.command(values)
        if step.subcommand not in cli.BY_NAME:
            raise ConfigError(f"{recipe.source}: steps[{i}].run: whale has no subcommand {step.subcommand!r}; "
                              f"expected one of {', '.join(c.name for c in cli.COMMANDS if c.name != 'recipe')}")
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
                cli.build_parser(only=[step.subcommand]).parse_args(words)
        except SystemExit:
            lines = [line for line in said.getvalue().splitlines() if line.strip()]
            why = next((line.split("error: ", 1)[1] for line in reversed(lines) if "error: " in line),
                       lines[-1] if lines else "it prints its help")
            raise ConfigError(f"{recipe.source}: steps[{i}].run: whale {step.subcommand} refuses it: {why}") from None


def _check_inputs(args: argparse.Namespace, recipe, values: dict[str, str]) -> None:
    """A data folder with ``train.csv``, a ``{configs}`` folder where a step names it, an ``--out`` that can be
    written: refused before any step runs."""
    from whale.core.errors import ConfigError, MissingFileError
    from whale.core.files import check_output

    data = Path(args.data)
    if not data.is_dir():
        raise MissingFileError(f"--data {data}: no such folder (expected a Kaggle-format competition folder: "
                               "train.csv, train/, test/)")
    if not (data / "train.csv").is_file():
        raise MissingFileError(f"--data {data}: no train.csv in it (expected a Kaggle-format competition folder)")
    if any("{configs}" in w for s in recipe.steps for w in s.words) and not Path(values["configs"]).is_dir():
        raise ConfigError(f"--configs {values['configs']}: no such folder; {recipe.source}'s steps read their "
                          "configs from it (give the toolkit's configs/ folder)")
    check_output(args.out, "--out", folder=True)


def run(args: argparse.Namespace) -> int:
    """The recipe ``args`` describe; raises :class:`whale.core.errors.WhaleError` on bad input or a failed step."""
    from whale.core.errors import ConfigError
    from whale.recipe.cook import cook, dry_run
    from whale.recipe.display import Display
    from whale.recipe.runner import Terminated
    from whale.recipe.steps import default_recipe, load_recipe, placeholder_values

    path = Path(args.recipe) if args.recipe is not None else default_recipe()
    if args.recipe is None and not path.is_file():
        raise ConfigError(f"no --recipe given and no {path} (an installed wheel holds no recipes/): give --recipe FILE")
    recipe = load_recipe(path)
    chosen = recipe.chosen(args.steps)
    values = placeholder_values(args.data, args.out, args.fold, args.store, args.configs, args.trunk_cache)
    check_lines(recipe, values)
    if args.dry_run:
        print(dry_run(recipe, values, chosen))
        return 0
    _check_inputs(args, recipe, values)

    def terminated(signum, frame):
        raise Terminated("terminated (SIGTERM)")

    before = signal.signal(signal.SIGTERM, terminated)
    try:
        cook(recipe, values, chosen, args.redo, Display.choose(len(recipe.steps), args.quiet))
    finally:
        signal.signal(signal.SIGTERM, before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
