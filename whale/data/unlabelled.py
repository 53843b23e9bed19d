"""Self-supervised pairs of unlabelled photos for ``dataset: homography`` stages.

A homography stage trains the siamese model on photos without labels (the competition's test
images, its ``new_whale`` images, any folder of photos): a **positive** pair is two independent
random homographies of one photo, a **negative** pair homographies of two different photos, then
the usual augmentation; half of an epoch's pairs are positive (the construction of seed 000,
:mod:`whale.data.homography`, on real photos).

How it fits the pair pipeline unchanged: :func:`homography_data` lists every photo **twice** (view 0
at ``i``, view 1 at ``n + i``, one id per photo), so the trainer's positive pairs (a derangement inside
each id, :func:`whale.mining.positive_pairs`) are ``(i, n + i)`` and ``(n + i, i)``, and its two-view
store (:class:`TwoViews`) reads both from one decoded crop. Every pair slot is augmented from its own
generator of ``(seed, epoch, pair, side)`` (or ``(seed, epoch, batch, slot)`` with ``batching:
images``), and :class:`HomographyWarp` draws that slot's homography first, so the two images of a
positive pair are two independent homographies of one photo, and a resumed run draws the same ones.
The negatives are not mined (no identities): :func:`random_negatives`, one random other photo per
image, from the generator the trainer keys by ``(seed, epoch)``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from whale import NEW_WHALE
from whale.config import HomographyConfig, RunConfig
from whale.data.augment import build_plain
from whale.data.competition import Competition
from whale.data.homography import frame_homography, warp
from whale.data.imagesets import FoldData, ImageSet

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")
"""Files a photos folder contributes (case-insensitive)."""
VIEW_TAG = "#view1"
"""Name suffix of a photo's second view inside :func:`homography_data`; never written to any file."""


