"""The matcher's learned check of verified matches (``check.model: gbm``, issue 56) and the fitted keypoint selector
kept beside the features (a second score run of one gallery fits none)."""
import dataclasses

import numpy as np
import pytest

pytest.importorskip("cv2")

from whale.core.errors import ConfigError  # noqa: E402
from whale.keypoints.check import UNVERIFIED, MatchCheck, check_photos  # noqa: E402
from whale.keypoints.config import CheckConfig, KeypointConfig, load_keypoint_config  # noqa: E402
from whale.keypoints.extract import Features  # noqa: E402
from whale.keypoints.matcher import VerifiedPairs, transposed, turned, two_sided  # noqa: E402
from whale.keypoints.pairstats import NAMES, pair_row, percentile_span, share_of_best, transform_shape  # noqa: E402
from whale.keypoints.selectcache import SelectorCache  # noqa: E402
from whale.keypoints.selection import KeypointSelector  # noqa: E402


def photo(n=40, size=(200, 300), seed=0) -> Features:
    rng = np.random.default_rng(seed)
    xy = (rng.random((n, 2)) * [size[1], size[0]]).astype(np.float32)
    return Features(xy, np.ones((n, 2), np.float32), rng.integers(0, 255, (n, 128), dtype=np.uint8), size)


def test_the_transforms_shape_reads_scale_shear_rotation_and_perspective():
    q, g = photo(size=(100, 200)), photo(size=(200, 400))
    assert np.allclose(transform_shape(np.diag([2.0, 2.0, 1.0]), q, g), 0, atol=1e-9)  # twice the photo, twice the scale
    c, s = np.cos(0.3), np.sin(0.3)
    rotated = transform_shape(np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]]), q, q)
    assert rotated[2] == pytest.approx(0.3) and rotated[0] == pytest.approx(0, abs=1e-9)
    squeezed = transform_shape(np.array([[2.0, 0, 0], [0, 1.0, 0], [0, 0, 1]]), q, q)
    assert squeezed[1] == pytest.approx(np.log(2)) and squeezed[0] == pytest.approx(0.5 * np.log(2))
    assert transform_shape(np.array([[1.0, 0, 0], [0, 1, 0], [1e-3, 0, 1]]), q, q)[3] > 0
    assert (transform_shape(None, q, g) == 0).all() and (transform_shape(np.zeros((3, 3)), q, g) == 0).all()


def test_a_row_describes_the_inliers_and_the_share_of_the_best_evidence():
    q, g = photo(seed=1), photo(seed=2)
    src, dst = q.xy[:10], g.xy[:10]
    mask = np.arange(10) < 6
    row = pair_row(q, g, src, dst, mask, np.full(10, 0.5, np.float32), 4.0, np.eye(3), 0.5)
    assert row.shape == (len(NAMES),) and row.dtype == np.float32
    named = dict(zip(NAMES, row))
    assert named["inliers"] == 6 and named["inlier_ratio"] == pytest.approx(0.6)
    assert named["log_evidence"] == pytest.approx(np.log1p(3.0)) and named["similarity_agreement"] == 0.5
    other = row.copy()
    other[NAMES.index("log_evidence")] = np.log1p(1.5)
    shares = share_of_best(np.stack([row, other]))[:, NAMES.index("evidence_share")]
    assert shares == pytest.approx([1.0, 0.5])


