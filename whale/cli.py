"""The ``whale`` command: one parser tree, one subcommand per step of the journey.

``whale SUBCOMMAND ARGS...`` is a subparser built by the same ``add_arguments(parser)`` as the
entry point it equals and runs the same ``run(args)`` (``whale train`` is ``python run_fold.py``,
``whale score`` is ``python -m whale.inference``, ...; :mod:`whale.command` says what a command
module holds), so the two can never disagree in a flag. ``--debug`` (anywhere on the line) and
``--version`` are the tree's own; ``whale --help`` lists the subcommands in the order a Kaggle user
meets them; ``whale completion bash`` is written from the tree.

A subcommand's module is imported only when that subcommand runs (the tree gets only its flags):
``whale --help`` imports none, ``whale completion bash`` every one but neither Keras nor a backend.
This module is the one entry point allowed to import every package of ``whale`` (lazily;
``tests/test_architecture.py``).

Example:
    whale synth --out data/synthetic
    whale train --config configs/demo.yaml --fold 0 --data data/synthetic --out runs/demo
    whale ensemble runs/demo --tune --out submissions/demo.csv --sample data/synthetic/sample_submission.csv
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from whale import command


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, the module whose ``add_arguments`` and ``run`` it is, the command it equals."""

    name: str
    module: str
    same_as: str
    summary: str


# The journey's order: what `whale --help` lists. `same_as` is the entry point each one equals.
COMMANDS: tuple[Command, ...] = (
    Command("synth", "whale.data.synth", "python -m whale.data.synth",
            "write a synthetic competition in Kaggle's layout (try everything without Kaggle data)"),
    Command("folds", "whale.data.folds", "python -m whale.data.folds",
            "check a competition folder and print its 4 folds"),
    Command("duplicates", "whale.duplicates", "python -m whale.duplicates",
            "find near-duplicate images; merge labels, answer duplicated test images"),
    Command("boxes", "whale.boxes.cli", "python -m whale.boxes",
            "train the box models, predict bounding_boxes.csv, evaluate boxes"),
    Command("train", "whale.training.cli", "python run_fold.py",
            "train one fold of one config (also --plan: what a fold costs; --pretrain)"),
    Command("score", "whale.inference.__main__", "python -m whale.inference",
            "score a folder's test images against its gallery with a trained run"),
    Command("ensemble", "whale.ensemble.cli", "python ensemble.py",
            "average runs, place new_whale, write a checked submission CSV"),
    Command("submission", "whale.submission", "python -m whale.submission",
            "check a submission CSV against sample_submission.csv"),
    Command("recipe", "whale.recipe.__main__", "python -m whale.recipe",
            "the steps from the data to a checked submission as one command, resumed where it stopped"),
    Command("pseudo", "whale.pseudo", "python -m whale.pseudo",
            "one pseudo-label round: confident test images join train.csv"),
    Command("explain", "whale.explain.cli", "python -m whale.explain",
            "the paper's heatmaps and match sheets"),
    Command("catalogue", "whale.catalogue.cli", "python -m whale.catalogue",
            "a photo-ID catalogue: add identified photos, match new ones, review, accept"),
    Command("kernels", "whale.kaggle.kernels", "python -m whale.kaggle.kernels",
            "Kaggle kernels: the code dataset, one kernel per fold, checks"),
    Command("demo", "whale.demo", "python -m whale.demo",
            "the demo of `make demo`: synthetic data, a small model, a submission"),
)
BY_NAME = {c.name: c for c in COMMANDS}


def help_text() -> str:
    """What ``whale --help`` prints: the subcommands in the journey's order."""
    width = max(len(c.name) for c in COMMANDS)
    lines = ["usage: whale [--debug] SUBCOMMAND [ARGS...]   (whale SUBCOMMAND --help: its flags)", "",
             "Siamese networks with adversarial training for animal re-identification.", "",
             "From Kaggle's folder to a checked submission, in order:"]
    lines += [f"  {c.name:<{width}}  {c.summary}" for c in COMMANDS]
    lines += ["", "Each subcommand is the same code and flags as the command it equals:"]
    lines += [f"  whale {c.name:<{width}}  = {c.same_as}" for c in COMMANDS]
    lines += ["", "  whale completion bash   print a bash completion script "
                  "(eval \"$(whale completion bash)\")",
              "  whale --version         print the version",
              f"  whale --debug ...       {command.DEBUG_HELP}"]
    return "\n".join(lines)


def command_module(name: str):
    """The module of subcommand ``name`` (imports it now): ``PROG``, ``add_arguments``, ``run``, ``main``."""
    return importlib.import_module(BY_NAME[name].module)


