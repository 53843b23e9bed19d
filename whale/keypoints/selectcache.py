"""Fitted keypoint selectors kept beside the features, so a second score run of one gallery fits none.

Fitting a selector (:mod:`whale.keypoints.selection`) is most of a score run's time on the real flukes: the
gallery's labels, two classifiers and every keypoint's score (over 20 minutes of 2 cores for 4,400 photos,
docs/humpback.md), while search and verification take under two. A selector depends only on its gallery (the
photos' contents and individuals, in order), the format's open label and the settings of
:meth:`~whale.keypoints.config.KeypointConfig.selection_hash`; so a run that changes only the score rule, adds
queries or scores the same fold again reads it back:

``<store>/<fingerprint>/selectors/<selection hash>-<gallery hash>.npz``: a sealed array file
(:mod:`whale.core.sealed`) holding the two classifiers as their trees' arrays (:mod:`whale.core.trees`), the
gallery's keypoint scores and the scores of every photo it selected since (:attr:`KeypointSelector.memo`, by the
photo's store key), with the reason and timings as JSON text; written atomically after each run that used it.

Nothing in the file is code: it is read with ``allow_pickle=False`` after its content hash is checked, and the
arrays are checked against the gallery (one score per keypoint of each photo) and as trees
(:meth:`whale.core.trees.TreeEnsemble.from_arrays`) whose inputs are those of the gallery's keypoints
(:func:`~whale.keypoints.selection.keypoint_context`: its descriptors' width and 6). A file that fails any check
(damaged, altered, of another :data:`FORMAT`, classifiers of another width, a pickle planted under its name) is
never used: the selector is fitted again and replaces it, and :attr:`SelectorCache.note` says so in one line naming
the file. The ``.pkl`` files of earlier versions are never read. What a cache may be trusted with:
docs/bad-inputs.md.

The selector's gallery also gives the learned check of each verified match (:mod:`whale.keypoints.check`): the
gallery matched against itself with the selected keypoints, every verified pair a row of a classifier (5-20 minutes
of 2 cores on 4,400 photos). It depends on the gallery, the selector and every other setting, so it is kept beside
the selector as ``<config hash>-<gallery hash>-check.npz`` (:meth:`~whale.keypoints.config.KeypointConfig.config_hash`:
every setting), sealed the same way (the classifier's trees, its pair counts and reason as JSON), and read back only
with the selector it was fitted with: a run that reads the selector back reads the check too (the joint
identification after both matchers' runs, a second score of the same fold), one that fits the selector fits the
check again and replaces the file. A check file that fails a check is fitted again, :attr:`SelectorCache.note`
naming it.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from whale import NEW_WHALE
from whale.core.sealed import SealError, read_sealed, write_sealed
from whale.core.trees import TreeEnsemble, prefixed, tree_arrays, unprefixed
from whale.keypoints.check import MatchCheck
from whale.keypoints.config import KeypointConfig
from whale.keypoints.extract import Features
from whale.keypoints.matcher import KeypointMatcher
from whale.keypoints.index import stored_width
from whale.keypoints.selection import CONTEXT, KeypointSelector

FORMAT = 2
"""The files' layout version: a file of another is fitted again (1: pickles, never read)."""
CHECK_FORMAT = 1
"""The check files' layout version."""


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

    def __init__(self, folder, cfg: KeypointConfig, keys: Sequence[str], ids: Sequence[str], open_label: str = "",
                 strict: bool = False):
        """``keys``: the gallery photos' store keys (:attr:`whale.keypoints.store.FeatureStore.keys`), which the
        selector is given as its photos' keys; ``ids`` their individuals. ``strict``: the check learns from the
        gallery's photos each left out strictly (:meth:`KeypointMatcher.build
        <whale.keypoints.matcher.KeypointMatcher.build>`'s ``strict``, a catalogue's joint check's), kept in a
        file of its own (``...-check-strict.npz``)."""
        self.cfg = cfg
        self.keys = list(keys)
        self.strict = strict
        gallery = gallery_hash(self.keys, ids, open_label)
        self.path = Path(folder) / "selectors" / f"{cfg.selection_hash()}-{gallery}.npz"
        tail = "-strict" if strict else ""
        self.check_path = Path(folder) / "selectors" / f"{cfg.config_hash()}-{gallery}-check{tail}.npz"
        self._notes = {"selector": "", "check": ""}  # what the last load and load_check could not use
        self._fitted: MatchCheck | None = None  # the check :meth:`matcher` fitted on this gallery, for :meth:`keep`

    @property
    def note(self) -> str:
        """One line when the last :meth:`load` or :meth:`load_check` found a file it could not use (fitted again),
        else empty."""
        return "; ".join(n for n in self._notes.values() if n)

    def load(self, gallery: Sequence[Features], progress: bool = False) -> KeypointSelector | None:
        """The selector kept for this gallery, with its :attr:`~KeypointSelector.memo` on; None when there is
        none, or it fails a check (:attr:`note` then says which file and why)."""
        state = self._read("selector", self.path, lambda a: _state(a, [len(f) for f in gallery],
                                                                  stored_width(gallery)))
        if state is None:
            return None
        selector = KeypointSelector.from_state(self.cfg.select, gallery, self.keys, state, progress)
        if selector.memo is None:
            selector.memo = {}
        return selector

    def _read(self, what: str, path: Path, parse):
        """``parse`` of the sealed file ``path``'s arrays; None when there is none, or it fails a check (the note
        of ``what``, the selector's or the check's, then names the file and why)."""
        self._notes[what] = ""
        try:
            return parse(read_sealed(path))
        except FileNotFoundError:
            return None
        except (SealError, ValueError, KeyError, TypeError) as exc:
            why = f"has no array {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc).replace(f"{path}: ", "")
            self._notes[what] = f"keypoint {what} {path}: {why}; not used, fitted again and replaced"
            return None

    def save(self, selector: KeypointSelector) -> Path:
        """Keep ``selector`` (fitted on this gallery under :attr:`keys`) with everything it scored."""
        if selector.memo is None:
            selector.memo = {}
        return write_sealed(self.path, _arrays(selector.state()), flag="--cache")

    def load_check(self) -> MatchCheck | None:
        """The check kept for this gallery and config (module docstring); None when there is none, or it fails a
        check (:attr:`note` then says which file and why)."""
        check = self._read("check", self.check_path, lambda a: _check_of(a, self.cfg))
        if check is None:
            return None
        check.kept = str(self.check_path)
        return check

    def save_check(self, check: MatchCheck) -> Path:
        """Keep ``check`` (fitted on this gallery with its selector, under this config)."""
        return write_sealed(self.check_path, _check_arrays(check), flag="--cache")

    def matcher(self, gallery: Sequence[Features], ids, open_label: str = NEW_WHALE,
                progress: bool = False) -> tuple[KeypointMatcher, bool]:
        """``(the matcher of this gallery under the cache's config, read back)``: its selector read back when this
        cache keeps one (``read_back`` True), with the check ``cfg.check`` asks for read back too when kept with it
        (:meth:`load_check`), else fitted on it; else :meth:`KeypointMatcher.build
        <whale.keypoints.matcher.KeypointMatcher.build>`'s, its selector then remembering every photo it scores for
        :meth:`keep`."""
        self._notes["check"] = ""
        selector = self.load(gallery, progress) if self.cfg.select.keep < 1 else None
        self._fitted = None
        if selector is not None:
            matcher = KeypointMatcher(self.cfg, gallery, ids, selector=selector, keys=self.keys, progress=progress)
            check = self.load_check() if self.cfg.check.model != "none" else None
            if check is not None:
                matcher.check = check
            else:
                self._fitted = matcher.fit_check(ids, open_label, progress, self.strict).check
            return matcher, True
        matcher = KeypointMatcher.build(self.cfg, gallery, ids, keys=self.keys, progress=progress,
                                        open_label=open_label, strict=self.strict)
        if matcher.selector is not None:
            matcher.selector.memo = {}
        self._fitted = matcher.check
        return matcher, False

    def keep(self, matcher: KeypointMatcher) -> None:
        """:meth:`save` the selector of ``matcher`` (one fitted on this gallery), when it selects, and the check
        :meth:`matcher` fitted on this gallery with it (:meth:`save_check`; not one given from another gallery)."""
        if matcher.selector is not None and matcher.selector.active:
            self.save(matcher.selector)
            if matcher.check is not None and matcher.check is self._fitted:
                self.save_check(matcher.check)
                self._fitted = None


    def drop_others(self) -> None:
        """Delete the selectors and checks (strict or not) this cache's settings fitted on other galleries (for a
        store of one gallery that changes, a catalogue's: each photo added or moved makes a new gallery, and the
        files of the earlier ones would never be read again)."""
        gallery = self.path.stem.rsplit("-", 1)[1]  # this gallery's: its checks of either kind stay
        selection, config = self.cfg.selection_hash(), self.cfg.config_hash()
        for pattern in (rf"{selection}-([0-9a-f]{{16}})\.npz", rf"{config}-([0-9a-f]{{16}})-check(-strict)?\.npz"):
            for old in self.path.parent.glob("*.npz"):
                found = re.fullmatch(pattern, old.name)
                if found and found.group(1) != gallery:
                    old.unlink(missing_ok=True)


