"""Progress for long work: tqdm bars for loops, a line on stderr for a step that is one call; off when a caller
asks for quiet."""

from __future__ import annotations


def progress_bar(iterable, total=None, desc=None, enabled=True):
    """``iterable`` wrapped in a tqdm bar that disappears when done; ``iterable`` itself when not ``enabled``."""
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, leave=False)


def progress_line(text: str, enabled: bool = True) -> None:
    """``text`` as a line on stderr (where the bars are) when ``enabled``: a step longer than a few seconds that
    no loop can show, such as fitting a classifier."""
    if enabled:
        import sys

        print(text, file=sys.stderr, flush=True)