def command_main(name: str):
    """The standalone entry point ``main(argv) -> int`` of subcommand ``name``."""
    return command_module(name).main


def command_parser(name: str) -> argparse.ArgumentParser:
    """The standalone parser of subcommand ``name`` (``prog`` e.g. ``run_fold.py``): the same
    ``add_arguments`` as ``whale NAME``'s subparser. Parsing runs nothing."""
    module = command_module(name)
    return command.parser(module.PROG, module.add_arguments)


class _Tree(command.Parser):
    """The root of ``whale``: its help is :func:`help_text`."""

    def format_help(self) -> str:
        return help_text() + "\n"


def build_parser(only: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The ``whale`` parser tree: ``whale [--debug] NAME [NAME's flags and subcommands]``, ``whale completion``.

    Every subcommand is listed; with ``only``, only those named get their flags (and only their
    modules are imported). Parsing runs nothing.
    """
    from whale import __version__

    root = _Tree(prog="whale")
    root.add_argument("--version", action="version", version=f"whale {__version__}", help="print the version")
    subs = root.add_subparsers(metavar="SUBCOMMAND", parser_class=command.Parser)
    for c in COMMANDS:
        sub = subs.add_parser(c.name, help=c.summary)
        if only is None or c.name in only:
            command_module(c.name).add_arguments(sub)
    completion = subs.add_parser("completion", help="print a bash completion script")
    completion.add_argument("shell", nargs="*", metavar="bash", help="the shell (bash)")
    command.add_debug(root)
    return root


def flags(parser: argparse.ArgumentParser) -> dict[str | None, list[str]]:
    """``{subcommand or None: its option strings}`` of a parser (sub-parsers' flags under their name)."""
    out: dict[str | None, list[str]] = {None: [o for a in parser._actions for o in a.option_strings
                                              if o.startswith("--")]}
    for name, sub in command.subparsers(parser).items():
        out[name] = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
    return out


def completion_script() -> str:
    """A bash completion function for ``whale``: subcommands, their sub-subcommands and flags.

    Written from :func:`build_parser`'s tree (imports each command's module, not Keras).
    """
    tree = command.subparsers(build_parser())
    cases = []
    for c in COMMANDS:
        found = flags(tree[c.name])
        subs = [name for name in found if name]
        words = sorted(set(found[None]) | set(subs) | {f for name in subs for f in found[name]})
        cases.append(f'        {c.name}) words="{" ".join(words)}" ;;')
    top = " ".join([*tree, "--help", "--version", "--debug"])
    return "\n".join([
        "# bash completion for whale: eval \"$(whale completion bash)\"",
        "_whale() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" words',
        "    if [ \"$COMP_CWORD\" -eq 1 ]; then",
        f'        COMPREPLY=($(compgen -W "{top}" -- "$cur")); return',
        "    fi",
        '    case "${COMP_WORDS[1]}" in',
        *cases,
        "        *) words='' ;;",
        "    esac",
        '    if [[ "$cur" == -* || -z "$cur" ]] && [ -n "$words" ]; then',
        '        COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "    else",
        '        COMPREPLY=($(compgen -f -- "$cur"))',
        "    fi",
        "}",
        "complete -o filenames -F _whale whale",
        "",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    """``whale SUBCOMMAND ARGS...``: parses the line with the tree and runs that subcommand's ``run(args)``.

    No subcommand or ``-h``/``--help``: the list (status 0); ``--version``: the version (0); an
    unknown subcommand: one line naming the valid ones on stderr and status 2, as every command's
    bad input. Bad flags and ``whale NAME --help`` end as argparse ends them (``SystemExit``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    words = [a for a in argv if a != "--debug"]
    if not words or words[0] in ("-h", "--help", "help"):
        print(help_text())
        return 0
    name = words[0]
    if name == "--version":
        from whale import __version__

        print(f"whale {__version__}")
        return 0
    if name not in BY_NAME and name != "completion":
        print(f"whale: error: unknown subcommand {name!r}; expected one of "
              f"{', '.join(c.name for c in COMMANDS)} (whale --help)", file=sys.stderr)
        return 2
    args = build_parser(only=[name]).parse_args(argv)
    if name == "completion":
        if args.shell != ["bash"]:
            print(f"whale: error: completion: expected 'bash', received {' '.join(args.shell) or 'nothing'}",
                  file=sys.stderr)
            return 2
        sys.stdout.write(completion_script())
        return 0
    return command.execute(command_module(name).run, args, f"whale {name}")


if __name__ == "__main__":
    sys.exit(main())
