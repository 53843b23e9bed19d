"""Peak memory of this process and of the worker processes it waited for, as ``run.json`` records it."""
from __future__ import annotations

import resource
import sys


def maxrss_mb(maxrss: int) -> float:
    """A ``ru_maxrss`` of ``getrusage`` or ``os.wait4`` in MB (1 MB = 2**20 bytes): KiB on Linux, bytes on macOS."""
    scale = 1 / 2 ** 20 if sys.platform == "darwin" else 1 / 2 ** 10
    return round(maxrss * scale, 1)


def peak_memory_mb() -> dict[str, float]:
    """``{"self": MB, "workers": MB}``: the largest resident set this process has had so far, and the largest of
    any child process it has waited for (extraction workers); 0 where the platform does not say."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"self": maxrss_mb(own), "workers": maxrss_mb(kids)}