def test_a_photos_own_span_is_sorted_once_and_gives_the_rows_the_former_spreads(monkeypatch):
    """Each row divides its inliers' spans by the photos' own (Features.xy_span): computed at the first row a
    photo is in, kept for the next, and the same spreads as ``np.percentile`` over all its keypoints each row."""
    import importlib
    import pickle

    from whale.keypoints import pairstats

    extract = importlib.import_module("whale.keypoints.extract")  # the package's `extract` is a function

    q, g = photo(seed=1), photo(seed=2)
    sorts = []
    real = pairstats.percentile_span
    for module in (pairstats, extract):
        monkeypatch.setattr(module, "percentile_span", lambda x: sorts.append(len(x)) or real(x))
    rng = np.random.default_rng(3)
    for _ in range(4):
        keep = rng.random(len(q)) < 0.5
        src, dst = q.xy[keep], g.xy[keep]
        mask = rng.random(len(src)) < 0.7
        row = pair_row(q, g, src, dst, mask, np.ones(len(src), np.float32), 3.0, np.eye(3), 0.5)
        for name, points, f in (("q", src[mask], q), ("g", dst[mask], g)):
            span = np.percentile(f.xy, 90, axis=0) - np.percentile(f.xy, 10, axis=0)
            want = (np.percentile(points, 90, axis=0) - np.percentile(points, 10, axis=0)) / np.maximum(span, 1.0)
            got = row[[NAMES.index(f"{name}_spread_x"), NAMES.index(f"{name}_spread_y")]]
            np.testing.assert_array_equal(got, want.astype(np.float32))
    assert sorts.count(len(q)) == 2  # each photo's own keypoints sorted once; the inliers' at every row
    assert len(sorts) == 2 + 4 * 2
    assert "xy_span" in vars(pickle.loads(pickle.dumps(q)))  # kept with the photo it describes
    assert (photo(seed=4).take(np.arange(1)).xy_span == 0).all()

def test_a_percentile_span_from_one_sort_is_numpys_bit_for_bit():
    """whale.core.percentile.percentile_span (the rows' spreads, a million a run) against ``np.percentile``'s own:
    the same value and dtype on arrays of every size the rows meet, with ties, float32 and float64."""
    rng = np.random.default_rng(0)
    for trial in range(3000):
        n = int(rng.integers(1, 40)) if trial % 2 else int(rng.integers(40, 3000))
        x = rng.random((n, 2)) * rng.choice([1, 100, 3000])
        x = np.round(x) if trial % 3 == 0 else x  # ties
        x = x.astype(np.float32) if trial % 4 else x
        want = np.percentile(x, 90, axis=0) - np.percentile(x, 10, axis=0)
        got = percentile_span(x)
        assert got.dtype == want.dtype and np.array_equal(got, want), (n, got, want)


def test_the_check_scores_verified_candidates_by_probability_and_the_rest_below_them():
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(200, len(NAMES))).astype(np.float32)
    y = rows[:, 0] > 0
    from sklearn.ensemble import HistGradientBoostingClassifier

    check = MatchCheck(CheckConfig(model="gbm"), HistGradientBoostingClassifier(max_iter=20).fit(rows, y))
    base = np.full((2, 3), 0.9, np.float32)
    pairs = VerifiedPairs(np.array([[0, 1], [1, 2]]), np.stack([rows[y][0], rows[~y][0]]))
    out = check.scores(base, pairs)
    assert out[0, 1] > out[1, 2] >= UNVERIFIED  # a verified candidate is never below an unverified one
    assert out[0, 0] == pytest.approx(0.9 * UNVERIFIED) and (out < 1).all()
    assert not MatchCheck(CheckConfig(model="gbm"), reason="few").active


def test_both_ways_rows_hold_each_direction_side_by_side_with_zeros_where_it_did_not_verify():
    forward = VerifiedPairs(np.array([[0, 1], [1, 2]]), np.array([[1.0, 1.0], [2.0, 2.0]], np.float32))
    backward = transposed(VerifiedPairs(np.array([[2, 1], [3, 0]]), np.array([[5.0, 5.0], [7.0, 7.0]], np.float32)))
    assert backward.index.tolist() == [[1, 2], [0, 3]]  # (gallery photo, query) read as (query, gallery photo)
    both = two_sided(forward, backward)
    assert both.index.tolist() == [[0, 1], [0, 3], [1, 2]]
    assert both.rows.tolist() == [[1, 1, 0, 0], [0, 0, 7, 7], [2, 2, 5, 5]]
    empty = VerifiedPairs(np.zeros((0, 2), np.int64), np.zeros((0, 2), np.float32))
    assert two_sided(empty, empty).rows.shape == (0, 4)


