"""Patterns of disks under random homographies (Moskvyak & Maire 2017, section IV), and homography pairs of any image.

The paper's data (section IV-B): a ``150 x 150`` black canvas with a centred white
``100 x 100`` square carrying 10 black disks of diameter 5 px at random places
(:func:`draw_pattern`). A random homography (section IV-B-2, Fig. 8) moves each of the
square's four corners A, B, C, D at random within a neighbourhood of radius ``R``, then
rotates the moved quadrangle about the centre of the image by an angle ``phi`` drawn
uniformly in ``[-phi_max, phi_max]`` (:func:`random_quadrangle`, :func:`random_homography`);
the homography is the one that maps the square's corners onto that quadrangle.

Reading of the text where it leaves a choice open:

* "a neighbourhood of radius R" (Fig. 8 draws circles): each corner's shift is drawn
  **uniformly over the area of the disk** of radius ``R`` (``r = R sqrt(u)``, angle
  uniform), so every shift is at most ``R``; a per-axis draw in ``[-R, R]^2`` would move a
  corner up to ``R sqrt 2``.
* the disks lie wholly inside the white square and do not touch each other, so every
  pattern shows exactly ``disks`` disks (the paper keeps the count constant "to prevent
  the network from learning to count").
* coordinates are OpenCV's ``(x, y)`` with pixel centres at integers: the square's pixels
  ``margin .. margin + square - 1`` span ``[margin - 0.5, margin + square - 0.5]``, whose
  corners are the points A, B, C, D, and the rotation centre is ``((size - 1) / 2, (size - 1) / 2)``.

Pairs and triplets (section IV-A, Fig. 7) are index arrays drawn from explicit
``np.random.Generator``s (:func:`sample_pairs`, :func:`sample_triplets`) and rendered with
:func:`render`. Labels follow the paper: ``0`` = same equivalence class (the desired
distance), ``1`` = different. ``equivalence="pattern"`` is the paper's main task (same seed
pattern = positive); ``equivalence="transformation"`` its "transformation equivalence"
variant (same homography = positive, whatever the pattern).

:func:`homography_pair` generalises the construction to any image (a photo of any size): two
independent random homographies relative to the image's own frame, for self-supervised
positive pairs. Numpy and OpenCV only (the data layer: no Keras).
"""
from __future__ import annotations

from typing import NamedTuple

import cv2
import numpy as np

SIZE = 150
"""Side of the paper's canvas in pixels."""
SQUARE = 100
"""Side of the paper's white square in pixels."""
DISKS = 10
"""Disks per pattern in the paper."""
DIAMETER = 5
"""Diameter of a disk in pixels ("10 randomly placed black disks with a diameter of 5 pixels")."""
EQUIVALENCES = ("pattern", "transformation")


class Quadrangle(NamedTuple):
    """One random homography's construction: ``corners`` ``[4, 2]`` float64 the quadrangle (x, y) that
    the square's corners A, B, C, D map onto; ``shifts`` ``[4, 2]`` float64 each corner's move before the
    rotation (norm <= R); ``phi_deg`` the rotation angle in degrees
    (positive turns clockwise on screen, y pointing down)."""

    corners: np.ndarray
    shifts: np.ndarray
    phi_deg: float


def _check_geometry(size: int, square: int) -> int:
    if not (isinstance(size, (int, np.integer)) and isinstance(square, (int, np.integer))):
        raise ValueError(f"size and square: expected integers, received {size!r} and {square!r}")
    if not 0 < square <= size:
        raise ValueError(f"square: expected 0 < square <= size ({size}), received {square}")
    return (size - square) // 2


def square_corners(size: int = SIZE, square: int = SQUARE) -> np.ndarray:
    """The white square's corners A, B, C, D as ``[4, 2]`` float64 ``(x, y)``.

    The paper's order: A = (0, 0), B = (0, 100), C = (100, 100), D = (100, 0) in the square's
    own coordinates (x, y), shifted to the pixel frame of the canvas (see the module docstring).
    """
    m = _check_geometry(size, square) - 0.5
    s = float(square)
    return np.array([[m, m], [m, m + s], [m + s, m + s], [m + s, m]], dtype=np.float64)


