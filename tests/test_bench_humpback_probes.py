"""benchmarks/flukes/humpback_probes.py: the pairwise re-ranking and the confuser search on photos whose answers are
known, and a whole run on a tiny fake source."""
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.flukes import shared, humpback_probes as probes  # noqa: E402
from tests.test_bench_humpback import fake_source  # noqa: E402
from tests.test_keypoints import pattern, warp, write  # noqa: E402


def features_of(images, tmp_path):
    from whale.keypoints import extract, load_keypoint_config

    cfg = load_keypoint_config()
    return cfg, [extract(write(tmp_path / f"p{i}.png", image), cfg.features) for i, image in enumerate(images)]


def test_pairwise_inliers_find_the_same_photo_among_the_shortlist(tmp_path):
    a, b, c = pattern(1), pattern(2), pattern(3)
    cfg, (fa, fb, fc, fq) = features_of([a, b, c, warp(b, 0)], tmp_path)
    import cv2

    before = cv2.getNumThreads()
    pin = probes.pairwise_inliers([fq], [fa, fb, fc], np.array([[0, 1]]), cfg)
    assert cv2.getNumThreads() == before  # one thread inside it only (verify.opencv_threads), not process-wide
    assert pin.shape == (1, 3)
    assert pin[0, 1] >= 20 and pin[0, 1] > 4 * pin[0, 0]
    assert pin[0, 2] == 0  # not on the shortlist: never matched


def test_confusers_are_matches_across_individuals_only(tmp_path):
    import cv2

    a = pattern(4)
    b = cv2.GaussianBlur(np.random.default_rng(5).integers(0, 255, a.shape, dtype=np.uint8), (0, 0), 2.0)  # nothing alike
    cfg, gallery = features_of([a, warp(a, 1), b, warp(b, 2)], tmp_path)
    ids = np.array(["w1", "w2", "w3", "w3"])  # the same picture under two ids: a caption shared by two whales
    hits = probes.confuser_inliers(gallery, ids, cfg)
    assert len(hits[0]) >= 20 and len(hits[1]) >= 20 and max(hits[0].values()) >= 40
    assert all(n >= cfg.verify.min_matches for n in hits[0].values())
    # w3's two photos match each other (no confuser there); its chance fits to w1's photos stay small
    assert max(hits[2].values(), default=0) < max(probes.CONFUSER_INLIERS)
    assert max(hits[3].values(), default=0) < max(probes.CONFUSER_INLIERS)


def test_evidence_inverts_the_score():
    from whale.keypoints.scoring import evidence_to_score
    from whale.keypoints import load_keypoint_config

    t = np.array([0.0, 0.5, 3.0])
    for scale in (1.0, 2.5):
        cfg = load_keypoint_config(overrides={"verify.scale": scale}).verify
        assert np.allclose(probes.evidence(evidence_to_score(t, np.zeros(3), cfg), scale), t, atol=1e-5)


def test_whole_probe_run_on_a_fake_source(tmp_path, monkeypatch):
    src = fake_source(tmp_path / "src", counts=(1,) * 8 + (2,) * 4 + (3,) * 6 + (5,) * 4)
    monkeypatch.setattr(shared.common, "shared_data", lambda *a: src)
    monkeypatch.setattr(probes.common, "shared_data", lambda *a: src)
    out = tmp_path / "out"
    assert probes.main(["--out", str(out)]) == 0
    rows = json.loads((out / "probes" / "probes.json").read_text())
    assert rows[0]["setting"] == "configs/keypoints.yaml as shipped"
    assert len(rows) == 1 + len(probes.RERANK_WEIGHTS) + 2 * len(probes.CONFUSER_INLIERS)
    assert all(0 <= r["map5_known"] <= 1 for r in rows)
    assert (out / "probes" / "misses.png").is_file()