def test_some_gallery_photos_as_queries_read_the_other_way_round_within_their_own_queries():
    """Queries 0, 1, 2 are gallery photos 2, 0, 3 of five: a pair's reverse is the pair of the query that is its
    photo, and a pair whose photo is no query (or a query that is no gallery photo) has none."""
    forward = VerifiedPairs(np.array([[0, 0], [1, 2], [2, 4], [1, 1], [3, 0]]),
                            np.arange(10, dtype=np.float32).reshape(5, 2))
    back = turned(forward, np.array([2, 0, 3, -1]))
    assert back.index.tolist() == [[1, 2], [0, 0]] and back.rows.tolist() == [[0, 1], [2, 3]]
    whole = VerifiedPairs(np.array([[0, 1], [1, 2], [2, 0]]), np.eye(3, dtype=np.float32))
    a, b = turned(whole, np.arange(3)), transposed(whole)  # the whole gallery in order: the transpose
    assert a.index.tolist() == b.index.tolist() and a.rows.tolist() == b.rows.tolist()


def test_the_checks_out_of_fold_scores_come_from_trees_that_never_saw_the_querys_group():
    """Labels that are noise, one per group: the fitted check learns them, its out-of-fold scores cannot."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    n = 320  # 80 groups of 4 pairs, one pair per query
    groups = np.repeat(np.arange(80), 4)
    rows = np.repeat(rng.random((80, 6)), 4, axis=0) + rng.normal(0, 1e-3, (n, 6))
    same = np.repeat(rng.random(80) < 0.4, 4)
    cfg = CheckConfig(model="gbm", rounds=60)
    from whale.keypoints.check import _trees

    check = MatchCheck(cfg, _trees(cfg).fit(rows, same))
    at = (np.arange(n), np.arange(n) % 7)
    pairs = VerifiedPairs(np.stack(at, axis=1), rows.astype(np.float32))
    base = np.full((n, 7), 0.5, np.float32)
    fitted = check.scores(base, pairs)[at]
    held = check.out_of_fold(check.scores(base, pairs), pairs, same, groups, folds=4)
    assert roc_auc_score(same, fitted) > 0.95
    assert abs(roc_auc_score(same, held[at]) - 0.5) < 0.15
    unverified = np.ones((n, 7), bool)
    unverified[at] = False
    assert held[unverified] == pytest.approx(0.5 * UNVERIFIED)  # unverified pairs keep their scores
    inactive = MatchCheck(cfg, reason="few")
    assert (inactive.out_of_fold(base, pairs, same, groups) == base).all()


def test_a_config_without_a_check_keeps_its_hash_and_a_check_changes_it():
    plain = KeypointConfig()
    assert plain.config_hash() == "7d5abae91a1a"  # the pinned hash of the defaults (tests/test_keypoints.py)
    checked = load_keypoint_config(None, {"check.model": "gbm"})
    assert checked.check.model == "gbm" and checked.config_hash() != plain.config_hash()
    assert checked.selection_hash() == plain.selection_hash()  # the selector does not depend on the check
    assert load_keypoint_config(None, {"verify.scale": "2"}).selection_hash() == plain.selection_hash()
    assert load_keypoint_config(None, {"select.keep": "0.5"}).selection_hash() == plain.selection_hash()  # applied after
    assert load_keypoint_config(None, {"select.photos": "100"}).selection_hash() != plain.selection_hash()
    assert load_keypoint_config(None, {"search.k": "12"}).selection_hash() != plain.selection_hash()


def fitted_selector(cfg, gallery, keys) -> KeypointSelector:
    """A selector of ``gallery`` with one real classifier (scikit-learn's trees on the keypoints' context)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    from whale.keypoints.selection import keypoint_context

    x = np.concatenate([keypoint_context(f) for f in gallery])
    x[::7, 3] = np.nan  # missing values take the trees' other branch: read back, they must still
    model = HistGradientBoostingClassifier(max_iter=15, random_state=0).fit(x, x[:, 0] > np.median(x[:, 0]))
    scores = [model.predict_proba(keypoint_context(f))[:, 1] for f in gallery]
    return KeypointSelector(cfg.select, gallery, keys, [model], scores)


