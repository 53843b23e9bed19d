"""Training a learned local descriptor (:mod:`whale.keypoints.descriptor`) on unlabelled photos.

    python -m whale.keypoints.learn --photos DATA/train --out runs/descriptor [--loss tgloss|global] [--epochs 4]

Pairs (:func:`sample_pairs`): each photo prepared as the matcher prepares it (trimmed, contrast normalised),
warped by a random homography; a keypoint's patch there and at its mapped place are one class
(:func:`whale.keypoints.patches.homography_pairs`). Batches of P such pairs are P x 2 batches of seed 001's loss.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from whale.core.errors import DataError
from whale.keypoints.descriptor import LOSSES, SPEC, WEIGHTS, build_net, standardise
from whale.keypoints.extract import prepare, read_gray
from whale.keypoints.patches import PATCH_SIZE, homography_pairs
from whale.core.progress import progress_bar


def sample_pairs(photos: Sequence, features_cfg, n_pairs: int, seed: int = 0, shift: float = 0.15,
                 per_photo: int = 32, progress: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)`` ``[n, 32, 32] uint8``: matching patches of photos and their random warps (module docstring),
    the photos prepared as the matcher prepares them (``features_cfg``: trimmed, contrast normalised)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(photos))
    a, b, n = [], [], 0
    for i in progress_bar(order, desc=f"patch pairs from up to {len(photos)} photos", enabled=progress):
        if n >= n_pairs:
            break
        image = prepare(read_gray(photos[i]), features_cfg)[0]
        pa, pb = homography_pairs(image, rng, features_cfg.n_features, features_cfg.contrast, features_cfg.sigma,
                                  shift=shift, per_photo=per_photo)
        a.append(pa)
        b.append(pb)
        n += len(pa)
    if n < 2:
        raise DataError(f"{len(photos)} photos gave {n} keypoint pairs: nothing to train a descriptor on")
    return np.concatenate(a)[:n_pairs], np.concatenate(b)[:n_pairs]


def descriptor_loss(name: str):
    """The Keras loss of the objective ``name`` (one of :data:`LOSSES`) with its default parameters, section 5.2's
    constants, as the objective registry builds it (:func:`whale.objectives.registry.build_objective`).

    Raises:
        ValueError: ``name`` is not one of :data:`LOSSES`.
    """
    from whale.config.checker import Checker
    from whale.config.objectives import parse_objective
    from whale.objectives.registry import build_objective

    if name not in LOSSES:
        raise ValueError(f"loss: expected one of {LOSSES}, received {name!r}")
    return build_objective(parse_objective(Checker("the descriptor's loss"), name)).loss()


def train(photos: Sequence, out, features_cfg, *, loss: str = "tgloss", pairs_per_batch: int = 128,
          epochs: int = 4, n_pairs: int = 40_000, width: int = 16, dim: int = 128, lr: float = 1e-3,
          seed: int = 0, progress: bool = True, log=print) -> dict:
    """Train a descriptor on ``photos`` (unlabelled) and write it to the folder ``out``; returns its spec.

    Each batch holds ``pairs_per_batch`` keypoints of different photos or places, both views of each, labelled
    by keypoint: seed 001's ``loss`` (:data:`LOSSES`) with section 5.2's constants.
    """
    import keras

    from whale.core.files import write_text_atomic

    objective_loss = descriptor_loss(loss)
    t0 = time.perf_counter()
    a, b = sample_pairs(photos, features_cfg, n_pairs, seed, progress=progress)
    t_pairs = time.perf_counter() - t0
    xa, xb = standardise(a), standardise(b)
    keras.utils.set_random_seed(seed)
    net = build_net(width, dim)
    net.compile(optimizer=keras.optimizers.Adam(lr), loss=objective_loss)
    rng = np.random.default_rng(seed + 1)
    p = pairs_per_batch
    n_batches = len(xa) // p
    history = []
    for epoch in range(epochs):
        order = rng.permutation(len(xa))[:n_batches * p].reshape(n_batches, p)
        x = np.concatenate([np.concatenate([xa[o], xb[o]]) for o in order])
        y = np.concatenate([np.concatenate([o, o]) for o in order]).astype(np.int32)
        h = net.fit(x, y, batch_size=2 * p, epochs=1, shuffle=False, verbose=0)
        history.append(float(h.history["loss"][-1]))
        log(f"descriptor epoch {epoch + 1}/{epochs}: {loss} {history[-1]:.4f}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{os.getpid()}.{WEIGHTS}"  # Keras wants the name to end in .weights.h5
    net.save_weights(str(tmp))
    os.replace(tmp, out / WEIGHTS)
    spec = {"width": width, "dim": dim, "size": PATCH_SIZE, "loss": loss, "pairs": len(xa), "epochs": epochs,
            "pairs_per_batch": p, "lr": lr, "seed": seed, "photos": len(photos), "loss_by_epoch": history,
            "seconds": {"pairs": t_pairs, "train": time.perf_counter() - t0 - t_pairs}}
    write_text_atomic(out / SPEC, json.dumps(spec, indent=2))
    return spec


def main(argv=None) -> int:
    """``python -m whale.keypoints.learn --photos DIR --out FOLDER``: train a descriptor on a folder's photos."""
    import argparse

    from whale.keypoints.config import load_keypoint_config

    p = argparse.ArgumentParser(prog="python -m whale.keypoints.learn", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--photos", required=True, help="a folder of photos (no labels needed), e.g. DATA/train")
    p.add_argument("--out", required=True, help="the descriptor folder to write")
    p.add_argument("--config", default=None, help="keypoint config whose feature settings prepare the photos")
    p.add_argument("--loss", choices=LOSSES, default="tgloss")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--pairs", type=int, default=40_000, help="keypoint pairs sampled")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    folder = Path(args.photos)
    photos = sorted(q for q in folder.iterdir() if q.suffix.lower() in (".jpg", ".jpeg", ".png")) \
        if folder.is_dir() else []
    if not photos:
        raise SystemExit(f"{folder}: no .jpg/.png photos there")
    cfg = load_keypoint_config(args.config)
    spec = train(photos, args.out, cfg.features, loss=args.loss, epochs=args.epochs, n_pairs=args.pairs,
                 seed=args.seed)
    print(json.dumps(spec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
