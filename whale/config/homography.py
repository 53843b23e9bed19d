"""The ``homography:`` section of a config and the rules of a ``dataset: homography`` stage.

Kept apart from :mod:`whale.config.schema` (which imports it), as :mod:`whale.config.objectives` is. The
stages themselves: :mod:`whale.data.unlabelled`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from whale.config.checker import Checker

HOMOGRAPHY_K = 1000.0
"""K recorded for a ``dataset: homography`` stage: its negatives are random (no identities to mine)."""


@dataclass(frozen=True)
class HomographyConfig:
    """The unlabelled photos of ``dataset: homography`` stages and the strength of their homographies.

    ``photos``: folders of photos (every ``.jpg``, ``.jpeg``, ``.png`` below them, whole images, no
    labels read); empty (the default) = the competition's test images and its training images
    labelled ``new_whale`` outside the fold's validation: the images the labelled stages cannot use.
    ``R``: each corner of an image moves within ``R`` times its shorter side; ``phi``: then the
    quadrangle turns by at most ``phi`` degrees (the paper's first curriculum stage: R = 15 on its
    100 px square, phi 90; :func:`whale.data.homography.frame_homography`).
    """

    photos: tuple[str, ...] = ()
    R: float = 0.15
    phi: float = 90.0


def homography_stage(c: Checker, raw: dict, path: str) -> dict:
    """A ``dataset: homography`` stage's mapping with ``k`` set to :data:`HOMOGRAPHY_K`.

    Raises:
        ConfigError: the stage asks to mine (``k`` other than :data:`HOMOGRAPHY_K`, or ``k_end``): photos
            without identities give Algorithm 1 nothing to mine; the negatives are random other photos.
    """
    asked = [key for key in ("k", "k_end") if raw.get(key) is not None and (
        key == "k_end" or c.number(raw[key], f"{path}.k", float, 0.0) != HOMOGRAPHY_K)]
    if asked:
        raise c.fail(f"{path}.{asked[0]}", f"no {asked[0]} on a 'dataset: homography' stage (Algorithm 1 "
                     "cannot mine photos without identities: its negatives are random other photos; leave "
                     f"{asked[0]} out)", raw[asked[0]])
    return {**raw, "k": HOMOGRAPHY_K}


def parse_homography(c: Checker, raw: Any, path: str) -> HomographyConfig:
    """The validated ``homography:`` mapping (None: the defaults); ``photos`` may be one folder or a list."""
    raw = c.mapping({} if raw is None else raw, path, tuple(f.name for f in dataclasses.fields(HomographyConfig)), ())
    d = HomographyConfig()
    photos = raw.get("photos", d.photos)
    if isinstance(photos, str):
        photos = [photos]
    if not isinstance(photos, (list, tuple)):
        raise c.fail(f"{path}.photos", "a list of folders", photos)
    return HomographyConfig(
        photos=tuple(c.string(p, f"{path}.photos[{i}]") for i, p in enumerate(photos)),
        R=c.number(raw.get("R", d.R), f"{path}.R", float, 0.0, 1.0),
        phi=c.number(raw.get("phi", d.phi), f"{path}.phi", float, 0.0, 180.0),
    )