def draw_pattern(rng: np.random.Generator, size: int = SIZE, square: int = SQUARE, disks: int = DISKS,
                 diameter: int = DIAMETER) -> tuple[np.ndarray, np.ndarray]:
    """One seed pattern: black canvas, centred white square, ``disks`` black disks inside it.

    Returns:
        ``(image, centres)``: ``image`` ``[size, size]`` uint8 (0 or 255), ``centres``
        ``[disks, 2]`` float64 ``(x, y)`` at integer pixels. A disk is every pixel within
        ``diameter / 2`` of its centre; disks lie wholly inside the square and never touch.

    Raises:
        ValueError: bad geometry, or the disks cannot be placed (too many or too large).
    """
    margin = _check_geometry(size, square)
    if disks < 0 or diameter < 1:
        raise ValueError(f"disks, diameter: expected >= 0 and >= 1, received {disks} and {diameter}")
    r = diameter / 2.0
    lo, hi = margin + int(np.ceil(r - 0.5)), margin + square - 1 - int(np.ceil(r - 0.5))
    if hi < lo:
        raise ValueError(f"diameter {diameter}: does not fit in a square of {square} px")
    centres: list[tuple[int, int]] = []
    for _ in range(1000 * max(disks, 1)):
        if len(centres) == disks:
            break
        c = (int(rng.integers(lo, hi + 1)), int(rng.integers(lo, hi + 1)))
        # Non-touching: at least one background pixel between two disks.
        if all((c[0] - x) ** 2 + (c[1] - y) ** 2 > (diameter + 1) ** 2 for x, y in centres):
            centres.append(c)
    if len(centres) < disks:
        raise ValueError(f"disks: could not place {disks} disks of diameter {diameter} apart in a "
                         f"{square} px square (placed {len(centres)})")
    image = np.zeros((size, size), np.uint8)
    image[margin:margin + square, margin:margin + square] = 255
    yy, xx = np.mgrid[:size, :size]
    for x, y in centres:
        image[(xx - x) ** 2 + (yy - y) ** 2 <= r * r] = 0
    return image, np.asarray(centres, dtype=np.float64).reshape(disks, 2)


def _disk_shifts(rng: np.random.Generator, n: int, radius: float) -> np.ndarray:
    """``[n, 2]`` float64 points uniform over the area of the disk of ``radius`` (r = R sqrt(u))."""
    rad = radius * np.sqrt(rng.random(n))
    theta = rng.uniform(0.0, 2.0 * np.pi, n)
    return np.stack([rad * np.cos(theta), rad * np.sin(theta)], axis=1)


def _rotate(points: np.ndarray, centre: np.ndarray, phi_deg: float) -> np.ndarray:
    a = np.deg2rad(phi_deg)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    return (points - centre) @ rot.T + centre


def _check_draw(R: float, phi_max_deg: float) -> None:
    if not (np.isfinite(R) and R >= 0):
        raise ValueError(f"R: expected a finite radius >= 0, received {R!r}")
    if not 0 <= phi_max_deg <= 180:
        raise ValueError(f"phi_max_deg: expected 0 <= phi_max_deg <= 180, received {phi_max_deg!r}")


def random_quadrangle(rng: np.random.Generator, R: float, phi_max_deg: float, corners: np.ndarray,
                      centre: np.ndarray) -> Quadrangle:
    """Move each of ``corners`` (``[4, 2]`` float64) uniformly within a disk of radius ``R``, then
    rotate the four moved points about ``centre`` (``[2]``) by ``phi`` uniform in
    ``[-phi_max_deg, phi_max_deg]``. Draws the shifts first, then the angle."""
    _check_draw(R, phi_max_deg)
    corners = np.asarray(corners, dtype=np.float64)
    shifts = _disk_shifts(rng, len(corners), float(R))
    phi = float(rng.uniform(-phi_max_deg, phi_max_deg))
    return Quadrangle(_rotate(corners + shifts, np.asarray(centre, np.float64), phi), shifts, phi)


