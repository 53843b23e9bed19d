"""Any command's wall seconds and peak memory, its own part apart from file pages. Not a test.

    python benchmarks/speed/measured.py [--log FILE] [--memory-limit-gb G] -- whale train --config ... --max-epochs 2

The command runs with its output in ``--log`` (default ``measured.log`` in the current folder); its memory and that of
every process it starts is sampled every half second (:func:`benchmarks.common.run_measured`): the peak resident
memory (all pages, memory-mapped files' included) and the peak of its own (pages that are no file's: what the kernel
cannot drop and read again). ``--memory-limit-gb``: inside a memory cgroup of that size, whose own peak is printed
too (:class:`benchmarks.common.MemoryLimit`). The last line is one JSON object. ``whale ...`` is run as
``python -m whale ...`` under this Python. To compare two versions of the code, run this script from each checkout.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", type=Path, default=Path("measured.log"), help="the command's output")
    p.add_argument("--memory-limit-gb", type=float, help="run it inside a memory cgroup of this size")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = p.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        p.error("no command to measure: give it after --")
    if cmd[0] == "whale":
        cmd = [sys.executable, "-m", "whale", *cmd[1:]]
    from benchmarks.common import MemoryLimit, run_measured

    limit = MemoryLimit(args.memory_limit_gb) if args.memory_limit_gb else None
    try:
        code, seconds, peak = run_measured(cmd, args.log, preexec_fn=limit.preexec if limit else None)
        cgroup = limit.peak_mb() if limit else None
    finally:
        if limit:
            limit.close()
    inside = f"; memory cgroup of {args.memory_limit_gb:g} GB, its peak {cgroup:,.0f} MB" if limit else ""
    print(f"exit status {code} in {seconds:.0f} s; peak resident {peak['resident']:,.0f} MB, of it its own "
          f"{peak['anonymous']:,.0f} MB{inside} (log {args.log})")
    print(json.dumps({"benchmark": "measured", "command": cmd, "exit_status": code, "seconds": seconds,
                      "peak_resident_mb": peak["resident"], "peak_own_mb": peak["anonymous"],
                      "memory_limit_gb": args.memory_limit_gb, "cgroup_peak_mb": cgroup}))
    return code


if __name__ == "__main__":
    sys.exit(main())
