"""A synthetic competition in the format of Kaggle's Humpback Whale Identification (or Happywhale 2022).

``generate(out)`` writes a folder that ``whale.data.load_competition`` reads like the real
one::

    out/train.csv               Image,Id        (``new_whale`` for individuals seen once)
    out/train/*.jpg
    out/test/*.jpg
    out/sample_submission.csv   Image,Id        Id = "new_whale" + the 4 most common ids
    out/bounding_boxes.csv      Image,x0,y0,x1,y1   true fluke box of every train and test image
    out/test_solution.csv       Image,Id        the truth, for local MAP@5

Every individual is a fluke silhouette (two lobes, a central notch) with a fixed identity
pattern: white/black pigmentation blobs, speckles, scars and trailing-edge notches. The
pattern is a pure function of the individual's 7-hex key (``w_<key>`` for known ids), so an
id looks the same whatever the seed or image size. Each sighting is a new modest viewpoint
(perspective homography), scale and position in a sea-and-sky frame, with lighting change,
blur, noise, JPEG quality 40-95, and 5% of images saved as 1-channel gray JPEGs.

How many images each id gets follows the real competition's long tail (``REAL_IMAGES_PER_ID``,
scaled to ``n_ids`` by stratified quantiles). About 38% of train rows are ``new_whale`` and
about 27.6% of test rows are unseen individuals, as in the real data.

Everything is drawn from ``np.random.Generator``s seeded from ``seed`` (layout) or from the
image name (rendering), so the same seed gives the same bytes.

``fmt="happywhale2022"`` (``--format``) writes the same individuals and photos in the Happywhale
2022 layout (:mod:`whale.formats`)::

    out/train.csv               image,species,individual_id   (every row an individual: no open-set rows)
    out/train_images/*.jpg, out/test_images/*.jpg
    out/sample_submission.csv   image,predictions   "new_individual" + the 4 most common ids
    out/test_solution.csv       image,species,individual_id   new_individual for unseen individuals
    out/bounding_boxes.csv      Image,x0,y0,x1,y1   (the toolkit's optional boxes, as for 2019)

The individuals 2019 labels ``new_whale`` in train are singletons with their own id there (as
Kaggle's 2022 data has many); individual ids are 12 hex digits. Species is an attribute of the
individual (``species`` names from Kaggle's list, misspellings included), drawn from its key,
and tints its skin, so a species is also a colour family.

Command line::

    python -m whale.data.synth --out DIR [--ids N] [--seed S] [--size PX] [--duplicates N] [--force]
                               [--format happywhale2022 [--species N]]

``duplicates`` plants near-duplicates (a train image re-encoded a little brighter or darker, at
another JPEG quality), in turn: a train copy with the same id, a train copy labelled
``new_whale`` (a conflicting label), a test copy whose true id is the original's. They are
listed in ``planted_duplicates.csv`` (``Image,Of,Kind``) to test :mod:`whale.duplicates`.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whale import NEW_WHALE, command
from whale.errors import WRITE_ERRNOS, OutputError, WhaleError, describe_write_error
from whale.files import check_output
from whale.formats import FORMATS, HUMPBACK2019, Format, get_format

# Real Kaggle 2019 train.csv: number of images per known id -> number of ids with that many
# (5,004 ids, 15,697 images; new_whale excluded).
REAL_IMAGES_PER_ID: dict[int, int] = {
    1: 2073, 2: 1285, 3: 568, 4: 273, 5: 172, 6: 136, 7: 86, 8: 76, 9: 62, 10: 46,
    11: 39, 12: 26, 13: 14, 14: 16, 15: 19, 16: 16, 17: 17, 18: 6, 19: 8, 20: 7,
    21: 7, 22: 5, 23: 4, 24: 7, 25: 2, 27: 1, 29: 2, 30: 3, 31: 3, 32: 1,
    33: 1, 34: 2, 35: 1, 36: 1, 37: 3, 40: 3, 45: 2, 47: 1, 48: 1, 49: 1,
    50: 1, 51: 1, 54: 1, 57: 1, 61: 1, 62: 1, 65: 1, 73: 1,
}
# Real shares: 9,664 new_whale train rows per 15,697 known ones; test has 7,960 rows of
# which ~27.6% are new_whale, so ~5,763 known test rows per 15,697 known train rows.
NEW_PER_KNOWN_TRAIN = 9664 / 15697
TEST_KNOWN_PER_KNOWN_TRAIN = 7960 * (1 - 0.276) / 15697
TEST_NEW_SHARE = 0.276

_OUTPUT_FILES = ("train.csv", "sample_submission.csv", "bounding_boxes.csv", "test_solution.csv",
                 "planted_duplicates.csv")
_DUPLICATE_KINDS = ("train", "conflict", "test")
SPECIES_2022 = ("humpback_whale", "bottlenose_dolpin", "beluga", "kiler_whale", "globis", "pilot_whale",
                "blue_whale", "false_killer_whale", "dusky_dolphin", "melon_headed_whale", "minke_whale",
                "fin_whale", "gray_whale", "southern_right_whale", "common_dolphin", "spinner_dolphin")
"""Species labels of Kaggle's 2022 ``train.csv`` (a selection, its misspellings kept): the first
``n_species`` are used."""
_TEMPLATE_SEED = 0x5EA1  # salt for pattern rngs, so they differ from layout rngs
# Template canvas in fluke units (span = 1): x in [-PAD, 1 + PAD], y in [-TOP, BOTTOM].
_PAD, _TOP, _BOTTOM = 0.03, 0.14, 0.56


# --------------------------------------------------------------------------------------
# Layout: how many images each id gets, and which images go where.
# --------------------------------------------------------------------------------------
def sample_counts(n_ids: int, rng: np.random.Generator) -> np.ndarray:
    """Draw images-per-id for ``n_ids`` known ids from the real long tail.

    Stratified quantiles: id ``i`` gets the real distribution's quantile at
    ``(i + U(0,1)) / n_ids``, then the counts are shuffled. This keeps the tail shape even for
    a handful of ids (many ids with 1-2 images, a few with many). At least ``min(n_ids, 2)``
    ids get 4 or more images so that the 4-fold rules have something to split.

    Returns: ``int64`` array ``[n_ids]``, every value >= 1.
    """
    if n_ids < 1:
        raise WhaleError(f"sample_counts: expected n_ids >= 1, received {n_ids}")
    values = np.array(sorted(REAL_IMAGES_PER_ID), dtype=np.int64)
    weights = np.array([REAL_IMAGES_PER_ID[v] for v in values], dtype=np.float64)
    cdf = np.cumsum(weights) / weights.sum()
    u = (np.arange(n_ids) + rng.random(n_ids)) / n_ids
    idx = np.minimum(np.searchsorted(cdf, u, side="right"), len(values) - 1)
    counts = values[idx]
    need = min(n_ids, 2)
    order = np.argsort(-counts, kind="stable")
    counts[order[:need]] = np.maximum(counts[order[:need]], 4)
    return rng.permutation(counts)


def _unique_hex(rng: np.random.Generator, n: int, digits: int, taken: set[str]) -> list[str]:
    """``n`` distinct lowercase hex strings of ``digits`` digits not in ``taken`` (updated)."""
    out: list[str] = []
    while len(out) < n:
        for v in rng.integers(0, 16**digits, size=n - len(out), dtype=np.int64):
            s = f"{int(v):0{digits}x}"
            if s not in taken:
                taken.add(s)
                out.append(s)
    return out


@dataclass(frozen=True)
class _Sighting:
    image: str  # file name, "0a1b2c3d.jpg"
    split: str  # "train" | "test"
    key: str  # 7-hex key of the individual (its pattern seed)
    label: str  # "w_<key>" or NEW_WHALE


def _plan(n_ids: int, rng: np.random.Generator) -> list[_Sighting]:
    """Decide every image: its name, split, individual and label (no pixels yet)."""
    counts = sample_counts(n_ids, rng)
    n_known_train = int(counts.sum())
    n_test_known = max(1, int(round(TEST_KNOWN_PER_KNOWN_TRAIN * n_known_train)))
    # Test sightings of known ids go to ids in proportion to their train images (+0.5 so
    # ids with one train image are seen in test too, as in the real data).
    p = (counts + 0.5) / (counts + 0.5).sum()
    test_counts = rng.multinomial(n_test_known, p)
    n_new_train = int(round(NEW_PER_KNOWN_TRAIN * n_known_train))
    n_new_test = max(1, int(round(TEST_NEW_SHARE / (1 - TEST_NEW_SHARE) * n_test_known)))

    taken: set[str] = set()
    keys = _unique_hex(rng, n_ids + n_new_train + n_new_test, 7, taken)
    n_images = n_known_train + n_test_known + n_new_train + n_new_test
    names = [f"{h}.jpg" for h in _unique_hex(rng, n_images, 8, set())]

    plan: list[_Sighting] = []
    it = iter(names)
    for key, n_tr, n_te in zip(keys[:n_ids], counts, test_counts):
        plan += [_Sighting(next(it), "train", key, f"w_{key}") for _ in range(int(n_tr))]
        plan += [_Sighting(next(it), "test", key, f"w_{key}") for _ in range(int(n_te))]
    for key in keys[n_ids:n_ids + n_new_train]:
        plan.append(_Sighting(next(it), "train", key, NEW_WHALE))
    for key in keys[n_ids + n_new_train:]:
        plan.append(_Sighting(next(it), "test", key, NEW_WHALE))
    return plan


# --------------------------------------------------------------------------------------
# The individual: silhouette and identity pattern, a pure function of its key.
# --------------------------------------------------------------------------------------
def _bezier(p0, p1, p2, p3, n: int) -> np.ndarray:
    """Cubic Bezier through control points (x, y); returns float64 ``[n, 2]``."""
    t = np.linspace(0.0, 1.0, n)[:, None]
    p0, p1, p2, p3 = (np.asarray(p, dtype=np.float64) for p in (p0, p1, p2, p3))
    return (1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * p1 + 3 * (1 - t) * t**2 * p2 + t**3 * p3


def _smooth_noise(rng: np.random.Generator, n: int, knots: int) -> np.ndarray:
    """Smooth random curve, float64 ``[n]``, roughly in [-1, 1]."""
    k = rng.uniform(-1.0, 1.0, knots)
    return np.interp(np.linspace(0, knots - 1, n), np.arange(knots), k)


def _fluke_outline(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Silhouette polygon and trailing-edge polyline in fluke units (span 1, y down).

    Returns ``(polygon [m, 2] float64, trailing_edge [k, 2] float64)``.
    """
    n = 64
    notch_x = 0.5 + rng.uniform(-0.015, 0.015)
    notch_y = rng.uniform(0.17, 0.24)
    halves = []
    for side in (-1, 1):  # left lobe, right lobe
        tip = (0.5 + side * 0.5, rng.uniform(0.0, 0.1))
        shoulder = (notch_x + side * rng.uniform(0.03, 0.05), rng.uniform(0.10, 0.15))
        bulge = rng.uniform(0.0, 0.07)
        trail = _bezier(tip, (0.5 + side * 0.38, tip[1] - bulge),
                        (0.5 + side * 0.15, shoulder[1] - bulge / 2), shoulder, n)
        trail[:, 1] += 0.004 * _smooth_noise(rng, n, 12)  # ragged edge
        for _ in range(int(rng.integers(0, 4))):  # notches cut into the trailing edge
            c = rng.uniform(0.1, 0.9)
            hw, depth = rng.uniform(0.012, 0.03), rng.uniform(0.02, 0.045)
            t = np.linspace(0, 1, n)
            trail[:, 1] += depth * np.clip(1 - np.abs(t - c) / (hw / 0.45), 0, None)
        root = (0.5 + side * rng.uniform(0.07, 0.09), rng.uniform(0.38, 0.43))
        lead = _bezier(tip, (tip[0] - side * rng.uniform(0.0, 0.06), tip[1] + rng.uniform(0.15, 0.25)),
                       (0.5 + side * rng.uniform(0.2, 0.3), rng.uniform(0.38, 0.48)), root, n)
        halves.append((trail, lead))
    (trail_l, lead_l), (trail_r, lead_r) = halves
    stalk_w = rng.uniform(0.05, 0.07)
    notch = np.array([[notch_x, notch_y]])
    trailing = np.vstack([trail_l, notch, trail_r[::-1]])
    polygon = np.vstack([
        trailing,
        lead_r,
        [[0.5 + stalk_w, _BOTTOM], [0.5 - stalk_w, _BOTTOM]],
        lead_l[::-1],
    ])
    return polygon, trailing


