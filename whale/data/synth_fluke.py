"""The synthetic competition's individuals: a fluke silhouette and identity pattern, a pure function of the key.

Part of :mod:`whale.data.synth`. Every individual is two lobes and a central notch with
white/black pigmentation blobs, speckles, scars and trailing-edge notches, all drawn from an rng
seeded by its 7-hex key, so an id looks the same whatever the seed or image size.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_TEMPLATE_SEED = 0x5EA1  # salt for pattern rngs, so they differ from layout rngs
# Template canvas in fluke units (span = 1): x in [-PAD, 1 + PAD], y in [-TOP, BOTTOM].
PAD, TOP, BOTTOM = 0.03, 0.14, 0.56


def _bezier(p0, p1, p2, p3, n: int) -> np.ndarray:
    """Cubic Bezier through control points (x, y); returns float64 ``[n, 2]``."""
    t = np.linspace(0.0, 1.0, n)[:, None]
    p0, p1, p2, p3 = (np.asarray(p, dtype=np.float64) for p in (p0, p1, p2, p3))
    return (1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * p1 + 3 * (1 - t) * t**2 * p2 + t**3 * p3


def smooth_noise(rng: np.random.Generator, n: int, knots: int) -> np.ndarray:
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
        trail[:, 1] += 0.004 * smooth_noise(rng, n, 12)  # ragged edge
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
        [[0.5 + stalk_w, BOTTOM], [0.5 - stalk_w, BOTTOM]],
        lead_l[::-1],
    ])
    return polygon, trailing


def _blob(rng: np.random.Generator, center, a: float, b: float, angle: float) -> np.ndarray:
    """Irregular ellipse polygon in fluke units, float64 ``[24, 2]``."""
    th = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    r = 1.0 + 0.25 * smooth_noise(rng, 25, 7)[:24]
    x, y = a * r * np.cos(th), b * r * np.sin(th)
    c, s = np.cos(angle), np.sin(angle)
    return np.stack([center[0] + c * x - s * y, center[1] + s * x + c * y], axis=1)


@dataclass(frozen=True)
class Fluke:
    """A rendered individual: ``rgb`` float32 ``[h, w, 3]`` 0..255, ``alpha`` float32 ``[h, w]``."""

    rgb: np.ndarray
    alpha: np.ndarray


def render_fluke(key: str, width: int) -> Fluke:
    """Draw the individual ``key`` (7 hex) on a canvas ``width`` px wide.

    The drawing is a pure function of ``key``; ``width`` only sets the resolution.
    """
    import cv2

    rng = np.random.default_rng([_TEMPLATE_SEED, int(key, 16)])
    s = width / (1 + 2 * PAD)
    height = int(round((TOP + BOTTOM) * s))
    shift = 4  # sub-pixel bits for cv2 drawing

    def px(pts: np.ndarray) -> np.ndarray:
        q = np.empty_like(pts)
        q[:, 0] = (pts[:, 0] + PAD) * s
        q[:, 1] = (pts[:, 1] + TOP) * s
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
        c = (xs[i] / s - PAD, ys[i] / s - TOP)
        a = rng.uniform(0.05, 0.1)
        col = ink if rng.random() < 0.75 else base
        cv2.fillPoly(pat, [px(_blob(rng, c, a, a * rng.uniform(0.6, 1.0), rng.uniform(0, np.pi)))],
                     float(col + rng.uniform(-15, 15)), cv2.LINE_AA, shift)
    for _ in range(int(rng.integers(0, 12))):  # speckles
        i = rng.integers(len(xs))
        r = rng.uniform(0.01, 0.022)
        col = ink if rng.random() < 0.7 else base
        cv2.fillPoly(pat, [px(_blob(rng, (xs[i] / s - PAD, ys[i] / s - TOP), r, r, 0.0))],
                     float(col), cv2.LINE_AA, shift)
    for _ in range(int(rng.integers(1, 4))):  # scars, sometimes parallel rake marks
        i = rng.integers(len(xs))
        p0 = np.array([xs[i] / s - PAD, ys[i] / s - TOP])
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
    fade_top = int((TOP + BOTTOM - 0.1) * s)
    ramp = np.clip(1 - (np.arange(height) - fade_top) / (0.08 * s), 0, 1).astype(np.float32)
    alpha *= ramp[:, None]
    return Fluke(rgb=rgb, alpha=alpha)
