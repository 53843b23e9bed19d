"""Steps ``rates_*``: model-only, pipeline-only and end-to-end training pairs/s of a branch, size and precision."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from benchmarks.gpu.steps import ROOT


def step_rates(ctx, branch: str, size: int, precision: str, config: str, inference: bool = False,
               quick: bool = False) -> dict:
    """Model-only, pipeline-only and end-to-end pairs/s of ``branch`` at ``size`` px
    (:mod:`benchmarks.speed.bench_train`).

    Batch size, channels and stem come from ``config`` (the model that trains on the GPU);
    ``quick``: tiny shapes (8-pair batches, 3 timed steps, 12 synthetic ids, 2 epochs).
    """
    import keras

    from benchmarks.speed import bench_train
    from whale.config import load_config
    from whale.data import fold_data, load_competition
    from whale.models import precision_scope

    cfg = load_config(ROOT / config)
    batch = 8 if quick else cfg.batch_size
    channels = 3 if quick else cfg.model.channels
    stem = None if quick else cfg.model.stem
    steps = 3 if quick else 20
    args = SimpleNamespace(batch_size=batch, workers=ctx.workers, interval=2 if quick else 3)
    data_dir = synthetic_data(ctx)
    data = fold_data(load_competition(data_dir), -1, 0)
    keras.utils.set_random_seed(0)
    timings: dict = {}
    with precision_scope(precision):
        a = bench_train.model_only(branch, size, channels, batch, steps, stem, timings=timings,
                                   inference_steps=(3 if quick else 10) if inference else 0)
    b = bench_train.pipeline_only(data, size, channels, batch, steps, ctx.workers)
    e2e: dict = {}
    c = bench_train.end_to_end(branch, size, channels, precision, args, data_dir, stem, timings=e2e)
    row = {"branch": branch, "image_size": size, "precision": precision, "batch_size": batch,
           "workers": ctx.workers, "model_pairs_s": round(a, 2), "pipeline_pairs_s": round(b, 2),
           "end_to_end_pairs_s": round(c, 2), "end_to_end_over_model": round(c / a, 3),
           "model_compile_s": round(timings["compile_s"], 1), "trainer_first_epoch_s": round(e2e["first_epoch_s"], 1)}
    if stem:
        row["stem"] = stem
    if "inference_images_s" in timings:
        row.update(inference_images_s=round(timings["inference_images_s"], 1),
                   inference_compile_s=round(timings["inference_compile_s"], 1))
    return {"rate": row}


def synthetic_data(ctx) -> Path:
    """The synthetic competition of the rate steps (:mod:`whale.data.synth`), generated once under the work folder."""
    from whale.data.synth import generate

    path = ctx.work / ("synth_quick" if ctx.quick else "synth")
    if not (path / "train.csv").exists():
        generate(path, n_ids=12 if ctx.quick else 200, seed=0, size=96 if ctx.quick else 256, progress=False)
    return path