def _blob(rng: np.random.Generator, center, a: float, b: float, angle: float) -> np.ndarray:
    """Irregular ellipse polygon in fluke units, float64 ``[24, 2]``."""
    th = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    r = 1.0 + 0.25 * _smooth_noise(rng, 25, 7)[:24]
    x, y = a * r * np.cos(th), b * r * np.sin(th)
    c, s = np.cos(angle), np.sin(angle)
    return np.stack([center[0] + c * x - s * y, center[1] + s * x + c * y], axis=1)


@dataclass(frozen=True)
class _Fluke:
    """A rendered individual: ``rgb`` float32 ``[h, w, 3]`` 0..255, ``alpha`` float32 ``[h, w]``."""

    rgb: np.ndarray
    alpha: np.ndarray


def _render_fluke(key: str, width: int) -> _Fluke:
    """Draw the individual ``key`` (7 hex) on a canvas ``width`` px wide.

    The drawing is a pure function of ``key``; ``width`` only sets the resolution.
    """
    import cv2

    rng = np.random.default_rng([_TEMPLATE_SEED, int(key, 16)])
    s = width / (1 + 2 * _PAD)
    height = int(round((_TOP + _BOTTOM) * s))
    shift = 4  # sub-pixel bits for cv2 drawing

    def px(pts: np.ndarray) -> np.ndarray:
        q = np.empty_like(pts)
        q[:, 0] = (pts[:, 0] + _PAD) * s
        q[:, 1] = (pts[:, 1] + _TOP) * s
        return np.round(q * (1 << shift)).astype(np.int32)

    polygon, trailing = _fluke_outline(rng)
    mask = np.zeros((height, width), np.uint8)
    cv2.fillPoly(mask, [px(polygon)], 255, cv2.LINE_AA, shift)

    style = rng.choice(3, p=[0.5, 0.25, 0.25])  # dark base, white base, half-and-half
    dark, light = rng.uniform(15, 60), rng.uniform(185, 245)
    base, ink = (dark, light) if style != 1 else (light, dark)
    pat = np.full((height, width), base, np.float32)
    if style == 2:  # a large light region over one side or the middle, as often seen
        cx = rng.choice([0.25, 0.5, 0.75]) + rng.uniform(-0.05, 0.05)
        cv2.fillPoly(pat, [px(_blob(rng, (cx, 0.25), rng.uniform(0.18, 0.28),
                                    rng.uniform(0.12, 0.2), rng.uniform(-0.4, 0.4)))],
                     float(light), cv2.LINE_AA, shift)
    ys, xs = np.nonzero(mask > 128)
    for _ in range(int(rng.integers(4, 10))):  # big blobs: >= ~1/10 of the span across
        i = rng.integers(len(xs))
        c = (xs[i] / s - _PAD, ys[i] / s - _TOP)
        a = rng.uniform(0.05, 0.1)
        col = ink if rng.random() < 0.75 else base
        cv2.fillPoly(pat, [px(_blob(rng, c, a, a * rng.uniform(0.6, 1.0), rng.uniform(0, np.pi)))],
                     float(col + rng.uniform(-15, 15)), cv2.LINE_AA, shift)
    for _ in range(int(rng.integers(0, 12))):  # speckles
        i = rng.integers(len(xs))
        r = rng.uniform(0.01, 0.022)
        col = ink if rng.random() < 0.7 else base
        cv2.fillPoly(pat, [px(_blob(rng, (xs[i] / s - _PAD, ys[i] / s - _TOP), r, r, 0.0))],
                     float(col), cv2.LINE_AA, shift)
    for _ in range(int(rng.integers(1, 4))):  # scars, sometimes parallel rake marks
        i = rng.integers(len(xs))
        p0 = np.array([xs[i] / s - _PAD, ys[i] / s - _TOP])
        ang, length = rng.uniform(0, np.pi), rng.uniform(0.1, 0.3)
        d = np.array([np.cos(ang), np.sin(ang)])
        normal = np.array([-d[1], d[0]])
        thick = max(1, int(round(rng.uniform(0.012, 0.02) * s)))
        col = float(min(255.0, (255 + base) / 2 + 40) if base < 128 else max(0.0, base / 2 - 20))
        for j in range(int(rng.choice([1, 1, 2, 3]))):
            q = p0 + j * 0.035 * normal
            seg = np.stack([q - d * length / 2, q + d * length / 2])
            a_, b_ = px(seg)
            cv2.line(pat, tuple(int(v) for v in a_), tuple(int(v) for v in b_), col, thick,
                     cv2.LINE_AA, shift)
    cv2.polylines(pat, [px(trailing)], False, float(dark * 0.6), max(1, int(round(0.012 * s))),
                  cv2.LINE_AA, shift)
    pat = cv2.GaussianBlur(pat, (0, 0), max(0.5, 0.0025 * s))
    tint = rng.uniform(0.94, 1.06, 3).astype(np.float32)
    rgb = np.clip(pat[:, :, None] * tint, 0, 255).astype(np.float32)

    alpha = mask.astype(np.float32) / 255.0
    # The stalk enters the water: fade its lowest part.
    fade_top = int((_TOP + _BOTTOM - 0.1) * s)
    ramp = np.clip(1 - (np.arange(height) - fade_top) / (0.08 * s), 0, 1).astype(np.float32)
    alpha *= ramp[:, None]
    return _Fluke(rgb=rgb, alpha=alpha)


