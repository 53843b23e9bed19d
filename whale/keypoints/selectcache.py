"""Fitted keypoint selectors kept beside the features, so a second score run of one gallery fits none.

Fitting a selector (:mod:`whale.keypoints.selection`) is most of a score run's time on the real flukes: the
gallery's labels, two classifiers and every keypoint's score (over 20 minutes of 2 cores for 4,400 photos,
docs/humpback.md), while search and verification take under two. A selector depends only on its gallery (the
photos' contents and individuals, in order), the format's open label and the settings of
:meth:`~whale.keypoints.config.KeypointConfig.selection_hash`; so a run that changes only the score rule, adds
queries or scores the same fold again reads it back:

``<store>/<fingerprint>/selectors/<selection hash>-<gallery hash>.pkl``: the classifiers, the gallery's keypoint
scores and the scores of every photo it selected since (:attr:`KeypointSelector.memo`, by the photo's store key),
written atomically after each run that used it. A file that cannot be read is fitted again and replaced.

The files are Python pickles (scikit-learn's models have no other format): they are read only from the store the
user named (``--cache``), never from a file handed in.
"""
from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Sequence
from pathlib import Path

from whale import NEW_WHALE
from whale.core.files import atomic_write
from whale.keypoints.config import KeypointConfig
from whale.keypoints.extract import Features
from whale.keypoints.matcher import KeypointMatcher
from whale.keypoints.selection import KeypointSelector

FORMAT = 1
"""The files' layout version: a file of another is fitted again."""


def gallery_hash(keys: Sequence[str], ids: Sequence[str], open_label: str) -> str:
    """16 hex digits naming a gallery: its photos' store keys and individuals, in order, and the open label."""
    payload = json.dumps({"keys": list(keys), "ids": [str(i) for i in ids], "open": open_label})
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


class SelectorCache:
    """The selector of one gallery under one config in ``folder`` (module docstring).

    Example:
        >>> cache = SelectorCache(store.folder, cfg, keys, ids)             # doctest: +SKIP
        >>> matcher, read_back = cache.matcher(gallery, ids)               # the selector read back or fitted
        >>> result = matcher.match(queries, keys=query_keys)                 # doctest: +SKIP
        >>> cache.keep(matcher)                                               # kept with every photo it scored
    """

    def __init__(self, folder, cfg: KeypointConfig, keys: Sequence[str], ids: Sequence[str], open_label: str = ""):
        """``keys``: the gallery photos' store keys (:attr:`whale.keypoints.store.FeatureStore.keys`), which the
        selector is given as its photos' keys; ``ids`` their individuals."""
        self.cfg = cfg
        self.keys = list(keys)
        self.path = (Path(folder) / "selectors" /
                     f"{cfg.selection_hash()}-{gallery_hash(self.keys, ids, open_label)}.pkl")

    def load(self, gallery: Sequence[Features], progress: bool = False) -> KeypointSelector | None:
        """The selector kept for this gallery, with its :attr:`~KeypointSelector.memo` on; None when there is
        none (or it cannot be read)."""
        try:
            with open(self.path, "rb") as fh:
                state = pickle.load(fh)
        except FileNotFoundError:
            return None
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError, TypeError):
            return None  # damaged or of another version: fitted again and replaced
        if not isinstance(state, dict) or state.get("format") != FORMAT or len(state["gallery_scores"] or ()) not in (
                0, len(self.keys)):
            return None
        selector = KeypointSelector.from_state(self.cfg.select, gallery, self.keys, state, progress)
        if selector.memo is None:
            selector.memo = {}
        return selector

    def save(self, selector: KeypointSelector) -> Path:
        """Keep ``selector`` (fitted on this gallery under :attr:`keys`) with everything it scored."""
        if selector.memo is None:
            selector.memo = {}
        state = {"format": FORMAT, **selector.state()}

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)

        return atomic_write(self.path, write, flag="--cache")

    def matcher(self, gallery: Sequence[Features], ids, open_label: str = NEW_WHALE,
                progress: bool = False) -> tuple[KeypointMatcher, bool]:
        """``(the matcher of this gallery under the cache's config, read back)``: its selector read back when this
        cache keeps one (``read_back`` True; the check ``cfg.check`` asks for fitted on it), else
        :meth:`KeypointMatcher.build <whale.keypoints.matcher.KeypointMatcher.build>`'s, its selector then
        remembering every photo it scores for :meth:`keep`."""
        selector = self.load(gallery, progress) if self.cfg.select.keep < 1 else None
        if selector is not None:
            matcher = KeypointMatcher(self.cfg, gallery, ids, selector=selector, keys=self.keys, progress=progress)
            return matcher.fit_check(ids, open_label, progress), True
        matcher = KeypointMatcher.build(self.cfg, gallery, ids, keys=self.keys, progress=progress, open_label=open_label)
        if matcher.selector is not None:
            matcher.selector.memo = {}
        return matcher, False

    def keep(self, matcher: KeypointMatcher) -> None:
        """:meth:`save` the selector of ``matcher`` (one fitted on this gallery), when it selects."""
        if matcher.selector is not None and matcher.selector.active:
            self.save(matcher.selector)
