"""The catalogue's own P(same whale): calibrated on its photos left out one by one, stored, and read by "possibly
new" and by the grouping of a batch (issue 57, item 3: a small catalogue flagged none of 19 unknown whales and
linked the whole batch into one group)."""
import numpy as np
import pytest

from whale.catalogue.calibration import catalogue_calibration, left_out_queries, read_calibration
from whale.catalogue.match import Flagging, groups_of


def small_catalogue(rng, n_ids=20, per_id=3):
    """A catalogue's left-out scores as the keypoint matcher gives them in a small catalogue: different whales
    0.15-0.5 (most above the old score threshold 0.15), the same whale 0.55-0.95."""
    ids = np.repeat([f"w{i}" for i in range(n_ids)], per_id)
    same = ids[:, None] == ids[None, :]
    scores = np.where(same, rng.uniform(0.55, 0.95, same.shape), rng.uniform(0.15, 0.5, same.shape))
    return ids, [f"h{i:03d}" for i in range(len(ids))], scores.astype(np.float32)


def test_a_batch_of_unknown_whales_is_flagged_and_not_chained_into_one_group():
    rng = np.random.default_rng(0)
    from scipy.sparse.csgraph import connected_components

    from whale.ranking.pairprob import PairCalibration

    ids, hashes, loo = small_catalogue(rng)
    cal = PairCalibration.fit(loo, ids, ids, skip=np.arange(len(ids)))
    flag = Flagging.of(cal, None, 0.15, "the catalogue's calibration")
    assert flag.scale == "probability" and flag.threshold == 0.5 and "P(same whale) 0.5" in flag.how
    # the batch: 20 whales, 4 photographed twice, none alike otherwise; different whales score as in the catalogue
    whale = np.array(list(range(20)) + [0, 1, 2, 3])
    same = whale[:, None] == whale[None, :]
    batch = np.where(same, rng.uniform(0.7, 0.95, same.shape), rng.uniform(0.15, 0.5, same.shape)).astype(np.float32)
    assert (batch[~same] >= 0.15).mean() > 0.8  # the "83% of pair scores reach 0.15"
    groups = flag.groups(batch)
    assert [groups[i] for i in (0, 20)] == [0, 0] and groups[3] == groups[23] == 3
    assert sum(g is not None for g in groups) == 8  # the four whales photographed twice, nothing else
    # before: every pair reaching the raw score 0.15 linked, one group of all 24 photos (the failure)
    assert connected_components(batch >= 0.15, directed=False)[0] == 1
    best = rng.uniform(0.2, 0.5, 19).astype(np.float32)  # unknown whales' best candidates
    assert (flag.probabilities(best) < 0.5).all()
    assert flag.probabilities(np.float32([0.9]))[0] > 0.5  # the catalogued whale's photo


def test_complete_linkage_never_joins_two_photos_through_a_third():
    # a-b and b-c alike, a-c not: linking every pair above the threshold would make one group of three
    s = np.array([[0, 0.9, 0.1, 0.0], [0.9, 0, 0.8, 0.0], [0.1, 0.8, 0, 0.0], [0.0, 0.0, 0.0, 0]], np.float32)
    groups = groups_of(s, 0.5)
    assert groups[0] == groups[1] == 0 and groups[2] is None and groups[3] is None
    s[0, 2] = 0.6  # now every pair of the three reaches it
    assert groups_of(s, 0.5) == [0, 0, 0, None]
    assert groups_of(s.T.copy(), 0.5) == [0, 0, 0, None]  # one direction is enough (max of both)
    assert groups_of(np.zeros((1, 1), np.float32), 0.5) == [None]