def folder_photos(folder: str | Path) -> list[Path]:
    """Every photo below ``folder`` (:data:`PHOTO_SUFFIXES`), sorted by path.

    Raises:
        FileNotFoundError: ``folder`` is not a folder, or holds no photo (the message names it).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"homography.photos: {folder}: not a folder")
    paths = sorted(p for p in folder.rglob("*") if p.suffix.lower() in PHOTO_SUFFIXES and p.is_file())
    if not paths:
        raise FileNotFoundError(f"homography.photos: {folder}: no {'/'.join(PHOTO_SUFFIXES)} file below it")
    return paths


def unlabelled_photos(comp: Competition | None, folders: Sequence[str | Path] = (),
                      exclude: Sequence[str] = ()) -> ImageSet:
    """The photos of a homography stage, each its own id (its name).

    Args:
        comp: the competition; with no ``folders``, its test images and its training images labelled
            ``new_whale``, boxes kept, except the names in ``exclude`` (the fold's validation images).
        folders: folders of photos (:func:`folder_photos`, whole images, named by their path).
        exclude: image names left out of the competition's images.

    Raises:
        ValueError: fewer than 2 photos (a negative pair needs two).
    """
    if folders:
        paths = [p for f in folders for p in folder_photos(f)]
        names = [str(p) for p in paths]
        images = ImageSet(names, np.asarray(names, dtype=str), paths, [None] * len(paths))
        where = ", ".join(map(str, folders))
    else:
        if comp is None:
            raise ValueError("homography.photos: no folders given and no competition to take test images from")
        skip = set(exclude)
        train = comp.train[(comp.train["Id"] == NEW_WHALE) & ~comp.train["Image"].isin(skip)]
        parts = [ImageSet.from_frame(comp, train), ImageSet.test(comp)]
        parts[1] = parts[1].subset(np.flatnonzero([n not in skip for n in parts[1].names]))
        names = parts[0].names + parts[1].names
        images = ImageSet(names, np.asarray(names, dtype=str), parts[0].paths + parts[1].paths,
                          parts[0].boxes + parts[1].boxes)
        where = f"{comp.root}: test images and new_whale training images"
    if len(images) < 2:
        raise ValueError(f"homography stage: {where}: expected at least 2 photos, received {len(images)}")
    return images


def homography_data(photos: ImageSet) -> FoldData:
    """``photos`` (``n``, one id each) as a pre-training set of ``2n`` views: photo ``i`` at ``i`` and ``n + i``.

    Its ``pairs`` and ``gallery`` are the ``2n`` views (every view trains), ``val`` is empty.
    """
    n = len(photos)
    views = ImageSet(photos.names + [name + VIEW_TAG for name in photos.names],
                     np.concatenate([photos.ids, photos.ids]).astype(str), photos.paths + photos.paths,
                     photos.boxes + photos.boxes)
    return FoldData(views, views, views.subset(np.arange(0)), np.arange(2 * n, dtype=np.int64),
                    f"homography pre-training: {n} unlabelled photos, 2 views each")


def homography_views(cfg: RunConfig, comp: Competition | None, exclude: Sequence[str] = (),
                     log=print) -> FoldData | None:
    """The two-view set of ``cfg``'s ``dataset: homography`` stages (None when it has none).

    Photos: ``cfg.homography.photos``, else ``comp``'s test and ``new_whale`` images except
    ``exclude`` (the fold's validation images): :func:`unlabelled_photos`.
    """
    if not any(s.dataset == "homography" for s in cfg.stages):
        return None
    views = homography_data(unlabelled_photos(comp, cfg.homography.photos, exclude))
    log(f"{views.summary} (R {cfg.homography.R:g}, phi {cfg.homography.phi:g} degrees)")
    return views


def first_views(data: FoldData) -> ImageSet:
    """The ``n`` photos of a :func:`homography_data` set (its first half)."""
    return data.gallery.subset(np.arange(len(data.gallery) // 2))


class TwoViews:
    """A store of ``n`` crops read as ``2n`` (``store[i % n]``): both views of a photo share one crop."""

    def __init__(self, store):
        self.store = store
        self.channels = getattr(store, "channels", None)

    def __len__(self) -> int:
        return 2 * len(self.store)

    def __getitem__(self, i: int) -> np.ndarray:
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"view index {i} out of range for {len(self)} views")
        return self.store[i % len(self.store)]


def random_negatives(n_views: int, rng: np.random.Generator) -> np.ndarray:
    """One negative per view: ``[n_views, 2]`` int64 ``(view, a view of another photo)``.

    Views ``i`` and ``i + n_views / 2`` are one photo; the partner's photo is uniform over the
    other photos, its view (0 or 1) uniform too.
    """
    if n_views < 4 or n_views % 2:
        raise ValueError(f"n_views: expected an even count >= 4 (two views of >= 2 photos), received {n_views}")
    n = n_views // 2
    first = np.arange(n_views, dtype=np.int64)
    other = (first % n + rng.integers(1, n, n_views)) % n
    return np.stack([first, other + n * rng.integers(0, 2, n_views)], axis=1)


def view_inputs(store, augmenter: Callable | None, homography: HomographyConfig, image_size: int):
    """``(store, augmenter)`` of a homography epoch: the photos' store read as two views
    (:class:`TwoViews`), and each image warped by its own homography before ``augmenter``
    (None: plain resize)."""
    then = augmenter or build_plain(image_size, store.channels)
    return TwoViews(store), HomographyWarp(homography.R, homography.phi, then)


class HomographyWarp:
    """``aug(image, rng)``: a random homography of the image (:func:`whale.data.homography.frame_homography`,
    corners within ``R_frac`` of its shorter side, turned by at most ``phi_max_deg``), then ``then``.

    Args:
        R_frac, phi_max_deg: the homography's strength.
        then: the stage's augmenter or plain resize, ``(uint8 [h, w, c], rng) -> uint8 [S, S, c]``.

    The homography is drawn from ``rng`` before ``then`` draws, so one generator fixes both.
    """

    def __init__(self, R_frac: float, phi_max_deg: float, then: Callable):
        self.R_frac, self.phi_max_deg, self.then = float(R_frac), float(phi_max_deg), then

    def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        H = frame_homography(rng, image.shape, self.R_frac, self.phi_max_deg)
        return self.then(warp(image, H), rng)

    def __repr__(self) -> str:
        return f"HomographyWarp(R_frac={self.R_frac:g}, phi_max_deg={self.phi_max_deg:g}, then={self.then!r})"
