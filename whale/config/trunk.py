"""The ``trunk:`` section of a config: a pretrained branch's first layers frozen and computed once per photo.

Kept apart from :mod:`whale.config.schema` (which imports it), as :mod:`whale.config.homography` is. What it does:
:mod:`whale.models.trunk` (the cut) and :mod:`whale.inference.trunk` (the maps, kept by photo content).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from whale.config.checker import Checker

TRUNK_VIEWS = 4


@dataclass(frozen=True)
class TrunkConfig:
    """``layer``: the backbone layer after which the branch trains (None: the whole branch trains on photos, no
    trunk); ``views``: augmented views of each training photo computed once through the trunk (0: the plain crop
    only), one of which each epoch reads in place of a newly augmented photo; ``gallery_views``: the score files'
    gallery photos each scored by the mean of its plain and augmented views' branch features (the queries by their
    plain view; :meth:`whale.inference.runs.RunScorer.gallery_features`)."""

    layer: str | None = None
    views: int = TRUNK_VIEWS
    gallery_views: bool = False


def parse_trunk(c: Checker, raw: Any, path: str, stages=(), flip_ids: bool = False, tta=()) -> TrunkConfig:
    """The validated ``trunk:`` mapping (None: no trunk), checked against the run's ``stages``, ``flip_ids`` and
    ``tta`` (:func:`check_trunk_run`)."""
    raw = c.mapping({} if raw is None else raw, path, tuple(f.name for f in dataclasses.fields(TrunkConfig)), ())
    trunk = TrunkConfig(layer=c.string(raw.get("layer"), f"{path}.layer", optional=True),
                        views=c.number(raw.get("views", TRUNK_VIEWS), f"{path}.views", int, 0, 64),
                        gallery_views=c.boolean(raw.get("gallery_views", False), f"{path}.gallery_views"))
    check_trunk_run(c, trunk, stages, flip_ids, tta)
    return trunk


def check_trunk_run(c: Checker, trunk: TrunkConfig, stages, flip_ids: bool, tta) -> None:
    """What a trunk run cannot do, refused by name: change the input size (the maps are of one size), mirror
    identities or test-time views (both need new maps per photo), stages on unlabelled or PlayGround photos; gallery
    views without a trunk or without views."""
    if trunk.gallery_views and (trunk.layer is None or not trunk.views):
        raise c.fail("trunk.gallery_views", "false without a trunk layer and its views (trunk.views > 0): the gallery's "
                     "views are the trunk's augmented maps", True)
    if trunk.layer is None:
        return
    sizes = sorted({s.image_size for s in stages})
    if len(sizes) > 1:
        raise c.fail("stages[].image_size", "one image size for a trunk run (its maps are computed once, at one "
                     "size)", sizes)
    for i, s in enumerate(stages):
        if s.dataset != "main":
            raise c.fail(f"stages[{i}].dataset", "main for a trunk run (its maps are the competition's photos)",
                         s.dataset)
    if flip_ids:
        raise c.fail("flip_ids", "false for a trunk run (a mirrored photo's maps are not mirrored maps)", flip_ids)
    if tta:
        raise c.fail("tta", "no test-time views for a trunk run (each would need its own maps)", list(tta))
