"""``match --method joint --outline``: the trailing edge's learned outline proposing a catalogue's candidates.

``whale catalogue match CAT --method joint --photos NEW --outline [FILE]`` (``FILE``: the outline's settings,
default ``configs/outline.yaml``) adds to each new photo's one shortlist (:mod:`whale.catalogue.joint`) the best
``shortlist.runs`` catalogue photos by the outline's cosine, as ``recipes/flukes_outline.yaml`` adds them to a
competition's (``--with-run`` of the outline's score folder; docs/humpback.md, "The outline in the joint"):

1. every photo's trailing edge read once (:class:`whale.outline.curve.CurveStore` in ``CAT/outline/``, by the
   photo's content hash and box: the catalogue's photos and each batch's);
2. the outline net (:mod:`whale.outline.net`) trained on the catalogue's curves of every individual for the
   settings' ``steps`` and kept in ``CAT/calibration/`` as the calibrations are
   (:func:`whale.catalogue.calibration.kept_file`): a match on an unchanged catalogue reads it back, one after an
   ``add``, ``accept``, ``move`` or ``remove`` trains it again (2,000 batches: minutes on a CPU) and deletes the
   stale file;
3. the batch's cosines against the catalogue, 0 where either photo has no curve (a photo without one proposes
   nothing: :func:`whale.identify.sources.top_photos`).

As ``--run``, the outline **only proposes**: it trained on the catalogue's photos, so its cosines of them are
over-confident, and the catalogue's check (fitted on those photos, each left out of its own row) never sees it; a
pair it proposes is judged on what every feature kind verified of it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

DIR = "outline"
"""``CAT/outline/``: the curves of the catalogue's photos and of its batches."""
DEFAULT_CONFIG = Path("configs") / "outline.yaml"
"""``--outline``'s settings when no file is named, relative to the folder the command runs in (the toolkit's)."""


def outline_config(path=None):
    """The outline's settings (:class:`whale.outline.net.OutlineConfig`) of ``path`` (None: :data:`DEFAULT_CONFIG`).

    Raises:
        ConfigError: no such file (saying where the default is looked for), or a bad setting (the file named).
    """
    from whale.core.errors import ConfigError
    from whale.outline.net import load_outline_config

    path = Path(DEFAULT_CONFIG if path is None else path)
    if not path.is_file():
        raise ConfigError(f"{path}: no outline config there: --outline reads the outline net's settings from FILE "
                          f"(default {DEFAULT_CONFIG}, relative to the folder the command runs in: the toolkit's)")
    return load_outline_config(path)


def outline_scores(cat_root, cfg, paths, hashes, boxes, individuals, photos, photo_boxes, progress: bool = True,
                   say=print) -> np.ndarray:
    """``[n_photos, n_catalogue] float32``: the outline's cosines of the batch's ``photos`` (their boxes
    ``photo_boxes``) against the catalogue's photos ``paths`` (content ``hashes``, ``boxes``, ``individuals``), by
    the net of settings ``cfg`` trained on the catalogue, or read back (module docstring); ``say``: told how.

    Raises:
        DataError: a photo that is not an image, or a catalogue whose curves are of fewer than two individuals
            (nothing to learn: named, with what to do).
    """
    from whale.catalogue.calibration import drop_earlier, kept_file
    from whale.core.errors import DataError
    from whale.core.files import file_hash
    from whale.keypoints.store import boxed_key
    from whale.outline.curve import CurveStore
    from whale.outline.net import embeddings, load_embedding, save_embedding, train_embedding
    from whale.outline.score import cosines

    n = len(paths)
    keys = list(hashes) + [file_hash(p) for p in photos]
    curves, ok = CurveStore(Path(cat_root) / DIR).of(list(paths) + list(photos), keys, progress, say,
                                                     boxes=list(boxes) + list(photo_boxes))
    individuals = np.asarray(individuals, str)
    learn = np.flatnonzero(ok[:n])
    whales = len(set(individuals[learn].tolist()))
    if whales < 2:
        raise DataError(f"{cat_root}: --outline: the trailing edge was read on {len(learn)} of the catalogue's {n} "
                        f"photos, of {whales} individual(s): the outline net needs two whales to learn from; match "
                        "without --outline")
    path = kept_file(cat_root, f"outline net {cfg.config_hash()}", [boxed_key(h, b) for h, b in zip(hashes, boxes)],
                     individuals, ".npz")
    embed = None
    if path.is_file():
        try:
            embed = load_embedding(path)
            say(f"outline: the net of this catalogue read back from {path.name}")
        except DataError:
            embed = None  # a damaged file: trained again below
    if embed is None:
        say(f"outline: the net trained on {len(learn)} curves of {whales} individuals of the catalogue, {cfg.steps} "
            f"batches (kept in {path.parent.name}/ until the catalogue changes)")
        embed = train_embedding(curves[learn], individuals[learn], cfg.steps, cfg.seed, progress=progress)
        save_embedding(embed, path, flag="catalogue folder")
        drop_earlier(path)  # the net of an earlier catalogue
    without = int((~ok[n:]).sum())
    if without:
        say(f"outline: {without} of the batch's {len(photos)} photos without a trailing edge (the outline proposes "
            "nothing for them)")
    return cosines(embeddings(embed, curves), ok, np.arange(n, n + len(photos)), np.arange(n))
