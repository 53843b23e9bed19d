"""Steps ``homography_<row>``: seed 000's Table I at the paper's scale, one row a step, seed 0."""
from __future__ import annotations

ROWS = ("siamese_ce", "siamese_contrastive", "triplet_hinge", "triplet_mse")  # = benchmarks.seeds.homography.ROWS


def step_homography(ctx, row: str, seed: int = 0, quick: bool = False) -> dict:
    """``benchmarks/seeds/homography.py --rows ROW --seeds SEED`` at the paper's scale (``quick``: its ``--quick``
    plumbing scale); the row's figures beside Table I's."""
    from benchmarks.seeds import homography

    work = ctx.work / f"homography_{row}"
    payload = homography.main(["--out", str(work), "--seeds", str(seed), "--rows", row, "--quiet"]
                              + (["--quick"] if quick else []))
    res = payload["per_seed"][0][row]
    return {"row": row, "seed": seed, "paper": homography.ROWS[row][3], "test_accuracy": res["test_accuracy"],
            "test_order_accuracy": res["test_order_accuracy"], "test_items": res["test_items"],
            "val_accuracy_per_stage": [st["val_accuracy"] for st in res["stages"]],
            "scale": {k: payload["scale"][k] for k in ("size", "images_per_stage", "epochs")},
            "train_s": round(res["seconds"], 1)}