def quadrangle_homography(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """The ``[3, 3]`` float64 homography that maps the four points ``src`` onto ``dst`` (``[4, 2]`` each)."""
    return cv2.getPerspectiveTransform(np.asarray(src, np.float32), np.asarray(dst, np.float32)).astype(np.float64)


def random_homography(rng: np.random.Generator, R: float, phi_max_deg: float, size: int = SIZE,
                      square: int = SQUARE) -> np.ndarray:
    """The paper's random homography on a ``size`` canvas: ``[3, 3]`` float64.

    It maps the square's corners (:func:`square_corners`) onto :func:`random_quadrangle`'s
    quadrangle (corners moved within ``R`` px, then rotated about the canvas centre by
    ``|phi| <= phi_max_deg``). The same ``rng`` state gives the same quadrangle through
    :func:`random_quadrangle`, which is how the tests recover it.
    """
    src = square_corners(size, square)
    c = (size - 1) / 2.0
    quad = random_quadrangle(rng, R, phi_max_deg, src, np.array([c, c]))
    return quadrangle_homography(src, quad.corners)


def map_points(H: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``points`` ``[n, 2]`` (x, y) mapped by the homography ``H`` ``[3, 3]``: ``[n, 2]`` float64."""
    pts = np.asarray(points, np.float64).reshape(-1, 1, 2)
    return cv2.perspectiveTransform(pts, np.asarray(H, np.float64)).reshape(-1, 2)


def warp(image: np.ndarray, H: np.ndarray) -> np.ndarray:
    """``image`` (``[h, w]`` or ``[h, w, c]``) warped by ``H`` into a frame of the same size, black border.

    A point ``p`` of ``image`` lands at ``H p`` (bilinear interpolation); returns the input's
    dtype and shape.
    """
    image = np.asarray(image)
    if image.ndim not in (2, 3) or image.shape[0] < 1 or image.shape[1] < 1:
        raise ValueError(f"image: expected [h, w] or [h, w, c], received shape {image.shape}")
    h, w = image.shape[:2]
    out = cv2.warpPerspective(image, np.asarray(H, np.float64), (w, h), flags=cv2.INTER_LINEAR,
                              borderMode=cv2.BORDER_CONSTANT, borderValue=0)
    return out.reshape(image.shape)


# ------------------------------------------------------------------------- pairs and triplets
def _check_equivalence(equivalence: str, n_patterns: int, n_homographies: int) -> tuple[int, int]:
    """``(classes, nuisances)``: how many equivalence classes and how many views of each."""
    if equivalence not in EQUIVALENCES:
        raise ValueError(f"equivalence: expected one of {EQUIVALENCES}, received {equivalence!r}")
    classes, nuisances = ((n_patterns, n_homographies) if equivalence == "pattern"
                          else (n_homographies, n_patterns))
    if classes < 2 or nuisances < 2:
        raise ValueError(f"{equivalence} equivalence: expected at least 2 patterns and 2 homographies, "
                         f"received {n_patterns} and {n_homographies}")
    return classes, nuisances


def _other(rng: np.random.Generator, n: int, than: np.ndarray) -> np.ndarray:
    """An index in ``[0, n)`` different from each of ``than``, uniform over the others."""
    return (than + rng.integers(1, n, len(than))) % n


def _as_pattern_homography(equivalence: str, cls: np.ndarray, nui: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (cls, nui) if equivalence == "pattern" else (nui, cls)


def sample_pairs(rng: np.random.Generator, n_patterns: int, n_homographies: int, count: int,
                 equivalence: str = "pattern") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``count`` pairs, half positive (the first ``count // 2`` before shuffling), in random order.

    ``equivalence="pattern"`` (section IV-A-2): a positive pair is one seed pattern under two
    different homographies, a negative pair two different patterns under two random homographies.
    ``"transformation"`` swaps the roles: a positive pair is two different patterns under one
    homography, a negative pair two different homographies (of two random patterns).

    Returns:
        ``(patterns, homographies, labels)``: ``[count, 2]`` int64 pattern and homography indices,
        ``[count]`` int64 labels (0 = positive, 1 = negative).
    """
    classes, nuisances = _check_equivalence(equivalence, n_patterns, n_homographies)
    n_pos = count // 2
    c1 = rng.integers(0, classes, count)
    c2 = np.concatenate([c1[:n_pos], _other(rng, classes, c1[n_pos:])])
    v1 = rng.integers(0, nuisances, count)
    v2 = np.concatenate([_other(rng, nuisances, v1[:n_pos]), rng.integers(0, nuisances, count - n_pos)])
    labels = np.concatenate([np.zeros(n_pos, np.int64), np.ones(count - n_pos, np.int64)])
    order = rng.permutation(count)
    cls, nui = np.stack([c1, c2], 1)[order], np.stack([v1, v2], 1)[order]
    return (*_as_pattern_homography(equivalence, cls, nui), labels[order])


def sample_triplets(rng: np.random.Generator, n_patterns: int, n_homographies: int, count: int,
                    equivalence: str = "pattern") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``count`` triplets (section IV-A-3, Fig. 7): anchor, positive, negative, with the last two swapped at random.

    ``equivalence="pattern"``: anchor ``T_l(P_k)``, positive ``T_p(P_k)`` (``p != l``), negative
    ``T_q(P_s)`` (``s != k``, ``q`` random). ``"transformation"`` (the paper's variant): anchor
    ``T_k(P_l)``, positive ``T_k(P_p)`` (``p != l``), negative ``T_s(P_q)`` (``s != k``, ``q`` random).
    Half the triplets (at random) are stored as (anchor, negative, positive).

    Returns:
        ``(patterns, homographies, labels)``: ``[count, 3]`` int64 indices and ``[count, 2]`` int64
        labels, the discrete metric of the pairs (image 0, image 1) and (image 0, image 2):
        ``(0, 1)`` for (anchor, positive, negative), ``(1, 0)`` for (anchor, negative, positive).
    """
    classes, nuisances = _check_equivalence(equivalence, n_patterns, n_homographies)
    ca = rng.integers(0, classes, count)
    cn = _other(rng, classes, ca)
    va = rng.integers(0, nuisances, count)
    vp = _other(rng, nuisances, va)
    vn = rng.integers(0, nuisances, count)
    swap = rng.random(count) < 0.5
    cls = np.stack([ca, np.where(swap, cn, ca), np.where(swap, ca, cn)], 1)
    nui = np.stack([va, np.where(swap, vn, vp), np.where(swap, vp, vn)], 1)
    labels = np.stack([swap, ~swap], 1).astype(np.int64)
    return (*_as_pattern_homography(equivalence, cls, nui), labels)


def render(patterns: np.ndarray, homographies: np.ndarray, pattern_idx: np.ndarray,
           homography_idx: np.ndarray) -> np.ndarray:
    """Warp ``patterns[pattern_idx]`` by ``homographies[homography_idx]``, element by element.

    Args:
        patterns: ``[n_patterns, h, w]`` uint8 seed patterns.
        homographies: ``[n_homographies, 3, 3]`` float64.
        pattern_idx, homography_idx: int arrays of one shape ``S`` (e.g. ``[count, 2]``).

    Returns:
        ``S + [h, w]`` uint8.
    """
    pattern_idx, homography_idx = np.asarray(pattern_idx), np.asarray(homography_idx)
    if pattern_idx.shape != homography_idx.shape:
        raise ValueError(f"pattern_idx and homography_idx: expected one shape, received "
                         f"{pattern_idx.shape} and {homography_idx.shape}")
    h, w = patterns.shape[1:3]
    out = np.empty(pattern_idx.shape + (h, w), np.uint8)
    flat = out.reshape(-1, h, w)
    for i, (p, t) in enumerate(zip(pattern_idx.ravel(), homography_idx.ravel())):
        flat[i] = warp(patterns[p], homographies[t])
    return out


# ------------------------------------------------------------------------- any image
def frame_homography(rng: np.random.Generator, shape: tuple[int, ...], R_frac: float,
                     phi_max_deg: float) -> np.ndarray:
    """A random homography relative to an image's own frame: ``[3, 3]`` float64.

    The frame's four corners (``(-0.5, -0.5)`` to ``(w - 0.5, h - 0.5)``) play the paper's
    square: each moves uniformly within a disk of radius ``R_frac * min(h, w)`` px, then the
    quadrangle rotates about the frame's centre by ``|phi| <= phi_max_deg``.
    """
    if len(shape) < 2 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"shape: expected (h, w[, c]) with h, w >= 1, received {tuple(shape)}")
    if not (np.isfinite(R_frac) and R_frac >= 0):
        raise ValueError(f"R_frac: expected a fraction of the image side >= 0, received {R_frac!r}")
    h, w = int(shape[0]), int(shape[1])
    src = np.array([[-0.5, -0.5], [-0.5, h - 0.5], [w - 0.5, h - 0.5], [w - 0.5, -0.5]], np.float64)
    quad = random_quadrangle(rng, R_frac * min(h, w), phi_max_deg, src, np.array([(w - 1) / 2, (h - 1) / 2]))
    return quadrangle_homography(src, quad.corners)


def homography_pair(image: np.ndarray, rng: np.random.Generator, R_frac: float = 0.1,
                    phi_max_deg: float = 30.0) -> tuple[np.ndarray, np.ndarray]:
    """A positive pair of any image: two independent random homographies of it.

    Args:
        image: ``[h, w]`` or ``[h, w, c]`` (uint8 or float32), any size.
        rng: the generator both homographies are drawn from (first view's, then second's).
        R_frac: corner neighbourhood radius as a fraction of the image's shorter side (the
            paper's R = 15 and 25 on its 100 px square are 0.15 and 0.25).
        phi_max_deg: rotation bound in degrees, ``0 <= phi_max_deg <= 180``.

    Returns:
        ``(view_a, view_b)``, each of ``image``'s shape and dtype, black where the warp leaves the frame.
    """
    image = np.asarray(image)
    if image.ndim not in (2, 3):
        raise ValueError(f"image: expected [h, w] or [h, w, c], received shape {image.shape}")
    h_a = frame_homography(rng, image.shape, R_frac, phi_max_deg)
    h_b = frame_homography(rng, image.shape, R_frac, phi_max_deg)
    return warp(image, h_a), warp(image, h_b)