def test_the_calibration_is_fitted_once_per_catalogue_and_settings_and_again_when_the_catalogue_changes(tmp_path):
    rng = np.random.default_rng(1)
    ids, hashes, loo = small_catalogue(rng, 8, 3)
    calls = []

    def scores_of(rows):
        calls.append(rows.tolist())
        return loo[rows]

    cal, how = catalogue_calibration(tmp_path, "keypoints abc", hashes, ids, scores_of)
    assert calls == [list(range(24))] and "fitted now on 24 left-out photos" in how
    files = list((tmp_path / "calibration").glob("*.json"))
    assert len(files) == 1 and read_calibration(files[0]) == cal
    again, how = catalogue_calibration(tmp_path, "keypoints abc", hashes[::-1], ids[::-1], scores_of)
    assert again == cal and len(calls) == 1 and "stored" in how  # the same photos in another order: read back
    catalogue_calibration(tmp_path, "run fp1", hashes, ids, scores_of)  # other settings: their own file
    assert len(calls) == 2 and len(list((tmp_path / "calibration").glob("*.json"))) == 2
    ids2 = ids.copy()
    ids2[0] = "w7"  # a photo moved to another individual: fitted again, the stale file of these settings gone
    catalogue_calibration(tmp_path, "keypoints abc", hashes, ids2, scores_of)
    assert len(calls) == 3 and files[0].exists() is False
    assert len(list((tmp_path / "calibration").glob("*.json"))) == 2
    files = list((tmp_path / "calibration").glob("*.json"))
    for f in files:
        f.write_text("{broken")  # a damaged cache is fitted again, not an error
    catalogue_calibration(tmp_path, "keypoints abc", hashes, ids2, scores_of)
    assert len(calls) == 4
    none, why = catalogue_calibration(tmp_path, "keypoints abc", hashes[:8], [f"x{i}" for i in range(8)], scores_of)
    assert none is None and "two photos of one whale" in why and len(calls) == 4
    flag = Flagging.of(None, 0.7, 0.15, why)
    assert flag.scale == "score" and flag.threshold == 0.15 and "--threshold 0.7 is a probability" in flag.how


def test_left_out_queries_are_all_photos_or_a_seeded_draw():
    assert left_out_queries(5, 10).tolist() == [0, 1, 2, 3, 4]
    draw = left_out_queries(5000, 100)
    assert len(draw) == 100 and (np.diff(draw) > 0).all() and (left_out_queries(5000, 100) == draw).all()


@pytest.mark.parametrize("scale", ["probability", "score"])
def test_recorded_proposals_carry_the_probability_and_flag_by_it(tmp_path, scale):
    from whale.catalogue.db import Catalogue
    from whale.catalogue.match import record_proposals
    from whale.catalogue.proposals import read_proposals
    from whale.ranking.pairprob import PairCalibration

    rng = np.random.default_rng(2)
    ids, hashes, loo = small_catalogue(rng, 6, 3)
    cal = PairCalibration.fit(loo, ids, ids, skip=np.arange(len(ids)))
    flag = Flagging.of(cal if scale == "probability" else None, None, 0.3, "x")
    photos = []
    for k in range(3):
        photos.append(tmp_path / f"p{k}.jpg")
        photos[-1].write_bytes(bytes([k]) * 10)
    names = np.array([["w0", "w1"], ["w2", "w3"], ["w4", "w5"]])
    vals = np.float32([[0.9, 0.2], [0.45, 0.3], [0.2, 0.1]])
    cols = np.array([[0, 3], [6, 9], [12, 15]])
    with Catalogue.create(tmp_path / "cat") as cat, cat.writing(), cat.transaction() as db:
        props, path = record_proposals(cat, db, "b", tmp_path, photos, "keypoints", "fp", flag, names, cols, vals,
                                       [None] * 3, [f"/g/{i}.jpg" for i in range(18)], hashes)
    back = read_proposals(path)
    assert back == props and back.scale == scale
    if scale == "probability":
        p = cal.transform(vals)
        np.testing.assert_allclose([[c.probability for c in ph.candidates] for ph in back.photos], p, atol=1e-6)
        assert [ph.possibly_new for ph in back.photos] == (p[:, 0] < 0.5).tolist() == [False, True, True]
    else:
        assert all(c.probability is None for ph in back.photos for c in ph.candidates)
        assert [ph.possibly_new for ph in back.photos] == [False, False, True]  # by score, below 0.3