class Planted:
    """The issue's reproduction: a pickle that runs something when read (here: makes a file)."""

    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        import pathlib

        return pathlib.Path.touch, (pathlib.Path(self.target),)


def counting(monkeypatch) -> list:
    """The photos the selector scores from now on, one list per call."""
    import whale.keypoints.selection as selection

    calls: list = []
    real = selection.predict

    def predict(models, photos, *args, **kw):
        calls.append(len(photos))
        return real(models, photos, *args, **kw)

    monkeypatch.setattr(selection, "predict", predict)
    return calls


def test_a_selector_kept_beside_the_features_is_read_back_with_every_photo_it_scored(tmp_path, monkeypatch):
    cfg = KeypointConfig()
    gallery = [photo(seed=i) for i in range(4)]
    keys, ids = [f"k{i}" for i in range(4)], ["a", "a", "b", "b"]
    cache = SelectorCache(tmp_path, cfg, keys, ids, "new_whale")
    assert cache.load(gallery) is None and cache.note == ""  # nothing kept yet: nothing to say
    fitted = fitted_selector(cfg, gallery, keys)
    fitted.memo = {}
    queries, query_keys = [photo(seed=10), photo(seed=11)], ["q0", "q1"]
    first = fitted.select(queries, query_keys)
    assert set(fitted.memo) == {"q0", "q1"}
    cache.save(fitted)
    with np.load(cache.path, allow_pickle=False) as z:  # plain arrays: nothing a reader must execute
        assert "meta" in z.files and all(z[name].dtype != object for name in z.files)
    calls = counting(monkeypatch)
    back = cache.load(gallery)
    assert cache.note == ""
    again = back.select(queries + gallery[:1], query_keys + keys[:1])
    assert sum(calls) == 0  # every photo's scores read back, none predicted again
    for a, b in zip(first + fitted.gallery()[:1], again):
        assert np.array_equal(a.xy, b.xy)
    new = photo(seed=12)  # a photo new to both: the trees read back score it as the fitted model does
    assert np.array_equal(back.select([new])[0].xy, fitted.select([new])[0].xy)
    assert calls[1:] == [1, 1]  # one new photo each
    back.memo["q0"] = back.memo["q0"][:5]  # a remembered score per keypoint or none: scored again
    assert np.array_equal(back.select(queries[:1], ["q0"])[0].xy, first[0].xy) and calls[-1] == 1
    assert SelectorCache(tmp_path, cfg, keys, ["a", "b", "a", "b"], "new_whale").load(gallery) is None  # other ids
    cache.save(back)  # a selector read back is kept again as the same arrays
    assert np.array_equal(cache.load(gallery).select([new])[0].xy, back.select([new])[0].xy)


def test_a_planted_pickle_in_the_selector_cache_runs_nothing_and_the_selector_is_fitted_again(tmp_path):
    import pickle

    cfg = KeypointConfig()
    gallery = [photo(seed=i) for i in range(4)]
    keys, ids = [f"k{i}" for i in range(4)], ["a", "a", "b", "b"]
    cache = SelectorCache(tmp_path, cfg, keys, ids, "new_whale")
    planted = tmp_path / "planted.txt"
    pickle.loads(pickle.dumps(Planted(planted)))  # the payload works when unpickled...
    assert planted.exists()
    planted.unlink()
    cache.path.parent.mkdir(parents=True)
    for where in (cache.path, cache.path.with_suffix(".pkl")):  # the name it reads, and an earlier version's
        where.write_bytes(pickle.dumps(Planted(planted)))
    assert cache.load(gallery) is None  # ...but here it is never unpickled
    assert not planted.exists()
    assert str(cache.path) in cache.note and "fitted again" in cache.note and "\n" not in cache.note
    cache.save(fitted_selector(cfg, gallery, keys))
    assert cache.load(gallery) is not None and cache.note == ""


