"""Progress bars for long loops (tqdm), off when a caller asks for quiet."""

from __future__ import annotations


def progress_bar(iterable, total=None, desc=None, enabled=True):
    """``iterable`` wrapped in a tqdm bar that disappears when done; ``iterable`` itself when not ``enabled``."""
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, leave=False)