# --------------------------------------------------------------------------------------
# A sighting: background, viewpoint, lighting, camera.
# --------------------------------------------------------------------------------------
def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Sky gradient over a textured sea; float32 ``[h, w, 3]`` RGB 0..255."""
    import cv2

    horizon = 0.0 if rng.random() < 0.3 else rng.uniform(0.12, 0.45) * h
    tilt = np.tan(np.deg2rad(rng.uniform(-3, 3)))
    yy = np.arange(h, dtype=np.float32)[:, None]
    xx = np.arange(w, dtype=np.float32)[None, :]
    hline = horizon + tilt * (xx - w / 2)
    sky_top = rng.uniform([120, 150, 180], [200, 215, 250])
    sky_hor = np.clip(sky_top + rng.uniform(20, 60), 0, 255)
    t_sky = np.clip(yy / max(horizon, 1.0), 0, 1)[..., None]
    sky = sky_top * (1 - t_sky) + sky_hor * t_sky
    sea_far = rng.uniform([40, 70, 90], [120, 140, 160])
    sea_near = sea_far * rng.uniform(0.5, 0.9)
    t_sea = np.clip((yy - hline) / max(h - horizon, 1.0), 0, 1)[..., None]
    sea = sea_far * (1 - t_sea) + sea_near * t_sea
    # Waves: horizontally stretched noise at two scales, plus ripples.
    amp = rng.uniform(8, 25)
    coarse = cv2.resize(rng.standard_normal((h // 8 + 2, w // 24 + 2)).astype(np.float32), (w, h),
                        interpolation=cv2.INTER_CUBIC)
    fine = cv2.resize(rng.standard_normal((h // 3 + 2, w // 8 + 2)).astype(np.float32), (w, h),
                      interpolation=cv2.INTER_LINEAR)
    ripple = np.sin(yy * rng.uniform(0.3, 0.8) * 256 / w + rng.uniform(0, 6.3) + 0.5 * coarse)
    waves = amp * (0.5 * coarse + 0.35 * fine + 0.3 * ripple)
    sea = sea + waves[..., None]
    is_sea = (yy >= hline)[..., None]
    return np.where(is_sea, sea, sky).astype(np.float32)


def _pose_fluke(fluke: _Fluke, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    """This sighting's fluke in template space: flexed, partly submerged, unevenly lit.

    The real flukes bend (tips up or down, one lobe higher), sink to different depths, and
    carry shadows and water; these break pixel alignment without hiding the pattern.
    Returns ``(rgb float32 [th, tw, 3], alpha float32 [th, tw], waterline)``, the last the
    template row (px) where the fluke leaves the water.
    """
    import cv2

    th, tw = fluke.alpha.shape
    s = tw / (1 + 2 * _PAD)
    x = np.arange(tw, dtype=np.float32) / s - _PAD - 0.5  # -0.5 .. 0.5 across the span
    bend, twist = rng.uniform(-0.08, 0.08), rng.uniform(-0.06, 0.06)
    wobble = 0.012 * _smooth_noise(rng, tw, 5).astype(np.float32)
    dy = (bend * (2 * x) ** 2 + twist * 2 * x + wobble) * s  # px, positive = lower
    yy, xx = np.mgrid[0:th, 0:tw].astype(np.float32)
    map_y = yy - dy[None, :]
    rgb = cv2.remap(fluke.rgb, xx, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    alpha = cv2.remap(fluke.alpha, xx, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)

    waterline = (_TOP + _BOTTOM - 0.06) * s
    if rng.random() < 0.35:  # sinking: the sea covers the lower part
        cut = (_TOP + rng.uniform(0.3, 0.45)) * s
        waterline = cut - 0.015 * s
        ramp = np.clip((cut - np.arange(th, dtype=np.float32)) / (0.03 * s), 0, 1)
        alpha = alpha * ramp[:, None]
    # Light falling unevenly: a gradient across, and a soft shadow or highlight.
    gain = np.linspace(rng.uniform(0.75, 1.15), rng.uniform(0.75, 1.15), tw, dtype=np.float32)
    light = np.broadcast_to(gain[None, :], (th, tw)).copy()
    if rng.random() < 0.5:
        spot = np.zeros((th, tw), np.float32)
        c = (int(rng.uniform(0.1, 0.9) * tw), int(rng.uniform(0.2, 0.8) * th))
        ax = (int(rng.uniform(0.1, 0.3) * tw), int(rng.uniform(0.1, 0.3) * tw))
        cv2.ellipse(spot, c, ax, float(rng.uniform(0, 180)), 0, 360, 1.0, -1)
        spot = cv2.GaussianBlur(spot, (0, 0), 0.04 * tw)
        light *= 1 + rng.choice([-0.45, 0.6]) * rng.uniform(0.5, 1.0) * spot
    rgb = rgb * light[..., None]
    if rng.random() < 0.5:  # water pouring off the trailing edge
        for _ in range(int(rng.integers(2, 7))):
            x0 = int(rng.uniform(0.05, 0.95) * tw)
            wd = max(1, int(rng.uniform(0.005, 0.015) * tw))
            rgb[:, x0:x0 + wd] = 0.5 * rgb[:, x0:x0 + wd] + 0.5 * rng.uniform(150, 230)
    return rgb, alpha, float(waterline)


def _render_sighting(fluke: _Fluke, rng: np.random.Generator, size: int):
    """One photo of ``fluke``.

    Returns ``(image, box)``: ``image`` uint8 ``[h, w, 3]`` RGB or ``[h, w]`` gray with
    ``w = size``; ``box`` ``(x0, y0, x1, y1)`` ints, x1/y1 exclusive, inside the image.
    """
    import cv2

    w = size
    h = int(round(size * rng.uniform(0.6, 0.9)))
    frame = _background(rng, h, w)
    th, tw = fluke.alpha.shape

    # Viewpoint: scale, pitch (vertical squash), yaw (one side smaller), roll, jitter.
    span = rng.uniform(0.3, 0.8) * w
    sx = span / tw
    sy = sx * rng.uniform(0.7, 1.1)
    yaw = rng.uniform(-0.25, 0.25)
    half_w, half_h = tw * sx / 2, th * sy / 2
    dst = np.array([[-half_w, -half_h * (1 - yaw)], [half_w, -half_h * (1 + yaw)],
                    [half_w, half_h * (1 + yaw)], [-half_w, half_h * (1 - yaw)]])
    roll = np.deg2rad(rng.uniform(-15, 15))
    rot = np.array([[np.cos(roll), -np.sin(roll)], [np.sin(roll), np.cos(roll)]])
    dst = dst @ rot.T + rng.normal(0, 0.03 * span, (4, 2))
    ext = dst.max(0) - dst.min(0)
    fit = min(1.0, 0.95 * w / ext[0], 0.95 * h / ext[1])
    dst *= fit
    lo, hi = dst.min(0), dst.max(0)
    # Where the fluke may sit, a pixel inside each border; in a small frame the jitter above can leave no
    # room for that (the range's ends cross): the fluke is centred then (one draw either way, so larger
    # sizes keep their images).
    low, high = np.array([1.0, 1.0]) - lo, np.array([w - 1.0, h - 1.0]) - hi
    low, high = np.where(high < low, (low + high) / 2, low), np.maximum(high, (low + high) / 2)
    off = np.array([rng.uniform(low[0], high[0]), rng.uniform(low[1], high[1])])
    dst = (dst + off).astype(np.float32)
    src = np.array([[0, 0], [tw, 0], [tw, th], [0, th]], np.float32)
    m = cv2.getPerspectiveTransform(src, dst)

    rgb, alpha, waterline = _pose_fluke(fluke, rng)
    warped = cv2.warpPerspective(rgb, m, (w, h), flags=cv2.INTER_LINEAR)
    a = cv2.warpPerspective(alpha, m, (w, h), flags=cv2.INTER_LINEAR)
    frame = frame * (1 - a[..., None]) + warped * a[..., None]

    rows, cols = np.nonzero(a > 0.5)
    box = (int(cols.min()), int(rows.min()), int(cols.max()) + 1, int(rows.max()) + 1)

    if rng.random() < 0.6:  # foam where the stalk meets the water
        base = cv2.perspectiveTransform(np.array([[[tw / 2, waterline]]], np.float32), m)[0, 0]
        foam = np.zeros((h, w), np.float32)
        axes = (max(1, int(0.12 * span * fit)), max(1, int(0.025 * span * fit)))
        cv2.ellipse(foam, (int(base[0]), int(base[1])), axes, 0, 0, 360, 1.0, -1, cv2.LINE_AA)
        foam *= rng.uniform(0.4, 0.9) * (rng.random((h, w)) > 0.3)
        frame = frame * (1 - foam[..., None]) + rng.uniform(200, 245) * foam[..., None]
    if rng.random() < 0.3:  # spray or a splash over part of the fluke
        spray = np.zeros((h, w), np.float32)
        cx, cy = rng.uniform(box[0], box[2]), rng.uniform(box[1], box[3])
        for _ in range(int(rng.integers(3, 9))):
            r = max(1, int(rng.uniform(0.03, 0.08) * span * fit))
            c = (int(cx + rng.normal(0, 0.08 * span * fit)), int(cy + rng.normal(0, 0.05 * span * fit)))
            cv2.circle(spray, c, r, 1.0, -1)
        spray = cv2.GaussianBlur(spray, (0, 0), max(0.5, 0.015 * span * fit))
        spray *= rng.uniform(0.5, 0.9) * rng.uniform(0.6, 1.0, (h, w)).astype(np.float32)
        frame = frame * (1 - spray[..., None]) + rng.uniform(200, 250) * spray[..., None]

    # Lighting: gain, offset, gamma, colour cast.
    frame = frame * rng.uniform(0.7, 1.3) + rng.uniform(-30, 30)
    frame = np.clip(frame, 0, 255) / 255.0
    frame = 255.0 * frame ** rng.uniform(0.7, 1.4)
    frame *= rng.uniform(0.9, 1.1, 3)
    if rng.random() < 0.6:
        frame = cv2.GaussianBlur(frame.astype(np.float32), (0, 0), rng.uniform(0.3, 1.6) * size / 256)
    frame = frame + rng.normal(0, rng.uniform(2, 10), frame.shape)
    img = np.clip(np.round(frame), 0, 255).astype(np.uint8)
    if rng.random() < 0.05:
        img = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    return img, box


def _encode_jpeg(img: np.ndarray, quality: int) -> bytes:
    """JPEG bytes of an RGB ``[h, w, 3]`` or gray ``[h, w]`` uint8 image."""
    import cv2

    bgr = img if img.ndim == 2 else cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise WhaleError(f"could not encode a {img.shape} image as JPEG")
    return buf.tobytes()


# --------------------------------------------------------------------------------------
# Writing the folder.
# --------------------------------------------------------------------------------------
def _individual_id(key: str) -> str:
    """The 2022-style id (12 hex digits) of the individual with 7-hex ``key``."""
    return key + key[:5]


def _species_of(key: str, n_species: int) -> int:
    """Index into :data:`SPECIES_2022` of the individual ``key``: a pure function of the key."""
    return int(key, 16) % n_species


def _species_tint(index: int, n_species: int) -> np.ndarray:
    """``[3]`` float32 RGB gain of species ``index``: evenly spaced hues, +-15%."""
    phase = 2 * np.pi * index / max(n_species, 1)
    return (1 + 0.15 * np.cos(phase + np.array([0.0, 2.0, 4.0]) * np.pi / 3)).astype(np.float32)


def _folders(fmt: Format) -> dict[str, str]:
    """Split (``train``, ``test``) -> image folder of the format."""
    return {"train": fmt.train_dir, "test": fmt.test_dir}


def _prepare_out(out: Path, force: bool, fmt: Format = HUMPBACK2019) -> None:
    """Create ``out``; refuse a non-empty one unless ``force`` (then clear our own files)."""
    if out.exists() and not out.is_dir():
        raise WhaleError(f"{out}: expected a directory for the synthetic competition, found a file")
    if out.exists() and any(out.iterdir()):
        if not force:
            raise WhaleError(f"{out}: expected an empty or missing directory, found files in it "
                             "(pass force=True / --force to overwrite)")
        for name in _OUTPUT_FILES:
            (out / name).unlink(missing_ok=True)
        for sub in _folders(fmt).values():
            if (out / sub).is_dir():
                for f in (out / sub).glob("*.jpg"):
                    f.unlink()
    for sub in _folders(fmt).values():
        (out / sub).mkdir(parents=True, exist_ok=True)


def _plant_duplicates(out: Path, plan: list[_Sighting], boxes: dict, n: int,
                      rng: np.random.Generator) -> list[tuple[_Sighting, str, str]]:
    """Write ``n`` near-duplicates of known-id train images; returns ``(sighting, of, kind)`` each."""
    import cv2

    sources = [sg for sg in plan if sg.split == "train" and sg.label != NEW_WHALE]
    if n > len(sources):
        raise WhaleError(f"{out}: {n} duplicates asked for, but only {len(sources)} known-id train images")
    taken = {sg.image[:8] for sg in plan}
    names = _unique_hex(rng, n, 8, taken)
    planted = []
    for k, (src, name) in enumerate(zip(rng.choice(len(sources), n, replace=False), names)):
        sg, kind = sources[int(src)], _DUPLICATE_KINDS[k % 3]
        img = cv2.imdecode(np.frombuffer((out / "train" / sg.image).read_bytes(), np.uint8), cv2.IMREAD_UNCHANGED)
        img = np.clip(img.astype(np.int16) + int(rng.choice([-1, 1]) * rng.integers(4, 12)), 0, 255).astype(np.uint8)
        ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(60, 92))])
        copy = _Sighting(f"{name}.jpg", "test" if kind == "test" else "train", sg.key,
                         NEW_WHALE if kind == "conflict" else sg.label)
        (out / copy.split / copy.image).write_bytes(buf.tobytes())
        boxes[copy.image] = boxes[sg.image]
        planted.append((copy, sg.image, kind))
    return planted


def generate(out, n_ids: int = 200, seed: int = 0, size: int = 256, *, force: bool = False,
             progress: bool = True, duplicates: int = 0, fmt: str | Format = HUMPBACK2019,
             n_species: int = 4) -> Path:
    """Write a synthetic competition with ``n_ids`` known ids into folder ``out``.

    ``size`` is the width in pixels of every image (heights 0.6-0.9 x size). ``out`` must be
    missing or empty unless ``force`` (then the files this function writes are replaced).
    ``progress`` shows a tqdm bar and prints a summary on stderr. ``duplicates``: how many
    near-duplicates to plant (module docstring; 0 = none, the same bytes as before; 2019 only).
    ``fmt``: the layout (:mod:`whale.formats`); ``n_species``: species of the 2022 layout
    (1..len(SPECIES_2022)). Returns ``Path(out)``.
    """
    import pandas as pd

    out = Path(out)
    fmt = get_format(fmt)
    if int(n_ids) < 1:
        raise WhaleError(f"{out}: expected n_ids >= 1, received {n_ids}")
    if int(size) < 32:
        raise WhaleError(f"{out}: expected size >= 32 pixels, received {size}")
    if fmt.species_column is not None and not 1 <= int(n_species) <= len(SPECIES_2022):
        raise WhaleError(f"{out}: expected 1 <= n_species <= {len(SPECIES_2022)}, received {n_species}")
    if duplicates and fmt != HUMPBACK2019:
        raise WhaleError(f"{out}: planted duplicates exist for the {HUMPBACK2019.name} layout only, "
                         f"received duplicates={duplicates} with {fmt.name}")
    n_ids, seed, size, n_species = int(n_ids), int(seed), int(size), int(n_species)
    _prepare_out(out, force, fmt)
    folder = _folders(fmt)

    t0 = time.perf_counter()
    plan = _plan(n_ids, np.random.default_rng([seed, 0]))
    by_key: dict[str, list[_Sighting]] = {}
    for sg in plan:
        by_key.setdefault(sg.key, []).append(sg)

    boxes: dict[str, tuple[int, int, int, int]] = {}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), desc="synth", unit="img", file=sys.stderr)
    for key, sightings in by_key.items():
        fluke = _render_fluke(key, size)
        if fmt.species_column is not None:
            tint = _species_tint(_species_of(key, n_species), n_species)
            fluke = _Fluke(rgb=np.clip(fluke.rgb * tint, 0, 255), alpha=fluke.alpha)
        for sg in sightings:
            rng = np.random.default_rng([seed, 1, int(sg.image[:8], 16)])
            img, box = _render_sighting(fluke, rng, size)
            quality = int(rng.integers(40, 96))
            (out / folder[sg.split] / sg.image).write_bytes(_encode_jpeg(img, quality))
            boxes[sg.image] = box
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    if duplicates:
        planted = _plant_duplicates(out, plan, boxes, int(duplicates), np.random.default_rng([seed, 2]))
        plan = plan + [sg for sg, _, _ in planted]
        pd.DataFrame([(sg.image, of, kind) for sg, of, kind in planted],
                     columns=["Image", "Of", "Kind"]).to_csv(out / "planted_duplicates.csv", index=False)

    if fmt == HUMPBACK2019:
        rows = [(s.image, s.split, s.label) for s in plan]
        columns = ["Image", "Id"]
    else:  # 2022: train's "new_whale" individuals are singletons; unseen test ones new_individual
        rows = [(s.image, s.split, SPECIES_2022[_species_of(s.key, n_species)],
                 fmt.open_label if s.label == NEW_WHALE and s.split == "test" else _individual_id(s.key))
                for s in plan]
        columns = list(fmt.train_columns)
    train = pd.DataFrame([(r[0], *r[2:]) for r in rows if r[1] == "train"], columns=columns)
    train = train.sort_values(columns[0], kind="stable").reset_index(drop=True)
    test = pd.DataFrame([(r[0], *r[2:]) for r in rows if r[1] == "test"], columns=columns)
    test = test.sort_values(columns[0], kind="stable").reset_index(drop=True)
    train.to_csv(out / "train.csv", index=False)
    test.to_csv(out / "test_solution.csv", index=False)

    image_col, id_col = fmt.image_column, fmt.id_column
    known = train[train[id_col] != fmt.open_label][id_col].value_counts()
    top = sorted(known.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
    placeholder = " ".join([fmt.open_label] + [k for k, _ in top])
    pd.DataFrame({fmt.submission_columns[0]: test[image_col], fmt.submission_columns[1]: placeholder}).to_csv(
        out / "sample_submission.csv", index=False)

    box_rows = [(name, *boxes[name]) for name in sorted(boxes)]
    pd.DataFrame(box_rows, columns=["Image", "x0", "y0", "x1", "y1"]).to_csv(out / "bounding_boxes.csv", index=False)

    if progress:
        label = fmt.open_label
        n_new_train = int((train[id_col] == label).sum())
        n_new_test = int((test[id_col] == label).sum())
        species = f", {train[fmt.species_column].nunique()} species" if fmt.species_column else ""
        print(f"synth: {out}  seed={seed} size={size} format={fmt.name}  {time.perf_counter() - t0:.1f} s\n"
              f"  train: {len(train)} images, {len(known)} ids{species}, "
              f"{n_new_train} {label} ({n_new_train / max(len(train), 1):.0%}), "
              f"ids with 1/2/3/4+ images: {(known == 1).sum()}/{(known == 2).sum()}/"
              f"{(known == 3).sum()}/{(known >= 4).sum()}, max {known.max()}\n"
              f"  test:  {len(test)} images, {n_new_test} {label} ({n_new_test / max(len(test), 1):.0%})",
              file=sys.stderr)
    return out


PROG = "python -m whale.data.synth"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 on bad input, see :func:`whale.command.main`)."""
    return command.main(PROG, add_arguments, run, argv)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``python -m whale.data.synth`` and ``whale synth`` (:mod:`whale.command`)."""
    parser.description = ("Write a synthetic Kaggle Humpback Whale Identification competition "
                          "(train.csv, train/, test/, sample_submission.csv, bounding_boxes.csv, "
                          "test_solution.csv).")
    parser.add_argument("--out", required=True, type=Path, help="output folder (created)")
    parser.add_argument("--ids", type=int, default=200, help="number of known ids (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--size", type=int, default=256, help="image width in pixels (default 256)")
    parser.add_argument("--duplicates", type=int, default=0, help="near-duplicates to plant (default 0)")
    parser.add_argument("--force", action="store_true", help="overwrite a non-empty --out folder")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    parser.add_argument("--format", choices=list(FORMATS), default=HUMPBACK2019.name,
                        help=f"the competition's layout (default {HUMPBACK2019.name}; whale.formats)")
    parser.add_argument("--species", type=int, default=4,
                        help=f"species of the happywhale2022 layout (1..{len(SPECIES_2022)}, default 4)")


def run(args: argparse.Namespace) -> int:
    """Write the competition ``args`` describe; raises :class:`whale.errors.WhaleError` on bad input."""
    check_output(args.out, folder=True)
    fresh = not args.out.exists()
    # A folder holding files is refused (without --force) before anything is written: those files are not ours.
    ours = fresh or args.force or not any(args.out.iterdir())
    try:
        generate(args.out, n_ids=args.ids, seed=args.seed, size=args.size, force=args.force,
                 progress=not args.quiet, duplicates=args.duplicates, fmt=args.format, n_species=args.species)
    except BaseException as exc:  # a full disk, Ctrl-C, a late refusal or a bug: nothing half-written stays
        if ours:
            _remove_partial(args.out, fresh, get_format(args.format))  # a folder that was not there is gone again
        if isinstance(exc, OSError) and not isinstance(exc, WhaleError) and exc.errno in WRITE_ERRNOS:
            raise OutputError(describe_write_error(exc.filename or args.out, exc)) from exc
        raise
    return 0


def _remove_partial(out: Path, fresh: bool, fmt: Format = HUMPBACK2019) -> None:
    """After a failed :func:`generate`: remove ``out`` if it was created, else the files it writes."""
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
        return
    for name in _OUTPUT_FILES:
        (out / name).unlink(missing_ok=True)
    for sub in _folders(fmt).values():
        for f in (out / sub).glob("*.jpg") if (out / sub).is_dir() else ():
            f.unlink(missing_ok=True)
        if (out / sub).is_dir() and not any((out / sub).iterdir()):
            (out / sub).rmdir()


if __name__ == "__main__":
    sys.exit(main())
