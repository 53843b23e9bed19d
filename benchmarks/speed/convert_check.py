"""Converted PyTorch weights give the PyTorch model's features. Not a test (needs torch + timm).

    KERAS_BACKEND=jax python benchmarks/speed/convert_check.py [--images 4] [--size 224]
    KERAS_BACKEND=tensorflow python benchmarks/speed/convert_check.py --models seresnext50_32x4d

For each timm model (random init, no download: ``seresnext50_32x4d``; the Cadene port
``legacy_seresnext50_32x4d``; ``densenet121``, torchvision's names) it puts every BatchNorm's
weight, bias and running statistics to random non-trivial values, saves the state dict as
``.pth``, converts it with :mod:`whale.models.convert` and builds the branch from the file.
The same random images (raw 0..255, float32) then go through

* PyTorch: ImageNet normalisation -> ``forward_features`` (eval mode, on the CPU, float32);
* Keras: the branch's ``preprocess`` -> ``backbone`` (the pre-pool map) -> global max pooling
  (the branch's feature vector),

and it prints, per model, the max abs difference of the pre-pool maps and of the pooled
features, each also relative to the largest reference value (``rel``; the target is <= 1e-4).
TF32 is switched off on both sides (``--allow-tf32`` leaves the backend defaults, to see their
effect). The last stdout line is the results as JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

MODELS = {"seresnext50_32x4d": "seresnext50", "legacy_seresnext50_32x4d": "seresnext50",
          "densenet121": "densenet121"}


def exact_float32(allow_tf32: bool) -> None:
    """Full float32 convolutions on the Keras backend (no TF32 on Ampere and later)."""
    import keras

    if allow_tf32:
        return
    if keras.backend.backend() == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
    elif keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)


def randomise_batchnorm(model, gen) -> None:
    import torch

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                c = m.num_features
                m.weight.copy_(torch.rand(c, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(c, generator=gen) * 0.1)
                m.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=gen) * 1.5 + 0.5)


def _diff(got, want) -> dict:
    import numpy as np

    err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    scale = float(np.max(np.abs(want)))
    return {"max_abs": err, "max_ref": scale, "rel": err / scale if scale else float("inf")}


def check(timm_name: str, images, seed: int, workdir: Path) -> dict:
    """Convert random-init ``timm_name`` and compare features; returns a result row."""
    import keras
    import timm
    import torch

    from whale.models import build_branch
    from whale.models.convert import convert_file

    torch.manual_seed(seed)
    model = timm.create_model(timm_name, pretrained=False).eval()
    randomise_batchnorm(model, torch.Generator().manual_seed(seed))
    ckpt, out = workdir / f"{timm_name}.pth", workdir / f"{timm_name}.weights.h5"
    torch.save(model.state_dict(), ckpt)
    t0 = time.perf_counter()
    info = convert_file(MODELS[timm_name], ckpt, out)
    convert_s = time.perf_counter() - t0

    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    with torch.no_grad():
        x = (torch.from_numpy(images).permute(0, 3, 1, 2) / 255.0 - mean) / std
        ref_map = model.forward_features(x).permute(0, 2, 3, 1).numpy()  # NHWC
    ref_pooled = ref_map.max(axis=(1, 2))

    size = images.shape[1]
    branch = build_branch(MODELS[timm_name], (size, size, 3), weights=str(out))
    pre = branch.get_layer("preprocess")(images)
    got_map = keras.ops.convert_to_numpy(branch.get_layer("backbone")(pre, training=False))
    got_pooled = keras.ops.convert_to_numpy(branch(images, training=False))
    return {"model": timm_name, "branch": MODELS[timm_name], **info["options"],
            "tensors": info["tensors"], "convert_s": round(convert_s, 2),
            "feature_map": _diff(got_map, ref_map), "pooled": _diff(got_pooled, ref_pooled)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--images", type=int, default=4)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--allow-tf32", action="store_true", help="keep the backend's TF32 default")
    args = p.parse_args(argv)
    try:
        import timm
        import torch
    except ImportError as err:
        print(f"convert_check needs torch and timm ({err})", file=sys.stderr)
        return 2
    import keras
    import numpy as np

    exact_float32(args.allow_tf32)
    images = np.random.default_rng(args.seed).uniform(0, 255, (args.images, args.size, args.size, 3))
    images = images.astype(np.float32)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            row = check(name, images, args.seed, Path(tmp))
            rows.append(row)
            fm, po = row["feature_map"], row["pooled"]
            print(f"{name:26s} -> {row['branch']}{' stem=' + row['stem'] if 'stem' in row else ''}: "
                  f"{row['tensors']} tensors; feature map max abs diff {fm['max_abs']:.3g} "
                  f"(rel {fm['rel']:.3g} of max {fm['max_ref']:.3g}); pooled max abs diff "
                  f"{po['max_abs']:.3g} (rel {po['rel']:.3g})", flush=True)
    ok = all(r["feature_map"]["rel"] <= 1e-4 and r["pooled"]["rel"] <= 1e-4 for r in rows)
    print(json.dumps({"backend": keras.backend.backend(), "torch": torch.__version__,
                      "timm": timm.__version__, "images": args.images, "size": args.size,
                      "tf32": bool(args.allow_tf32), "ok_rel_1e-4": ok, "results": rows}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
