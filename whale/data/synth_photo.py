"""The synthetic competition's photos: one sighting of an individual (background, viewpoint, lighting, camera).

Part of :mod:`whale.data.synth`. Each sighting is a new modest viewpoint (perspective homography),
scale and position in a sea-and-sky frame, with lighting change, blur, noise, and 5% of images
gray; :func:`encode_jpeg` writes it at the quality the caller draws.
"""
from __future__ import annotations

import numpy as np

from whale.data.synth_fluke import BOTTOM, PAD, TOP, Fluke, smooth_noise
from whale.core.errors import WhaleError


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


def _pose_fluke(fluke: Fluke, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float]:
    """This sighting's fluke in template space: flexed, partly submerged, unevenly lit.

    The real flukes bend (tips up or down, one lobe higher), sink to different depths, and
    carry shadows and water; these break pixel alignment without hiding the pattern.
    Returns ``(rgb float32 [th, tw, 3], alpha float32 [th, tw], waterline)``, the last the
    template row (px) where the fluke leaves the water.
    """
    import cv2

    th, tw = fluke.alpha.shape
    s = tw / (1 + 2 * PAD)
    x = np.arange(tw, dtype=np.float32) / s - PAD - 0.5  # -0.5 .. 0.5 across the span
    bend, twist = rng.uniform(-0.08, 0.08), rng.uniform(-0.06, 0.06)
    wobble = 0.012 * smooth_noise(rng, tw, 5).astype(np.float32)
    dy = (bend * (2 * x) ** 2 + twist * 2 * x + wobble) * s  # px, positive = lower
    yy, xx = np.mgrid[0:th, 0:tw].astype(np.float32)
    map_y = yy - dy[None, :]
    rgb = cv2.remap(fluke.rgb, xx, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    alpha = cv2.remap(fluke.alpha, xx, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)

    waterline = (TOP + BOTTOM - 0.06) * s
    if rng.random() < 0.35:  # sinking: the sea covers the lower part
        cut = (TOP + rng.uniform(0.3, 0.45)) * s
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


def render_sighting(fluke: Fluke, rng: np.random.Generator, size: int):
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


def encode_jpeg(img: np.ndarray, quality: int) -> bytes:
    """JPEG bytes of an RGB ``[h, w, 3]`` or gray ``[h, w]`` uint8 image."""
    import cv2

    bgr = img if img.ndim == 2 else cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise WhaleError(f"could not encode a {img.shape} image as JPEG")
    return buf.tobytes()