def test_a_damaged_or_altered_selector_file_is_fitted_again_with_a_note(tmp_path):
    cfg = KeypointConfig()
    gallery = [photo(seed=i) for i in range(4)]
    keys, ids = [f"k{i}" for i in range(4)], ["a", "a", "b", "b"]
    cache = SelectorCache(tmp_path, cfg, keys, ids, "new_whale")
    selector = fitted_selector(cfg, gallery, keys)
    selector.memo = {}
    selector.select([photo(seed=10)], ["q0"])
    cache.save(selector)
    good = cache.path.read_bytes()
    rng = np.random.default_rng(0)
    for trial in range(60):  # 3 random bytes changed (the issue: 279 of 300 loaded silently), or cut short
        bad = bytearray(good)
        for at in rng.choice(len(bad), 3, replace=False):
            bad[at] ^= int(rng.integers(1, 256))
        cache.path.write_bytes(bytes(bad) if trial % 10 else good[:int(rng.integers(0, len(good)))])
        assert cache.load(gallery) is None, trial
        assert cache.note.startswith(f"keypoint selector {cache.path}: ") and "fitted again" in cache.note
    cache.path.write_bytes(good)
    assert cache.load(gallery[:3] + [photo(n=7, seed=9)]) is None  # scores that are not one per keypoint
    assert "do not match the gallery" in cache.note
    cache.path.write_bytes(b"")
    assert cache.load(gallery) is None and "an empty file" in cache.note


def test_a_second_score_run_reads_the_selector_back_and_writes_the_same_files(tmp_path, monkeypatch):
    import pickle

    import whale.keypoints.selection as selection
    from whale.data.synth import generate
    from whale.inference.keypoints import score_competition

    monkeypatch.setattr(selection, "MIN_POSITIVES", 1)  # the tiny synthetic gallery has few verified keypoints
    data = generate(tmp_path / "data", n_ids=12, seed=3, size=96, progress=False)
    cfg = load_keypoint_config(None, {"check.model": "gbm", "check.both_ways": "true"})
    logs: list[list[str]] = [[], [], []]
    fits = []
    real = MatchCheck.fit.__func__
    monkeypatch.setattr(MatchCheck, "fit", classmethod(lambda cls, *a, **k: fits.append(1) or real(cls, *a, **k)))
    for run, log in enumerate(logs):
        if run == 2:  # the reproduction: a pickle planted where the selector is kept
            [kept] = [f for f in (tmp_path / "store").glob("*/selectors/*.npz") if not f.stem.endswith("-check")]
            kept.write_bytes(pickle.dumps(Planted(tmp_path / "planted.txt")))
        score_competition(data, tmp_path / f"out{run}", cfg, fold=0, store_root=tmp_path / "store", workers=1,
                          progress=False, log=log.append)
        fits.append(f"after run {run}")
    assert not any("read back" in line for line in logs[0])
    assert any("read back" in line and "nothing fitted" in line for line in logs[1])
    assert any("check fitted on" in line and "read back from" in line for line in logs[1])
    # the check is fitted on the fold's gallery once, read back with its selector, fitted again with a new selector
    assert fits == [1, "after run 0", "after run 1", 1, "after run 2"]
    assert not (tmp_path / "planted.txt").exists()
    assert sum(f"keypoint selector {kept}:" in line and "fitted again" in line for line in logs[2]) == 1
    assert not any("read back" in line for line in logs[2])
    for run in (1, 2):  # read back or fitted again: the files of a clean run
        for name in ("val.npz", "test.npz"):
            assert (tmp_path / "out0" / name).read_bytes() == (tmp_path / f"out{run}" / name).read_bytes()
    assert sorted(f.stem.endswith("-check") for f in (tmp_path / "store").glob("*/selectors/*.npz")) == [False, True]
    assert not list((tmp_path / "store").glob("*/selectors/*.pkl"))