def _model_arrays(model) -> dict[str, np.ndarray]:
    """The trees' arrays of a fitted classifier: scikit-learn's (:func:`tree_arrays`) or one read back."""
    return model.arrays() if isinstance(model, TreeEnsemble) else tree_arrays(model)


def _concat(arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(counts [n] int64, values float64)`` of a list of 1-d arrays."""
    counts = np.asarray([len(a) for a in arrays], np.int64)
    values = np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays]) if len(arrays) else np.zeros(0)
    return counts, values


def _split(counts: np.ndarray, values: np.ndarray, what: str) -> list[np.ndarray]:
    if counts.ndim != 1 or counts.dtype.kind != "i" or (counts < 0).any() or values.ndim != 1 \
            or int(counts.sum()) != len(values) or values.dtype != np.float64:
        raise ValueError(f"{what}: the counts do not split the scores")
    if not np.isfinite(values).all():
        raise ValueError(f"{what}: scores that are not finite")
    return np.split(values, np.cumsum(counts)[:-1]) if len(counts) else []


def _arrays(state: dict) -> dict[str, np.ndarray]:
    """The arrays of :meth:`KeypointSelector.state` (models as trees, scores concatenated, the rest JSON)."""
    meta = {"format": FORMAT, "reason": state["reason"], "seconds": state["seconds"], "models": len(state["models"]),
            "gallery_scores": state["gallery_scores"] is not None}
    out = {"meta": np.asarray(json.dumps(meta))}
    for i, model in enumerate(state["models"]):
        out.update(prefixed(_model_arrays(model), f"model{i}_"))
    out["gallery_counts"], out["gallery_scores"] = _concat(state["gallery_scores"] or [])
    memo = state["memo"] or {}
    out["memo_keys"] = np.asarray(list(memo), dtype=str) if memo else np.zeros(0, "<U1")
    out["memo_counts"], out["memo_scores"] = _concat(list(memo.values()))
    return out


def _state(arrays: dict, sizes: Sequence[int], width: int | None = None) -> dict:
    """The :meth:`KeypointSelector.state` of :func:`_arrays`' arrays, for a gallery of photos with ``sizes``
    keypoints and descriptors of ``width`` bytes (None: not checked); ValueError (or KeyError) when they do not
    describe one."""
    meta = json.loads(str(arrays["meta"]))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"of format {meta.get('format') if isinstance(meta, dict) else '?'}, not {FORMAT}")
    if not isinstance(meta.get("reason"), str) or not isinstance(meta.get("seconds"), dict) \
            or not isinstance(meta.get("models"), int) or not 0 <= meta["models"] <= 2:
        raise ValueError("its description is not a selector's")
    models = [TreeEnsemble.from_arrays(unprefixed(arrays, f"model{i}_")) for i in range(meta["models"])]
    inputs = {m.n_features for m in models}
    if width is not None and inputs - {width + CONTEXT}:
        raise ValueError(f"classifiers of {min(inputs)} inputs where this gallery's keypoints have "
                         f"{width + CONTEXT} (descriptors of {width} bytes and {CONTEXT} more)")
    scores = _split(arrays["gallery_counts"], arrays["gallery_scores"], "gallery scores")
    if meta.get("gallery_scores"):
        if [len(p) for p in scores] != list(sizes):
            raise ValueError(f"gallery scores for {len(scores)} photos that do not match the gallery's "
                             f"{len(sizes)} photos' keypoints")
    elif models or scores:
        raise ValueError("classifiers without the gallery's scores")
    keys = arrays["memo_keys"]
    if keys.ndim != 1 or keys.dtype.kind != "U":
        raise ValueError("the scored photos' keys are not text")
    memo_scores = _split(arrays["memo_counts"], arrays["memo_scores"], "scored photos")
    if len(memo_scores) != len(keys):
        raise ValueError(f"{len(keys)} scored photos' keys for {len(memo_scores)} photos' scores")
    return {"models": models, "gallery_scores": scores if meta.get("gallery_scores") else None,
            "reason": meta["reason"], "seconds": meta["seconds"], "memo": dict(zip(keys.tolist(), memo_scores))}


def _check_arrays(check: MatchCheck) -> dict[str, np.ndarray]:
    """The arrays of a :class:`MatchCheck`: its classifier's trees (none when inactive), pair counts and reason."""
    meta = {"format": CHECK_FORMAT, "reason": check.reason, "pairs": list(check.pairs), "seconds": check.seconds,
            "model": check.model is not None}
    out = {"meta": np.asarray(json.dumps(meta))}
    if check.model is not None:
        out.update(prefixed(_model_arrays(check.model), "check_"))
    return out


def _check_of(arrays: dict, cfg: KeypointConfig) -> MatchCheck:
    """The :class:`MatchCheck` of :func:`_check_arrays`' arrays under ``cfg``; ValueError (or KeyError) when they do
    not describe one whose classifier reads :mod:`whale.keypoints.pairstats`' rows (both directions' side by side
    under ``check.both_ways``)."""
    from whale.keypoints.pairstats import NAMES

    meta = json.loads(str(arrays["meta"]))
    if not isinstance(meta, dict) or meta.get("format") != CHECK_FORMAT:
        raise ValueError(f"of format {meta.get('format') if isinstance(meta, dict) else '?'}, not {CHECK_FORMAT}")
    pairs = meta.get("pairs")
    if not isinstance(meta.get("reason"), str) or not isinstance(meta.get("seconds"), dict) \
            or not isinstance(pairs, list) or len(pairs) != 2 or not all(isinstance(n, int) for n in pairs):
        raise ValueError("its description is not a check's")
    model = TreeEnsemble.from_arrays(unprefixed(arrays, "check_")) if meta.get("model") else None
    width = len(NAMES) * (2 if cfg.check.both_ways else 1)  # both ways: each direction's columns side by side
    if model is not None and model.n_features != width:
        raise ValueError(f"a classifier of {model.n_features} inputs where a verified pair's row has {width}")
    return MatchCheck(cfg.check, model, meta["reason"], pairs, meta["seconds"])
