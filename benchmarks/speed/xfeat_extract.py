"""XFeat's extraction per photo, now and the former way. Not a test.

    python benchmarks/speed/xfeat_extract.py [--photos 60] [--repeats 2] [--config configs/keypoints_xfeat_checked.yaml]

:class:`whale.keypoints.xfeat.XFeat` runs its network through ``predict_on_batch``: compiled by the Keras backend
(a TensorFlow graph, a JAX program) with the photo's size left open, so one trace serves every photo size. The
network's bilinear upsampling is the toolkit's own layer, which reads its sizes when it runs; Keras's
``UpSampling2D`` needs them when traced. Before, the network was called eagerly, op by op, because a compiled one
would have been traced again for every photo size. Around the network, the 5 x 5 suppression is OpenCV's dilation
(SciPy's maximum filter before) and the descriptors' bicubic reading gathers every tap at once (one gather and sum
a tap before); both give the same values. This times :func:`whale.keypoints.extract.extract` (the whole
step: reading, the network, suppression, descriptors) on ``--photos`` real flukes
(``../shared/data/humpback/train``, the first by name) under ``--config``, the former way (kept here) and today's
alternated ``--repeats`` times in one process (after one untimed pass each: loading, the trace), and prints
seconds per photo each way, the ratio, how far the two ways' features differ (the share of keypoints at the same
pixel, the largest difference of their stored descriptor bytes), and as its last line one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from whale.command import quiet_unless_debugging  # noqa: E402

quiet_unless_debugging()  # before anything imports the backend

import numpy as np  # noqa: E402


def eager(model, batch):
    """The former network call of ``XFeat.maps``: the model called eagerly, op by op."""
    return model(batch, training=False)


def former_local_maxima(heat, threshold=0.05, kernel=5):
    """The former ``xfeat.local_maxima``: SciPy's maximum filter."""
    from scipy.ndimage import maximum_filter

    peak = maximum_filter(heat, size=kernel, mode="constant", cval=-np.inf)
    ys, xs = np.nonzero((heat == peak) & (heat > threshold))
    return np.stack([xs, ys], axis=1).astype(np.int64)


def former_grid_sample(fmap, xy, size, mode):
    """The former ``xfeat.grid_sample``: one gather and one weighted sum per tap."""
    from whale.keypoints.xfeat import _cubic_weights

    h, w = fmap.shape[:2]
    gx = 2.0 * xy[:, 0].astype(np.float64) / (size[1] - 1) - 1.0
    gy = 2.0 * xy[:, 1].astype(np.float64) / (size[0] - 1) - 1.0
    px, py = ((gx + 1) * w - 1) / 2, ((gy + 1) * h - 1) / 2

    def tap(ix, iy):
        inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
        return fmap[np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)].astype(np.float64) * inside[:, None]

    if mode == "nearest":
        return tap(np.rint(px).astype(np.int64), np.rint(py).astype(np.int64)).astype(np.float32)
    x0, y0 = np.floor(px).astype(np.int64), np.floor(py).astype(np.int64)
    tx, ty = px - x0, py - y0
    if mode == "bilinear":
        wx, wy, offsets = [1 - tx, tx], [1 - ty, ty], (0, 1)
    else:
        wx, wy, offsets = _cubic_weights(tx), _cubic_weights(ty), (-1, 0, 1, 2)
    out = np.zeros((len(xy), fmap.shape[2]))
    for j, dy in enumerate(offsets):
        for i, dx in enumerate(offsets):
            out += (wx[i] * wy[j])[:, None] * tap(x0 + dx, y0 + dy)
    return out.astype(np.float32)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--photos", type=int, default=60)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--config", default=str(ROOT / "configs" / "keypoints_xfeat_checked.yaml"))
    p.add_argument("--source", default=str(ROOT.parent / "shared" / "data" / "humpback"))
    args = p.parse_args(argv)
    from whale.keypoints.config import load_keypoint_config
    from whale.keypoints.extract import extract
    from whale.keypoints import xfeat

    source = Path(args.source) / "train"
    if not source.is_dir():
        print(f"{source}: no photos here (the shared flukes sit beside the checkout); nothing measured")
        return 0
    paths = sorted(source.glob("*.jpg"))[:args.photos]
    cfg = load_keypoint_config(args.config).features
    net_class = type(xfeat.load().net)  # XFeat.maps calls its network's predict_on_batch: the former way, eagerly
    now = (net_class.predict_on_batch, xfeat.local_maxima, xfeat.grid_sample)
    ways = {"former": (eager, former_local_maxima, former_grid_sample), "now": now}
    seconds = {name: [] for name in ways}
    features = {}
    for rep in range(args.repeats + 1):  # the first pass of each way untimed
        for name, (call, maxima, sample) in ways.items():
            net_class.predict_on_batch, xfeat.local_maxima, xfeat.grid_sample = call, maxima, sample
            t0 = time.perf_counter()
            out = [extract(path, cfg) for path in paths]
            if rep:
                seconds[name].append((time.perf_counter() - t0) / len(paths))
            features[name] = out
    net_class.predict_on_batch, xfeat.local_maxima, xfeat.grid_sample = now
    per_photo = {name: float(np.median(v)) for name, v in seconds.items()}
    for name, v in per_photo.items():
        print(f"{name:>15}: {v:.3f} s a photo (median of {args.repeats} passes over {len(paths)} photos)")
    ratio = per_photo["former"] / per_photo["now"]
    a, b = features["former"], features["now"]
    common, kept, diff = 0, 0, 0
    for x, y in zip(a, b):  # keypoints at the same pixel both ways, and their stored descriptors' bytes
        pos = {tuple(v): i for i, v in enumerate(np.round(y.xy, 3).tolist())}
        pairs = [(i, pos[tuple(v)]) for i, v in enumerate(np.round(x.xy, 3).tolist()) if tuple(v) in pos]
        common += len(pairs)
        kept += max(len(x.xy), len(y.xy))
        if pairs:
            i, j = np.array(pairs).T
            diff = max(diff, int(np.abs(x.desc[i].astype(int) - y.desc[j].astype(int)).max()))
    share = common / max(kept, 1)
    print(f"now {ratio:.2f}x as fast; {share:.2%} of the keypoints are at the same pixel both ways (the "
          f"rest: near-ties of the score, ordered or suppressed the other way), their stored bytes differ by at "
          f"most {diff}")
    print(json.dumps({"benchmark": "xfeat_extract", "photos": len(paths), "config": Path(args.config).name,
                      "seconds_per_photo": per_photo, "ratio": ratio, "same_keypoints_share": share,
                      "max_byte_diff": diff}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
