"""benchmarks/flukes/humpback.py's learned runs on a split: each ``--learned-config`` trained here, each GPU run scored
here, and each fused with the keypoint matcher. Not a test.

* ``--learned-config A.yaml,B.yaml``: one ``whale train --config C --fold 0`` per config (rows ``learned A``,
  ``learned B``); a config with ``trunk:`` keeps its maps in ``OUT/trunk-cache``, shared by the split seeds
  (the same photos); ``--learned-runs DIR`` reuses ``DIR/seedN/learned-<config>`` of an earlier run instead (its
  rows and fusions measured again, nothing trained; e.g. a variant trained by hand from a copy of the run).
* ``--learned-variant NAME='KEY=VALUE ...'``: each config trained again with those ``--set`` overrides (an ablation
  written in the config's header), row ``learned <config> <NAME>``, folder ``learned-<config>-<NAME>``.
* ``--gpu-runs DIR``: the ``flukes_<job>.tgz`` files a GPU session's step ``flukes_lite0`` returned
  (:mod:`benchmarks.gpu.gpu_flukes`); each job of this seed is unpacked and scored again here on the original photos
  (``whale train --score-only`` with the job's own config, its crop and margin: on the GPU they read the packed
  crops), row ``gpu <job>``.
* fusion: ``whale ensemble KP RUN --tune`` with each rule of ``--fusion`` (rows ``fusion <run>, calibrated
  <rule>`` and ``fusion <run>, <grid> grid``).
"""
from __future__ import annotations

import re
from pathlib import Path

from benchmarks.flukes.shared import (KAGGLE_NEW_SHARE, earlier_run_of, ensemble_and_check, method_row, slug,
                                      tuned_weights, whale_command)

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"


def learned_runs(args, seed: int, comp: Path, work: Path, log=print) -> dict[str, tuple[Path, dict | None]]:
    """``{row name: (run folder, seconds or None when reused)}`` of the split ``comp``'s learned runs."""
    runs = {}
    wanted = "learned" in args.methods or "fusion" in args.methods
    variants = list(getattr(args, "learned_variants", []))
    if not (getattr(args, "variants_only", False) and variants):
        variants = [("", [])] + variants
    for config, (variant, sets) in ((c, v) for c in (args.learned_configs if wanted else []) for v in variants):
        stem = Path(config).stem + (f"-{variant}" if variant else "")
        name = f"learned {Path(config).stem}" + (f" {variant}" if variant else "")
        folder = work / f"learned-{stem}"
        if args.learned_runs:
            own = (Path(args.learned_runs) / f"seed{seed}" / f"learned-{stem}").is_dir()
            kind = f"learned-{stem}" if own or variant else "learned"  # a variant never falls back to the plain run
            runs[name] = (earlier_run_of(args.learned_runs, seed, comp, kind), None)
            log(f"  {name}: the score files of {runs[name][0]} (the same split, checked)")
            continue
        t = whale_command(["train", "--config", config, "--fold", "0", "--data", str(comp), "--out", str(folder),
                           "--trunk-cache", str(Path(args.out) / "trunk-cache"), "--verbose", "0",
                           *(a for kv in sets for a in ("--set", kv))],
                          work / f"learned-{stem}.train.log", log)
        runs[name] = (folder, {"train": t})
    for job, run in gpu_runs(args.gpu_runs, seed, work / "gpu").items():
        config = CONFIG_DIR / f"{json_name(run)}.yaml"
        t = whale_command(["train", "--config", str(config), "--fold", "0", "--data", str(comp), "--out", str(run),
                           "--score-only", "--set", "precision=float32", "--verbose", "0"],
                          work / f"gpu-{job}.score.log", log)
        runs[f"gpu {job}"] = (run, {"score": t})
    return runs


def learned_variant(text: str) -> tuple[str, list[str]]:
    """``NAME=KEY=VALUE KEY=VALUE ...`` (``--learned-variant``) as ``(NAME, [KEY=VALUE, ...])``; NAME a plain word."""
    name, sep, sets = text.partition("=")
    if not sep or not re.fullmatch(r"[a-z0-9_]+", name) or not sets.strip():
        raise ValueError(f"--learned-variant {text!r}: expected NAME='KEY=VALUE ...', NAME of a-z, 0-9 and _")
    return name, sets.split()


def json_name(run: Path) -> str:
    """The config name a run folder trained (its ``config.yaml``'s ``name``)."""
    import yaml

    return yaml.safe_load((run / "config.yaml").read_text())["name"]


def gpu_runs(folder, seed: int, dest: Path) -> dict[str, Path]:
    """``{job: run folder}`` of the jobs of split ``seed`` among ``folder``'s ``flukes_<job>.tgz`` (job names end
    in ``_s<seed>``, or ``_s<seed>_<more>``), unpacked under ``dest``."""
    from benchmarks.gpu.gpu_flukes import unpack_runs

    if not folder:
        return {}
    found = unpack_runs(Path(folder), dest)
    return {job: run for job, run in found.items() if re.search(rf"_s{seed}(_|$)", job)}


def fusion_rows(args, name: str, runs: list[Path], comp: Path, truth: dict, work: Path, log=print) -> list[dict]:
    """The keypoint matcher fused with the learned run ``runs[1]`` by each rule of ``args.fusion``: ``mean`` or
    ``logodds`` (``whale ensemble --tune --fusion RULE``: each run's scores as calibrated probabilities, averaged or
    added as log-odds; ``mean`` is ``--tune``'s default for runs of several models), each also with
    ``--tune-new-share`` (validation's ``new_whale`` queries weighed as the competition's test share, as the
    matcher's own share row), or a weight grid on the raw scores (``log``, ``linear``: ``--tune-weights
    --weight-grid``)."""
    from whale.ensemble.combine import average_score_files
    from whale.ensemble.fusion import read_fusion
    from whale.inference.scorefile import score_path

    tests = [score_path(r, "test") for r in runs]
    variants = []
    for rule in args.fusion:
        if rule in ("log", "linear"):
            variants.append((f"{rule} grid", ["--tune-weights", "--weight-grid", rule]))
        else:
            variants += [(f"calibrated {rule}", ["--fusion", rule]),
                         (f"calibrated {rule}, --tune-new-share {KAGGLE_NEW_SHARE}",
                          ["--fusion", rule, "--tune-new-share", str(KAGGLE_NEW_SHARE)])]
    rows = []
    for how, extra in variants:
        label = f"fusion {name}, {how}"
        sub = work / f"{slug(label)}.csv"
        te, lines = ensemble_and_check(runs, sub, comp, work, extra, log=log)
        if "--tune-weights" in extra:
            w = tuned_weights(lines, 2)
            fused = average_score_files(tests, w)
        else:  # the calibrated rule as the ensemble fitted it
            w, fused = None, average_score_files(tests, **read_fusion(sub.with_suffix(".calibration.json")).maps())
        row = method_row(label, sub, fused, truth, {"ensemble": te})
        if w is not None:
            row["weights"] = w
        rows.append(row)
    return rows

