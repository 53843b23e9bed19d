"""The config's walk: which modules ``run_fold.py`` passes the config through before the trainer walks the schedule.

Runs ``run_fold.py``'s ``main`` in-process on a tiny synthetic competition under ``sys.setprofile`` and
records, in call order, the module of every ``whale`` function (``run_fold.py`` included) called with the
config as an argument: a :class:`whale.config.RunConfig`, or an object holding one as ``cfg`` or ``sized``
(a ``FoldJob``, the ``Trainer``). It stops when ``Trainer.run`` starts (the training loop then walks the
plan; what it does per epoch is not the config's way there). Consecutive calls in one module are one
visit. Prints the walk, its length (visits), the modules (rooms), the visits to a module already visited
(climbs back) and the visits to ``whale/training/schedule.py``.

    python benchmarks/speed/config_walk.py [--root CHECKOUT]    # CHECKOUT: another version of the toolkit

docs/ARCHITECTURE.md ("The fold, prepared once") quotes its figures before and after ``FoldJob``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


class _Stop(Exception):
    pass


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=str(Path(__file__).resolve().parents[2]), help="the checkout to measure")
    args = p.parse_args(argv)
    root = Path(args.root).resolve()
    sys.path.insert(0, str(root))
    from whale.config import RunConfig
    from whale.data.synth import generate
    from whale.training import cli, trainer

    def holds_config(value) -> bool:
        return isinstance(value, RunConfig) or any(
            isinstance(getattr(value, name, None), RunConfig) for name in ("cfg", "sized"))

    walk: list[str] = []

    def profile(frame, event, arg):
        if event != "call":
            return
        path = Path(frame.f_code.co_filename)
        if not (path.is_relative_to(root / "whale") or path == root / "run_fold.py"):
            return
        values = [frame.f_locals.get(n) for n in frame.f_code.co_varnames[:frame.f_code.co_argcount
                                                                            + frame.f_code.co_kwonlyargcount]]
        caller = Path(frame.f_back.f_code.co_filename) if frame.f_back is not None else None
        if caller != path and any(holds_config(v) for v in values):
            walk.append(f"{path.relative_to(root)}:{frame.f_code.co_name}")

    def stop(self, *a, **k):
        raise _Stop

    trainer.Trainer.run = stop
    with tempfile.TemporaryDirectory() as tmp:
        data = generate(Path(tmp) / "data", n_ids=8, seed=3, size=64, progress=False)
        config = Path(tmp) / "walk.yaml"
        config.write_text("name: walk\nseed: 1\nmodel: {branch: tiny, weights: null, channels: 3, head_mid: 8}\n"
                          "batch_size: 16\nworkers: 1\nstages:\n"
                          "  - {steps: 4, k: 1000.0, lr: 1.0e-3, image_size: 32, dataset: main}\n")
        sys.setprofile(profile)
        try:
            cli.main(["--config", str(config), "--fold", "0", "--data", str(data), "--out", str(Path(tmp) / "run"),
                      "--verbose", "0"])
        except _Stop:
            pass
        finally:
            sys.setprofile(None)
    modules = [step.split(":")[0] for step in walk]
    print("\n".join(walk))
    print(f"visits {len(walk)}, rooms {len(set(modules))}, climbs back {len(modules) - len(set(modules))}, "
          f"schedule.py {modules.count('whale/training/schedule.py')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
