"""What every command of ``whale`` is made of: ``add_arguments(parser)``, ``run(args)``, one runner.

A command module (``whale.training.cli``, ``whale.inference.__main__``, ...; ``whale.cli.COMMANDS``
names them) defines:

* ``PROG``: its standalone entry point as usage lines name it (``"run_fold.py"``,
  ``"python -m whale.inference"``);
* ``add_arguments(parser)``: its description and flags (nested subcommands as subparsers), and a
  check of flags that only make sense together (:func:`check_with`). It runs when ``whale
  completion bash`` lists every flag, so the module imports no backend at module level;
* ``run(args) -> int | None``: the work; Keras and the rest are imported inside;
* ``main(argv=None) -> int``: ``return command.main(PROG, add_arguments, run, argv)``, the standalone
  entry point (``python -m ...``, ``run_fold.py``, ``ensemble.py``, the ``whale-*`` scripts).

``whale.cli`` puts the same ``add_arguments`` under ``whale NAME`` as one subparser of its tree,
so ``whale train`` and ``run_fold.py`` cannot differ in a flag. :func:`execute` is the one place a
command starts: ``--debug`` (anywhere on the line) or ``WHALE_DEBUG=1`` shows tracebacks and the
backend's start-up logs; otherwise those logs are quiet (:func:`quiet_backend`) and bad input is one
line and exit status 2 (:func:`whale.core.errors.run_guarded`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence

from whale.core.errors import run_guarded

DEBUG_ENV = "WHALE_DEBUG"
"""Environment variable: set (not ``0``), every command runs as with ``--debug``."""
DEBUG_HELP = f"show the traceback of bad input and the backend's start-up logs (also {DEBUG_ENV}=1)"
_CHECK = "_whale_check"  # namespace keys Parser.parse_args pops: check_with's check,
_OWNER = "_whale_parser"  # and the innermost (sub)parser the line reached (add_debug sets it)


class Parser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` for a tree of (sub)commands: unknown flags are refused by the
    innermost subcommand the line names (its usage, its prog: ``whale train: error: ...``), then the
    check :func:`check_with` registered for it runs, once the whole line has parsed."""

    def parse_args(self, args=None, namespace=None):
        return self._parse(args, namespace, strict=True)[0]

    def parse_checked_known_args(self, args=None, namespace=None) -> tuple[argparse.Namespace, list[str]]:
        """As :meth:`parse_args`, but the arguments no parser of the tree knows are returned beside the
        namespace, ``(args, extras)``, not refused (a Kaggle kernel's line may carry its runner's own)."""
        return self._parse(args, namespace, strict=False)

    def _parse(self, args, namespace, strict: bool) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = self.parse_known_args(args, namespace)
        owner = vars(parsed).pop(_OWNER, self)
        if extras and strict:
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        check = vars(parsed).pop(_CHECK, None)
        if check is not None:
            check(parsed)
        return parsed, extras


def check_with(parser: argparse.ArgumentParser, check: Callable[[argparse.ArgumentParser, argparse.Namespace], None]) -> None:
    """After a line for ``parser`` parses, ``check(parser, args)`` runs; it calls ``parser.error`` (usage
    and status 2, as argparse's own errors) for flags that only make sense together."""
    parser.set_defaults(**{_CHECK: lambda args: check(parser, args)})


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """``{name: subparser}`` of ``parser``'s subcommands (one level; empty without subcommands)."""
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def add_debug(parser: argparse.ArgumentParser, default=False) -> None:
    """``--debug`` on ``parser`` and on each of its nested subparsers (whose absent flag leaves the
    outer value), so that it counts before or after a subcommand. Call after ``add_arguments``."""
    parser.add_argument("--debug", action="store_true", default=default, help=DEBUG_HELP)
    parser.set_defaults(**{_OWNER: parser})
    for sub in subparsers(parser).values():
        add_debug(sub, argparse.SUPPRESS)


def parser(prog: str, add_arguments: Callable[[argparse.ArgumentParser], None]) -> Parser:
    """The standalone parser of a command: ``add_arguments`` under ``prog``, with ``--debug``."""
    p = Parser(prog=prog)
    add_arguments(p)
    add_debug(p)
    return p


