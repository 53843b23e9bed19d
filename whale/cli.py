"""The ``whale`` command: one entry point, one subcommand per step of the journey.

``whale SUBCOMMAND ARGS...`` runs the same ``main(argv)`` as the entry point it names, with the
same flags (``whale train`` is ``python run_fold.py``, ``whale score`` is
``python -m whale.inference``, ...): nothing here parses a subcommand's flags, so the two can
never disagree. ``whale --help`` lists the subcommands in the order a Kaggle user meets them.

Every subcommand's module is imported only when that subcommand runs: ``whale --help`` and
``whale completion bash`` import neither Keras nor a backend. This module is the one entry
point allowed to import every package of ``whale`` (lazily; ``tests/test_architecture.py``).

Example:
    whale synth --out data/synthetic
    whale train --config configs/demo.yaml --fold 0 --data data/synthetic --out runs/demo
    whale ensemble runs/demo --tune --out submissions/demo.csv --sample data/synthetic/sample_submission.csv
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, the module whose ``main(argv)`` it runs, the command it equals."""

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
    lines = ["usage: whale SUBCOMMAND [ARGS...]   (whale SUBCOMMAND --help: its flags)", "",
             "Siamese networks with adversarial training for animal re-identification.", "",
             "From Kaggle's folder to a checked submission, in order:"]
    lines += [f"  {c.name:<{width}}  {c.summary}" for c in COMMANDS]
    lines += ["", "Each subcommand is the same code and flags as the command it equals:"]
    lines += [f"  whale {c.name:<{width}}  = {c.same_as}" for c in COMMANDS]
    lines += ["", "  whale completion bash   print a bash completion script "
                  "(eval \"$(whale completion bash)\")",
              "  whale --version         print the version"]
    return "\n".join(lines)


def command_main(name: str):
    """The ``main(argv) -> int`` of subcommand ``name`` (imports its module now)."""
    return importlib.import_module(BY_NAME[name].module).main


class _Parsed(BaseException):
    """Raised instead of running a command once its parser is known (BaseException: no
    ``except Exception`` of a command, nor :func:`whale.errors.run_cli`, swallows it)."""

    def __init__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace | None):
        super().__init__(parser.prog)
        self.parser, self.namespace = parser, namespace


@contextlib.contextmanager
def _stop_at_parse(parse: bool) -> Iterator[None]:
    original = argparse.ArgumentParser.parse_args

    def stop(self, args=None, namespace=None):
        raise _Parsed(self, original(self, args, namespace) if parse else None)

    argparse.ArgumentParser.parse_args = stop
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = original


def parse_only(main, argv: Sequence[str], parse: bool = True) -> tuple[argparse.ArgumentParser,
                                                                      argparse.Namespace | None]:
    """Run ``main(argv)`` up to its ``parse_args`` and stop there: (its parser, the parsed namespace).

    With ``parse=False`` the parser is returned without parsing ``argv`` (namespace None). Bad
    flags end as argparse ends them: ``SystemExit(2)`` with the message on stderr. Used by the docs
    test (every documented command line parses) and by :func:`completion_script`; nothing runs.
    A ``main`` that returns before parsing raises ``RuntimeError``.
    """
    try:
        with _stop_at_parse(parse):
            main(list(argv))
    except _Parsed as stopped:
        return stopped.parser, stopped.namespace
    raise RuntimeError(f"{getattr(main, '__module__', main)}: returned before parsing its command line")


def flags(parser: argparse.ArgumentParser) -> dict[str | None, list[str]]:
    """``{subcommand or None: its option strings}`` of a parser (sub-parsers' flags under their name)."""
    out: dict[str | None, list[str]] = {None: []}
    for action in parser._actions:
        out[None] += [o for o in action.option_strings if o.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[name] = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
    return out


def completion_script() -> str:
    """A bash completion function for ``whale``: subcommands, their sub-subcommands and flags.

    Built from the subcommands' own parsers (imports each command's module, not Keras).
    """
    cases = []
    for c in COMMANDS:
        parser, _ = parse_only(command_main(c.name), [], parse=False)
        found = flags(parser)
        subs = [name for name in found if name]
        words = sorted(set(found[None]) | set(subs) | {f for name in subs for f in found[name]})
        cases.append(f'        {c.name}) words="{" ".join(words)}" ;;')
    names = " ".join(c.name for c in COMMANDS)
    return "\n".join([
        "# bash completion for whale: eval \"$(whale completion bash)\"",
        "_whale() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" words',
        "    if [ \"$COMP_CWORD\" -eq 1 ]; then",
        f'        COMPREPLY=($(compgen -W "{names} completion --help --version" -- "$cur")); return',
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
    """``whale SUBCOMMAND ARGS...``: runs that subcommand's ``main(ARGS)`` and returns its status.

    No subcommand or ``-h``/``--help``: the list (status 0); an unknown one: one line naming
    the valid ones on stderr and status 2, as every command's bad input.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(help_text())
        return 0
    name, rest = argv[0], argv[1:]
    if name == "--version":
        from whale import __version__

        print(f"whale {__version__}")
        return 0
    if name == "completion":
        if rest != ["bash"]:
            print(f"whale: error: completion: expected 'bash', received {' '.join(rest) or 'nothing'}",
                  file=sys.stderr)
            return 2
        sys.stdout.write(completion_script())
        return 0
    if name not in BY_NAME:
        print(f"whale: error: unknown subcommand {name!r}; expected one of "
              f"{', '.join(c.name for c in COMMANDS)} (whale --help)", file=sys.stderr)
        return 2
    status = command_main(name)(rest)
    return 0 if status is None else int(status)


if __name__ == "__main__":
    sys.exit(main())
