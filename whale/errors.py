"""Error types raised on bad user input (files, configs). All are ``ValueError``s."""

from __future__ import annotations


class WhaleError(ValueError):
    """Base class: the message says what was expected, what was received, and where."""


class DataError(WhaleError):
    """A data file or image is missing, malformed, or unsafe."""


class MissingFileError(DataError, FileNotFoundError):
    """A file the run needs does not exist (also a ``FileNotFoundError``); the message says how to make it."""


class ConfigError(WhaleError):
    """A configuration file has an unknown key or a bad value."""


class CheckpointError(DataError):
    """A checkpoint, its state file or a run's mined pairs are missing, truncated or inconsistent."""


def run_cli(main, argv=None, prog: str | None = None) -> int:
    """Run a command's ``main(argv)``; a :class:`WhaleError` becomes one line and exit status 2.

    Every user-facing command calls this, so bad input reads ``PROG: error: MESSAGE`` on
    stderr instead of a traceback. ``--debug`` anywhere in ``argv`` (default
    ``sys.argv[1:]``) is removed before ``main`` sees it and lets the traceback through.
    Returns ``main``'s exit status (``None`` counts as 0).
    """
    import os
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    prog = prog or os.path.basename(sys.argv[0]) or "whale"
    try:
        status = main(argv)
    except WhaleError as err:
        if debug:
            raise
        message = " ".join(str(err).split("\n")[:1]) if str(err) else type(err).__name__
        print(f"{prog}: error: {message} (--debug shows the traceback)", file=sys.stderr)
        return 2
    return 0 if status is None else int(status)
