"""Steps ``omniglot_seed0..2``: ``benchmarks/seeds/omniglot.py --gpu``, random and adversarial negatives, a seed a
step."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from benchmarks.gpu.steps import ROOT


def step_omniglot(ctx, seed: int, quick: bool = False) -> dict:
    """``benchmarks/seeds/omniglot.py --gpu --seeds SEED --jobs 2`` (random and adversarial at once); the
    seed's metrics. ``quick``: the tiny branch at 32 px, two one-epoch stages, 30 characters of
    ``--quick``'s 12 drawers."""
    from benchmarks.seeds import omniglot

    if omniglot.find_zips(None) is None:
        return {"skipped": "Omniglot data not found (../shared/data/omniglot/images_background_small{1,2}.zip)"}
    work = ctx.work / f"omniglot_seed{seed}"
    shutil.rmtree(work, ignore_errors=True)  # a half-finished earlier try is not resumed: same seed, fresh
    argv = ["--gpu", "--out", str(work), "--seeds", str(seed), "--jobs", "2"]
    if quick:
        argv += ["--quick", "--config", str(_tiny_omniglot_config(ctx.work)), "--budget", "0", "--characters", "30"]
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # two processes share the GPU
    omniglot.main(argv)
    summary = json.loads((work / "summary.json").read_text())
    if not summary["seeds"] or summary["seeds"][0].get("skipped"):
        return {"skipped": "benchmarks/seeds/omniglot.py skipped (no data)"}
    m = summary["seeds"][0]
    keys = ("one_shot_adversarial", "one_shot_random", "one_shot_pixel", "map5_adversarial", "map5_random",
            "map5_pixel", "miner_gap_one_shot", "miner_gap_map5", "val_map5_adversarial", "val_map5_random",
            "train_s_adversarial", "train_s_random", "epochs_adversarial", "epochs_random")
    return {"seed": seed, **{k: m[k] for k in keys if k in m}}


def _tiny_omniglot_config(work: Path) -> Path:
    """``configs/omniglot_gpu.yaml`` on the tiny branch at 32 px, batch 32, its first and last stage one
    epoch each: the ``--quick`` Omniglot."""
    from whale.config import config_from_dict, load_config

    d = load_config(ROOT / "configs" / "omniglot_gpu.yaml").to_dict()
    d["name"] = "omniglot_gpu_tiny"
    d["model"]["branch"], d["batch_size"], d["workers"], d["mining_interval"] = "tiny", 32, 2, 1
    # Two one-epoch stages: random negatives, then the config's last (hardest) K.
    d["stages"] = [dict(d["stages"][0], image_size=32, epochs=1), dict(d["stages"][-1], image_size=32, epochs=1)]
    path = work / "omniglot_gpu_tiny.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    config_from_dict(d, source="gpu_suite quick").to_yaml(path)
    return path