def debugging(args: argparse.Namespace) -> bool:
    """``--debug`` given, or ``WHALE_DEBUG`` set (not empty, not ``0``)."""
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _tf_noise(level: str) -> re.Pattern:
    """TensorFlow's start-up lines that ``TF_CPP_MIN_LOG_LEVEL`` (``level``) does not reach: on CPUs with oneDNN's
    instructions (AVX-512) ``port.cc`` logs "oneDNN custom operations are on" through absl before its logging
    starts. absl's notice that it does so always, its INFO lines (``I0000 ...] ...``) from level 1, WARNING lines
    (``W...``) from level 2."""
    kinds = {"0": "", "1": "I"}.get(level, "IW")
    notice = r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    lines = rf"|[{kinds}]\d{{4}} [\d:. ]+\d+ \S+\.cc:\d+\] .*" if kinds else ""
    return re.compile(rf"^({notice}{lines})$")


@contextlib.contextmanager
def _filtered_stderr(noise: re.Pattern):
    """File descriptor 2 (C++ libraries write there, not to ``sys.stderr``) into a temporary file for the
    block; then every line that is not ``noise`` is written to stderr, in order."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [line for line in tmp.read().decode(errors="replace").splitlines(keepends=True)
                    if not noise.match(line.rstrip("\n"))]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """The first ``import tensorflow`` runs under :func:`_filtered_stderr` (then this finder leaves
    ``sys.meta_path``): a command that never imports TensorFlow pays nothing."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        real = spec.loader

        class Loader(importlib.abc.Loader):
            def __getattr__(self, attr):  # resource readers and the rest: the real loader's
                return getattr(real, attr)

            def create_module(self, spec):
                return real.create_module(spec)

            def exec_module(self, module):
                with _filtered_stderr(_tf_noise(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))):
                    real.exec_module(module)

        spec.loader = Loader()
        return spec


def quiet_backend() -> None:
    """Silence the backend's start-up lines: TensorFlow's C++ INFO and WARNING logs (CPU features,
    oneDNN, absl's "before InitializeLog" notice) and absl's Python warnings. Must run before the
    backend is imported; a ``TF_CPP_MIN_LOG_LEVEL`` the user set is kept. Errors still print. The lines
    TensorFlow logs before ``TF_CPP_MIN_LOG_LEVEL`` applies are filtered from its import at that level
    (:class:`_QuietTensorFlowImport`, :func:`_tf_noise`)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" not in sys.modules and not any(isinstance(f, _QuietTensorFlowImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietTensorFlowImport())
    try:
        from absl import logging as absl_logging  # light (no backend); installed with TensorFlow and JAX
    except ImportError:
        return
    absl_logging.set_verbosity(absl_logging.ERROR)


def quiet_unless_debugging() -> None:
    """:func:`quiet_backend` unless ``WHALE_DEBUG`` is set: the start of a script outside the command tree
    (the benchmarks), which has no ``--debug`` of its own. Call before the backend is imported."""
    if not debugging(argparse.Namespace()):
        quiet_backend()


def execute(run: Callable[[argparse.Namespace], int | None], args: argparse.Namespace, prog: str) -> int:
    """Run ``run(args)``, a parsed command line: backend logs quiet unless :func:`debugging`, bad
    input one line and status 2 (:func:`whale.core.errors.run_guarded`). Returns the exit status."""
    debug = debugging(args)
    if not debug:
        quiet_backend()
    return run_guarded(lambda: run(args), prog, debug)


def main(prog: str, add_arguments: Callable[[argparse.ArgumentParser], None],
         run: Callable[[argparse.Namespace], int | None], argv: Sequence[str] | None = None) -> int:
    """A command's standalone entry point: parse ``argv`` (default ``sys.argv[1:]``) and :func:`execute`.

    Bad flags and ``--help`` end as argparse ends them (``SystemExit`` 2 or 0).
    """
    args = parser(prog, add_arguments).parse_args(None if argv is None else list(argv))
    return execute(run, args, prog)