def test_a_check_kept_beside_its_selector_is_read_back_to_the_same_probabilities_or_refused_with_a_note(tmp_path):
    """The learned check's trees kept as sealed arrays: read back, the same probabilities to the bit and the same
    pairs; a damaged file, one of another width or another config's is never used (a note names the file)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    cfg = load_keypoint_config(None, {"check.model": "gbm"})
    keys, ids = [f"k{i}" for i in range(4)], ["a", "a", "b", "b"]
    cache = SelectorCache(tmp_path, cfg, keys, ids, "new_whale")
    assert cache.load_check() is None and cache.note == ""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(NAMES)))
    x[::9, 2] = np.nan
    model = HistGradientBoostingClassifier(max_iter=20, random_state=0).fit(x, x[:, 0] + x[:, 1] > 0)
    check = MatchCheck(cfg.check, model, pairs=(180, 220), seconds={"match": 3.0, "fit": 1.0})
    cache.save_check(check)
    back = cache.load_check()
    assert back.kept == str(cache.check_path) and back.pairs == (180, 220) and back.active
    assert np.array_equal(back.model.predict_proba(x), model.predict_proba(x))
    other = load_keypoint_config(None, {"check.model": "gbm", "check.rounds": "50"})
    assert SelectorCache(tmp_path, other, keys, ids, "new_whale").load_check() is None  # another config: its own file
    good = cache.check_path.read_bytes()
    cache.check_path.write_bytes(good[:len(good) // 2])
    assert cache.load_check() is None and cache.note.startswith(f"keypoint check {cache.check_path}: ")
    narrow = HistGradientBoostingClassifier(max_iter=5, random_state=0).fit(x[:, :4], x[:, 0] > 0)
    cache.save_check(MatchCheck(cfg.check, narrow, pairs=(1, 1)))
    assert cache.load_check() is None and "inputs" in cache.note
    cache.save_check(MatchCheck(cfg.check, reason="too few pairs", pairs=(3, 40)))
    inactive = cache.load_check()
    assert not inactive.active and inactive.reason == "too few pairs" and cache.note == ""
    both = load_keypoint_config(None, {"check.model": "gbm", "check.both_ways": "true"})  # rows of both directions
    wide = SelectorCache(tmp_path, both, keys, ids, "new_whale")
    wide.save_check(check)
    assert wide.load_check() is None and f"{len(NAMES)} inputs" in wide.note and f"has {2 * len(NAMES)}" in wide.note


def test_without_selection_the_test_reuses_the_folds_check_as_its_log_says(tmp_path, monkeypatch):
    from whale.data.synth import generate
    from whale.inference.keypoints import score_competition

    data = generate(tmp_path / "data", n_ids=12, seed=3, size=96, progress=False)
    cfg = load_keypoint_config(None, {"check.model": "gbm", "select.keep": "1"})
    fits = []
    real = MatchCheck.fit.__func__

    def fit(cls, *args, **kw):
        fits.append(1)
        return real(cls, *args, **kw)

    monkeypatch.setattr(MatchCheck, "fit", classmethod(fit))
    log: list[str] = []
    score_competition(data, tmp_path / "out", cfg, fold=0, store_root=tmp_path / "store", workers=1,
                      progress=False, log=log.append)
    assert len(fits) == 1  # fitted on the fold's gallery only, as with selection on
    test_lines = [line for line in log if line.startswith("keypoints test:") and "check" in line]
    assert test_lines and all("the validation fold's" in line for line in test_lines)


def test_the_checked_config_is_the_shipped_one_with_the_check_deeper_votes_and_both_ways():
    from pathlib import Path

    configs = Path(__file__).resolve().parents[1] / "configs"
    checked, shipped = (load_keypoint_config(configs / name) for name in ("keypoints_checked.yaml", "keypoints.yaml"))
    assert (checked.check.model, checked.check.both_ways, checked.search.k, checked.verify.shortlist) == ("gbm", True, 12, 40)
    assert checked.features == shipped.features and checked.select == shipped.select  # the same stored features


def test_check_photos_are_whole_individuals_seeded_an_unnamed_photo_its_own():
    ids = np.array([f"w{i // 3}" for i in range(60)] + ["new_whale"] * 8 + [""] * 2)
    sample = check_photos(ids, 30, seed=0)
    named = ids[sample][~np.isin(ids[sample], ["new_whale", ""])]
    assert all((ids == n).sum() == (named == n).sum() for n in set(named))  # every photo of a sampled whale
    assert 30 <= len(sample) < 33 and np.array_equal(sample, np.sort(sample))
    assert len(set(ids[sample]) & {"new_whale", ""}) and np.isin(ids[sample], ["new_whale"]).sum() < 8
    assert np.array_equal(sample, check_photos(ids, 30, seed=0))
    assert not np.array_equal(sample, check_photos(ids, 30, seed=1))
    for every in (0, 70, 500):
        assert np.array_equal(check_photos(ids, every, seed=0), np.arange(70))


class GalleryAgainstItself:
    """A matcher's stand-in for :meth:`MatchCheck.fit`: every query verifies every gallery photo but its own,
    the row's first number saying whether they are one whale (with noise)."""

    def __init__(self, ids):
        self.ids = np.asarray(ids)
        self.gallery = [photo(seed=i) for i in range(len(ids))]
        self.asked = []

    def match(self, queries, progress, leave_out, selected, describe, strict):
        self.asked.append((len(queries), np.asarray(leave_out)))
        rng = np.random.default_rng(0)
        index = np.array([(q, g) for q, own in enumerate(leave_out) for g in range(len(self.ids)) if g != own])
        same = self.ids[np.asarray(leave_out)[index[:, 0]]] == self.ids[index[:, 1]]
        rows = rng.normal(size=(len(index), len(NAMES))).astype(np.float32)
        rows[:, 0] += 3 * same
        return type("Match", (), {"pairs": VerifiedPairs(index, rows)})


