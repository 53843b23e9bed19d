"""The keypoint matcher's settings: YAML (``configs/keypoints.yaml``) -> one frozen dataclass.

Four groups, each a plain value: how a photo becomes local features (``features``), which of them each photo
keeps (``select``), how the gallery's descriptors are searched and voted on (``search``), how the best
candidates are checked geometrically and turned into scores (``verify``). :meth:`KeypointConfig.fingerprint` names the feature settings only, so
descriptors stored by one config serve every config that extracts the same way
(:class:`whale.keypoints.store.FeatureStore`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whale.config.checker import Checker
from whale.core.errors import ConfigError
from whale.core.files import file_hash
from whale.config.overrides import apply_override

GEOMETRIES = ("homography", "affine", "similarity")
"""Models of geometric verification: 8, 6 or 4 degrees of freedom."""
ROBUST = ("magsac", "ransac")
"""Robust estimators of verification: OpenCV's USAC MAGSAC++ or classic RANSAC (a similarity is always
fitted by RANSAC: OpenCV has no USAC estimator for it)."""
NORMALISERS = ("next", "other_individual")
"""Which neighbour normalises LNBNN's votes (:func:`whale.keypoints.matcher.normaliser`)."""
INDEXES = ("auto", "exact", "ivf")
"""Nearest-neighbour search: every descriptor compared (``exact``), or FAISS IVF-PQ fast scan whose
candidates are re-ranked exactly (``ivf``); ``auto`` takes ``ivf`` from :data:`AUTO_IVF_FROM` descriptors."""
AUTO_IVF_FROM = 200_000
"""Gallery descriptors from which ``index: auto`` takes the approximate index."""
FEATURE_VERSION = 2
"""Bumped when extraction changes in a way the settings do not show (stored descriptors are then redone)."""
_LATER_FEATURE_KEYS = {"min_side": 0, "descriptor": "rootsift"}
"""Feature settings added after :data:`FEATURE_VERSION` 2, named in the fingerprint only when set away from
this default, so that features stored before they existed stay valid."""


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
    more distinctive, not rotation invariant). ``descriptor``: ``rootsift``, or the folder of a learned
    descriptor (:mod:`whale.keypoints.descriptor`) describing the same keypoints' patches.
    """

    trim_white: bool = True
    max_side: int = 0
    min_side: int = 0
    clahe: float = 2.0
    n_features: int = 2000
    contrast: float = 0.04
    sigma: float = 1.2
    upright: bool = True
    descriptor: str = "rootsift"


@dataclass(frozen=True)
class SearchConfig:
    """How query descriptors find gallery images: ``k`` nearest neighbours vote, the next one normalises.

    LNBNN (McCann & Lowe 2012, HotSpotter's vote): each of a query descriptor's ``k`` nearest gallery
    descriptors votes for its image with weight ``d_(k+1) - d_i``, at most one vote per (query
    descriptor, image). ``normaliser``: ``next`` (the ``k+1``-th neighbour) or ``other_individual``
    (HotSpotter's name rule: the first of ``extra`` more neighbours whose individual none of the voters
    has). ``index``: :data:`INDEXES`; ``nprobe``: IVF lists visited per descriptor.
    """

    k: int = 4
    normaliser: str = "other_individual"
    extra: int = 4
    index: str = "auto"
    nprobe: int = 8


@dataclass(frozen=True)
class VerifyConfig:
    """Geometric verification of each query's ``shortlist`` best images by votes.

    The votes' correspondences of a candidate image are fitted by ``geometry`` with ``robust``;
    ``reproj_px``: the inlier distance in pixels of the trimmed photo; ``min_matches``: fewer
    correspondences than this and the candidate is not verified. Score of an image:
    ``t / (t + scale)``, ``t = inlier_weight + vote_weight * votes``: 0 without evidence, towards 1 with
    more verified evidence (inlier LNBNN weight), unverified votes counting ``vote_weight`` as much.
    ``new_threshold``: below it a photo's best individual leaves it "possibly new" where no calibrated
    probability is at hand (the catalogue's ``match --method keypoints`` on a catalogue without two photos of
    one whale; every other catalogue reads P(same whale), :mod:`whale.catalogue.calibration`); chosen on the
    real flukes' validation folds (docs/humpback.md). ``whale ensemble --tune`` tunes its own on a fold's
    validation queries.
    """

    shortlist: int = 20
    geometry: str = "homography"
    robust: str = "magsac"
    reproj_px: float = 8.0
    min_matches: int = 4
    vote_weight: float = 0.001
    scale: float = 1.0
    new_threshold: float = 0.15


@dataclass(frozen=True)
class SelectConfig:
    """Which keypoints each photo keeps (:mod:`whale.keypoints.selection`): a classifier learns from the
    gallery matched against itself which keypoints the matches between photos of one individual verify.

    ``keep``: the share of each photo's keypoints kept, best first (1 = every keypoint: selection off);
    ``least``: at least this many kept; ``min_inliers``: a verified same-individual match with fewer inliers
    teaches nothing; ``photos``: gallery photos matched against the gallery for the labels, a seeded sample of
    whole individuals with two or more photos (0: every such photo); ``samples``: keypoints the classifier is
    fitted on (a seeded sample of those photos'); ``seed``: of both samples and the classifier.
    """

    keep: float = 0.3
    least: int = 20
    min_inliers: int = 4
    photos: int = 1500
    samples: int = 100_000
    seed: int = 0


@dataclass(frozen=True)
class KeypointConfig:
    """Everything the keypoint matcher does, as data (``configs/keypoints.yaml``)."""

    features: FeatureConfig = field(default_factory=FeatureConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    select: SelectConfig = field(default_factory=SelectConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def without_selection(self) -> "KeypointConfig":
        """The same settings with every keypoint kept (``select.keep: 1``)."""
        return dataclasses.replace(self, select=dataclasses.replace(self.select, keep=1.0))

    def fingerprint(self) -> str:
        """12 hex digits naming the feature settings (and :data:`FEATURE_VERSION`)."""
        features = {k: v for k, v in dataclasses.asdict(self.features).items()
                    if _LATER_FEATURE_KEYS.get(k, object()) != v}
        if self.features.descriptor != "rootsift":  # a retrained descriptor is another feature
            from whale.keypoints.descriptor import WEIGHTS  # descriptor imports nothing of this package's but patches

            weights = Path(self.features.descriptor) / WEIGHTS
            features["descriptor"] = file_hash(weights) if weights.is_file() else f"missing {weights}"
        payload = json.dumps({"v": FEATURE_VERSION, **features}, sort_keys=True)
        return hashlib.sha1(payload.encode()).hexdigest()[:12]

    def config_hash(self) -> str:
        """12 hex digits naming every setting (the score files' ``config_hash``)."""
        return hashlib.sha1(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def _section(check: Checker, raw: dict, name: str, cls) -> dict:
    value = raw.get(name) or {}
    allowed = tuple(f.name for f in dataclasses.fields(cls))
    return check.mapping(value, name, allowed, ())


def parse_keypoint_config(raw: Any, source: str = "<keypoint config>") -> KeypointConfig:
    """A raw mapping (parsed YAML) -> :class:`KeypointConfig`; missing keys take the defaults.

    Raises:
        ConfigError: an unknown key or a bad value, naming ``source`` and the key path.
    """
    check = Checker(source)
    raw = check.mapping(raw if raw is not None else {}, "", ("features", "search", "verify", "select"), ())
    f = _section(check, raw, "features", FeatureConfig)
    s = _section(check, raw, "search", SearchConfig)
    v = _section(check, raw, "verify", VerifyConfig)
    c = _section(check, raw, "select", SelectConfig)
    d = FeatureConfig()
    features = FeatureConfig(
        trim_white=check.boolean(f.get("trim_white", d.trim_white), "features.trim_white"),
        max_side=check.number(f.get("max_side", d.max_side), "features.max_side", int, lo=0, hi=4096),
        min_side=check.number(f.get("min_side", d.min_side), "features.min_side", int, lo=0, hi=4096),
        clahe=check.number(f.get("clahe", d.clahe), "features.clahe", float, lo=0),
        n_features=check.number(f.get("n_features", d.n_features), "features.n_features", int, lo=8, hi=20000),
        contrast=check.number(f.get("contrast", d.contrast), "features.contrast", float, lo=0, lo_open=True),
        sigma=check.number(f.get("sigma", d.sigma), "features.sigma", float, lo=0.5, hi=8),
        upright=check.boolean(f.get("upright", d.upright), "features.upright"),
        descriptor=str(f.get("descriptor", d.descriptor)))
    d = SearchConfig()
    search = SearchConfig(
        k=check.number(s.get("k", d.k), "search.k", int, lo=1, hi=64),
        normaliser=check.choice(s.get("normaliser", d.normaliser), "search.normaliser", NORMALISERS),
        extra=check.number(s.get("extra", d.extra), "search.extra", int, lo=1, hi=64),
        index=check.choice(s.get("index", d.index), "search.index", INDEXES),
        nprobe=check.number(s.get("nprobe", d.nprobe), "search.nprobe", int, lo=1, hi=4096))
    d = VerifyConfig()
    verify = VerifyConfig(
        shortlist=check.number(v.get("shortlist", d.shortlist), "verify.shortlist", int, lo=0, hi=10000),
        geometry=check.choice(v.get("geometry", d.geometry), "verify.geometry", GEOMETRIES),
        robust=check.choice(v.get("robust", d.robust), "verify.robust", ROBUST),
        reproj_px=check.number(v.get("reproj_px", d.reproj_px), "verify.reproj_px", float, lo=0, lo_open=True),
        min_matches=check.number(v.get("min_matches", d.min_matches), "verify.min_matches", int, lo=4, hi=1000),
        vote_weight=check.number(v.get("vote_weight", d.vote_weight), "verify.vote_weight", float, lo=0),
        scale=check.number(v.get("scale", d.scale), "verify.scale", float, lo=0, lo_open=True),
        new_threshold=check.number(v.get("new_threshold", d.new_threshold), "verify.new_threshold", float, lo=0, hi=1))
    d = SelectConfig()
    select = SelectConfig(
        keep=check.number(c.get("keep", d.keep), "select.keep", float, lo=0, hi=1, lo_open=True),
        least=check.number(c.get("least", d.least), "select.least", int, lo=1, hi=100000),
        min_inliers=check.number(c.get("min_inliers", d.min_inliers), "select.min_inliers", int, lo=4, hi=1000),
        photos=check.number(c.get("photos", d.photos), "select.photos", int, lo=0),
        samples=check.number(c.get("samples", d.samples), "select.samples", int, lo=1000, hi=100_000_000),
        seed=check.number(c.get("seed", d.seed), "select.seed", int, lo=0))
    return KeypointConfig(features, search, verify, select)


def load_keypoint_config(path=None, overrides: dict | None = None) -> KeypointConfig:
    """The config of ``path`` (YAML; None = the defaults) with ``--set`` ``overrides`` applied.

    Raises:
        ConfigError: unreadable file, unknown key or bad value (file and key path named).
    """
    import yaml

    raw: dict = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as e:
            raise ConfigError(f"{path}: cannot read the keypoint config ({e.strerror or e})") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML ({e})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping of features/search/verify/select, received {raw!r}")
    for key, value in (overrides or {}).items():
        apply_override(raw, key, value, source)
    return parse_keypoint_config(raw, source)
