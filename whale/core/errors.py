"""Error types raised on bad user input (files, configs, outputs). All are ``ValueError``s.

:func:`run_guarded` is what every command runs under (``whale.command``), :func:`run_cli` the same
for a ``main(argv)`` (benchmarks): bad input, an output that cannot be written (read-only folder,
full disk) and Ctrl-C each end in one line on stderr.
"""

from __future__ import annotations

import errno

WRITE_ERRNOS = frozenset(getattr(errno, name) for name in (
    "ENOSPC", "EDQUOT", "EROFS", "EACCES", "EPERM", "EISDIR", "ENOTDIR", "EFBIG", "EEXIST", "ENAMETOOLONG")
    if hasattr(errno, name))
"""``errno`` values of an output that cannot be written (not a bug): one line, exit status 2."""
INTERRUPTED_STATUS = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""


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


class OutputError(WhaleError, OSError):
    """A file or folder the user named cannot be written (a folder where a file is meant, a
    read-only folder, a full disk); the message names it. Also an ``OSError``."""


def describe_write_error(path, exc: OSError, flag: str = "--out") -> str:
    """``PATH: cannot write (REASON); HINT`` for an ``OSError`` of writing ``path``; ``flag``: the option that
    chose where (``--out``; ``--cache`` for the keypoint feature store)."""
    reason = exc.strerror or str(exc)
    hint = {errno.ENOSPC: f"free some space or choose another {flag}",
            errno.EROFS: f"the file system is read-only: choose another {flag}",
            errno.EACCES: f"no permission to write there: choose another {flag}",
            errno.EPERM: f"no permission to write there: choose another {flag}",
            errno.EISDIR: "a folder is in the way: name a file",
            errno.ENOTDIR: "a file is in the way of the folder"}.get(exc.errno, f"choose another {flag}")
    return f"{path}: cannot write ({reason}); {hint}"


def run_cli(main, argv=None, prog: str | None = None, interrupted=None) -> int:
    """Run a command's ``main(argv)``; a :class:`WhaleError` becomes one line and exit status 2.

    Bad input reads ``PROG: error: MESSAGE`` on stderr instead of a traceback (see
    :func:`run_guarded`, which ``whale.command`` runs every command under). ``--debug`` anywhere in
    ``argv`` (default ``sys.argv[1:]``) is removed before ``main`` sees it and lets the traceback
    through; ``prog`` defaults to the script's name. Returns ``main``'s exit status (``None`` counts as 0).
    """
    import os
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    prog = prog or os.path.basename(sys.argv[0]) or "whale"
    return run_guarded(lambda: main(argv), prog, debug, interrupted)


def run_guarded(call, prog: str, debug: bool = False, interrupted=None) -> int:
    """``call()``'s exit status, bad input ending in one line on stderr instead of a traceback.

    A :class:`WhaleError` prints ``PROG: error: MESSAGE`` (its first line) and returns 2. An
    ``OSError`` the machine explains (``errno`` in :data:`WRITE_ERRNOS`: a full disk, a read-only
    folder, no permission) is one line and 2 too. Ctrl-C (``KeyboardInterrupt``) prints
    ``PROG: MESSAGE`` and returns :data:`INTERRUPTED_STATUS`; the message is the interrupt's own
    (``raise KeyboardInterrupt(MESSAGE)``), else ``interrupted()`` (no arguments, returns str), else
    ``interrupted``. With ``debug`` each of them lets the traceback through. ``None`` counts as 0.
    """
    import sys

    try:
        status = call()
    except WhaleError as err:
        if debug:
            raise
        message = " ".join(str(err).split("\n")[:1]) if str(err) else type(err).__name__
        print(f"{prog}: error: {message} (--debug shows the traceback)", file=sys.stderr)
        return 2
    except OSError as err:
        if debug or err.errno not in WRITE_ERRNOS:
            raise
        where = err.filename if err.filename is not None else "a file"
        print(f"{prog}: error: {where}: {err.strerror or err} (--debug shows the traceback)", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        if debug:
            raise
        try:
            message = str(err) or (interrupted() if interrupted is not None else "interrupted")
        except Exception:  # the message is a courtesy: never a traceback after Ctrl-C
            message = "interrupted"
        print(f"\n{prog}: {message}", file=sys.stderr)
        return INTERRUPTED_STATUS
    return 0 if status is None else int(status)
