"""A training-free matcher of local features, as photo-ID researchers use (Wildbook's HotSpotter).

RootSIFT on contrast-normalised photos without their white padding (:mod:`~whale.keypoints.extract`),
kept per photo content (:mod:`~whale.keypoints.store`), searched over the whole gallery
(:mod:`~whale.keypoints.index`), LNBNN votes (:mod:`~whale.keypoints.votes`), geometric verification
(:mod:`~whale.keypoints.verify`) and the score (:mod:`~whale.keypoints.scoring`) put together by
:mod:`~whale.keypoints.matcher`, the display's correspondences of two photos (:mod:`~whale.keypoints.pairs`),
score files like a trained run's (:mod:`whale.inference.keypoints`). Settings: :mod:`~whale.keypoints.config`,
``configs/keypoints.yaml``. No Keras import here: a learned descriptor (:mod:`~whale.keypoints.descriptor`,
on :mod:`~whale.keypoints.patches`) or XFeat (:mod:`~whale.keypoints.xfeat`) loads Keras when a config names one.
"""
from whale.keypoints.config import KeypointConfig, load_keypoint_config
from whale.keypoints.extract import Features, extract
from whale.keypoints.matcher import KeypointMatcher, MatchResult
from whale.keypoints.pairs import pair_matches
from whale.keypoints.store import FeatureStore

__all__ = ["Features", "FeatureStore", "KeypointConfig", "KeypointMatcher", "MatchResult", "extract",
           "load_keypoint_config", "pair_matches"]
