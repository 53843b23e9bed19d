"""Peak memory of this process and of the worker processes it waited for, as ``run.json`` records it."""
from __future__ import annotations

import resource
import sys


def peak_memory_mb() -> dict[str, float]:
    """``{"self": MB, "workers": MB}``: the largest resident set this process has had so far, and the largest of
    any child process it has waited for (extraction workers); 0 where the platform does not say."""
    scale = 1 / 2 ** 20 if sys.platform == "darwin" else 1 / 2 ** 10  # ru_maxrss: bytes on macOS, KiB on Linux
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * scale
    return {"self": round(own, 1), "workers": round(kids, 1)}