def test_a_check_fitted_on_some_photos_matches_them_alone_and_keeps_only_the_pairs_among_them():
    """``check.photos``: the sampled photos (whole individuals) match the whole gallery, and only the pairs whose
    both photos are sampled are fitted on (a pair with another photo has no way back under ``both_ways``)."""
    ids = np.array([f"w{i // 3}" for i in range(60)] + ["new_whale"] * 10)
    matcher = GalleryAgainstItself(ids)
    cfg = CheckConfig(model="gbm", rounds=20, photos=30)
    check = MatchCheck.fit(cfg, matcher, ids)
    sample = check_photos(ids, 30, seed=0)
    (asked, leave_out), = matcher.asked
    assert asked == len(sample) and np.array_equal(leave_out, sample)
    inside = ids[sample]
    positives = sum(int((inside == n).sum()) * (int((inside == n).sum()) - 1) for n in set(inside) if n != "new_whale")
    assert check.active and check.pairs == (positives, len(sample) * (len(sample) - 1) - positives)
    whole = MatchCheck.fit(dataclasses.replace(cfg, photos=0), matcher, ids)
    assert np.array_equal(matcher.asked[1][1], np.arange(len(ids)))
    assert sum(whole.pairs) == len(ids) * (len(ids) - 1)
    plain = load_keypoint_config(None, {"check.model": "gbm"})
    sampled = load_keypoint_config(None, {"check.model": "gbm", "check.photos": "1500"})
    assert sampled.check.photos == 1500 and sampled.config_hash() != plain.config_hash()
    assert load_keypoint_config(None, {"check.model": "gbm", "check.photos": "0"}).config_hash() == plain.config_hash()
    with pytest.raises(ConfigError, match="check.photos"):
        load_keypoint_config(None, {"check.photos": "-1"})
