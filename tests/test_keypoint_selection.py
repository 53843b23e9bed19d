"""Keypoint selection (whale.keypoints.selection): labels from the gallery's verified same-individual matches
(a photo never finds itself), a classifier that keeps the identity's keypoints over the background's, and the
matcher with it."""
import dataclasses

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")
pytest.importorskip("sklearn")

from whale.core.errors import ConfigError  # noqa: E402
from whale.keypoints import FeatureStore, KeypointMatcher, load_keypoint_config  # noqa: E402
from whale.keypoints import selection  # noqa: E402
from whale.keypoints.selection import keypoint_context, labelled_photos, paired_photos, verified_labels  # noqa: E402
from tests.test_keypoints import _features, pattern, warp, write  # noqa: E402

BAND = (40, 100)
"""Rows of a photo where the individual's pattern lies; the rest is 'water', drawn anew for every photo."""


def water(seed: int, size=(140, 200)) -> np.ndarray:
    """Fine random ripples, different in every photo: keypoints that no other photo shares."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(128, 40, (size[0] // 4, size[1] // 4))
    return np.clip(cv2.resize(noise, (size[1], size[0]), interpolation=cv2.INTER_CUBIC), 0, 255).astype(np.uint8)


def photo(individual: int, shot: int) -> np.ndarray:
    img = water(1000 * individual + shot)
    band = pattern(individual, size=(BAND[1] - BAND[0], 200))
    img[BAND[0]:BAND[1]] = band if shot == 0 else warp(band, 100 * individual + shot)
    return img


@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    root = tmp_path_factory.mktemp("sel")
    cfg = load_keypoint_config(overrides={"features.n_features": 400, "select.keep": 0.3})
    ids = np.repeat([f"w{i}" for i in range(8)], 3)
    paths = [write(root / f"{n}_{k}.png", photo(int(n[1:]), k % 3)) for k, n in enumerate(ids)]
    feats = FeatureStore(cfg, root / "store").features(paths, workers=1, progress=False)
    return cfg, feats, ids


def test_paired_photos_have_another_photo_of_a_named_individual():
    ids = np.array(["a", "b", "a", "new_whale", "c", "new_whale", "b"])
    assert paired_photos(ids).tolist() == [True, True, True, False, False, False, True]


def test_paired_photos_take_the_formats_open_label_and_never_pair_an_empty_label():
    ids = np.array(["a", "new_individual", "a", "new_individual", "", ""])
    assert paired_photos(ids, open_label="new_individual").tolist() == [True, False, True, False, False, False]
    assert paired_photos(ids).tolist() == [True, True, True, True, False, False]  # new_whale's format: a name
    assert labelled_photos(ids, 0, seed=0, open_label="new_individual").tolist() == [0, 2]


def test_labelled_photos_are_whole_paired_individuals_seeded():
    ids = np.array([f"w{i // 3}" for i in range(30)] + ["new_whale"] * 4 + ["solo"])
    paired = np.flatnonzero(paired_photos(ids))
    assert labelled_photos(ids, 0, seed=0).tolist() == paired.tolist() == list(range(30))
    assert labelled_photos(ids, 100, seed=0).tolist() == paired.tolist()  # fewer paired photos than asked for
    sample = labelled_photos(ids, 7, seed=0)
    assert len(sample) == 9 and set(sample) <= set(paired)  # 3 whole individuals reach 7 photos
    for name in set(ids[sample]):
        assert set(np.flatnonzero(ids == name)) <= set(sample)
    assert labelled_photos(ids, 7, seed=0).tolist() == sample.tolist()
    assert any(labelled_photos(ids, 7, seed=s).tolist() != sample.tolist() for s in range(1, 5))


def test_labels_are_the_inliers_of_verified_same_individual_matches(gallery):
    cfg, feats, ids = gallery
    full = KeypointMatcher(cfg.without_selection(), feats, ids)
    seen = []
    result = full.match(feats, progress=False, leave_out=np.arange(len(feats)),
                        on_verified=lambda i, c, qk, gk: seen.append((i, c, len(qk), len(gk))))
    assert (np.diag(result.scores) == 0).all() and all(i != c for i, c, _, _ in seen)  # never itself
    assert all(a == b >= 4 for _, _, a, b in seen)
    for i in range(len(feats)):  # each photo finds its two siblings first
        assert set(np.argsort(-result.scores[i])[:2]) == set(np.flatnonzero(ids == ids[i])) - {i}
    labels = verified_labels(full, ids, cfg.select.min_inliers)
    for f, y in zip(feats, labels):
        assert y.dtype == bool and len(y) == len(f) and y.sum() >= cfg.select.min_inliers
    rows = np.concatenate([f.xy[y, 1] for f, y in zip(feats, labels)])
    assert ((rows >= BAND[0] - 8) & (rows < BAND[1] + 8)).mean() > 0.9  # the pattern (and its edges), not the water
    sample = labelled_photos(ids, 6, seed=0)  # the labels of whole individuals matched alone: the same
    sampled = verified_labels(full, ids, cfg.select.min_inliers, sample)
    assert all((sampled[i] == labels[i]).all() for i in sample)
    assert not any(sampled[i].any() for i in set(range(len(feats))) - set(sample))
    strangers = verified_labels(full, [f"x{i}" for i in range(len(feats))], cfg.select.min_inliers)
    assert not any(y.any() for y in strangers)  # matches across individuals teach nothing


def test_a_strict_leave_out_matches_each_photo_as_the_gallery_without_it_would(gallery):
    """Against brute force, a matcher of the gallery without the photo; the default leave-out, which drops one
    neighbour, lets the photo's own descriptors take the voters' places: its votes fall short."""
    cfg, feats, ids = gallery
    cfg = cfg.without_selection()
    n = len(feats)
    full = KeypointMatcher(cfg, feats, ids)
    strict = full.match(feats, progress=False, leave_out=np.arange(n), strict=True)
    loose = full.match(feats, progress=False, leave_out=np.arange(n))
    np.testing.assert_array_equal(full.votes(feats, False, leave_out=np.arange(n), strict=True), strict.votes)
    short = 0
    for i in (0, 4, 13, 23):
        rest = np.flatnonzero(np.arange(n) != i)
        alone = KeypointMatcher(cfg, [feats[j] for j in rest], ids[rest]).match([feats[i]], progress=False)
        np.testing.assert_allclose(strict.votes[i, rest], alone.votes[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(strict.scores[i, rest], alone.scores[0], rtol=1e-4, atol=1e-6)
        assert strict.votes[i, i] == 0 and strict.scores[i, i] == 0
        short += loose.votes[i, rest].sum() < alone.votes[0].sum() - 1e-3
    assert short >= 3


def test_an_exact_search_without_a_photo_is_the_search_of_the_gallery_without_it(gallery):
    """``skip`` leaves each descriptor's own photo out of the distances: the rows an index built without that photo
    finds (read back to the whole gallery's rows), and as deep; the deeper search of a FAISS index agrees."""
    from whale.keypoints.extract import as_float
    from whale.keypoints.index import DescriptorIndex
    from whale.keypoints.matcher import search_without

    cfg, feats, _ = gallery
    index = DescriptorIndex(feats, dataclasses.replace(cfg.search, index="exact"))
    assert index.exact
    photo = 3
    desc = np.concatenate([as_float(feats[photo].desc), as_float(feats[5].desc[:7])])
    skip = np.array([photo] * len(feats[photo]) + [-1] * 7)
    dist, rows = index.search(desc, 6, skip=skip)
    assert not (index.owner[rows[:len(feats[photo])]] == photo).any()
    rest = [f for i, f in enumerate(feats) if i != photo]
    alone = DescriptorIndex(rest, dataclasses.replace(cfg.search, index="exact"))
    d_alone, r_alone = alone.search(desc[:len(feats[photo])], 6)
    back = np.flatnonzero(index.owner != photo)  # the rest's rows, in the whole gallery's order
    np.testing.assert_allclose(dist[:len(feats[photo])], d_alone, rtol=1e-6)
    got, want = rows[:len(feats[photo])], back[r_alone]
    assert (got == want).mean() > 0.5  # the rest: rows at equal distances (the test's copies), in either order
    every = np.concatenate([as_float(f.desc) for f in feats])
    apart = np.linalg.norm(every[got] - desc[:len(feats[photo]), None, :], axis=2)
    np.testing.assert_allclose(apart, d_alone, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(index.search(desc[-7:], 6)[1], rows[-7:])  # -1: nothing left out
    deep = search_without(_NotExact(index), desc, 6, skip)
    np.testing.assert_allclose(deep[0], dist, rtol=1e-6)


def test_a_deeper_search_without_a_photo_takes_its_descriptors_in_parts_and_finds_the_same_rows(gallery,
                                                                                               monkeypatch):
    """The deeper a FAISS search goes, the fewer descriptors per call (memory held in bounds): the same rows as one
    call for all of them, including descriptors that search the whole index."""
    import whale.keypoints.matcher as matcher_mod
    from whale.keypoints.extract import as_float
    from whale.keypoints.index import DescriptorIndex

    cfg, feats, _ = gallery
    index = _NotExact(DescriptorIndex(feats, dataclasses.replace(cfg.search, index="exact")))
    desc = np.concatenate([as_float(f.desc[:40]) for f in feats[:6]])
    skip = np.repeat(np.arange(6), 40)
    skip[::7] = -1
    whole = matcher_mod.search_without(index, desc, 5, skip)
    calls = []
    real = index.search
    monkeypatch.setattr(index, "search", lambda d, k: calls.append((len(d), k)) or real(d, k))
    monkeypatch.setattr(matcher_mod, "_DEEP_ENTRIES", 50)
    parts = matcher_mod.search_without(index, desc, 5, skip)
    assert all(n * k <= 50 or n == 1 for n, k in calls)  # one descriptor at a time when deeper than the bound
    assert len(calls) > 2 * len(desc) * 6 // 50
    np.testing.assert_array_equal(parts[1], whole[1])
    np.testing.assert_array_equal(parts[0], whole[0])
    deepest = matcher_mod.search_without(index, desc[:3], 10 ** 6, np.array([0, 1, -1]))  # the whole index, no more
    found = (deepest[1] >= 0).sum(axis=1)
    assert found.tolist() == [len(index) - len(feats[0]), len(index) - len(feats[1]), len(index)]
    assert np.isinf(deepest[0][deepest[1] < 0]).all()


def test_an_exact_search_takes_fewer_rows_at_a_time_against_a_larger_gallery_and_finds_the_same(gallery,
                                                                                                monkeypatch):
    import whale.keypoints.index as index_mod
    from whale.keypoints.extract import as_float

    cfg, feats, _ = gallery
    index = index_mod.DescriptorIndex(feats, dataclasses.replace(cfg.search, index="exact"))
    desc = np.concatenate([as_float(f.desc[:30]) for f in feats[:5]])
    skip = np.repeat(np.arange(5), 30)
    whole = [index.search(desc, 6), index.search(desc, 6, skip=skip)]
    monkeypatch.setattr(index_mod, "_EXACT_ENTRIES", 7 * len(index))  # 7 rows a block
    blocks = [index.search(desc, 6), index.search(desc, 6, skip=skip)]
    for (d1, r1), (d2, r2) in zip(whole, blocks):
        np.testing.assert_array_equal(r2, r1)
        np.testing.assert_array_equal(d2, d1)


class _NotExact:
    """An exact index seen as a FAISS one: :func:`search_without` searches it deeper instead of skipping."""

    def __init__(self, index):
        self._index, self.owner, self.exact = index, index.owner, False

    def __len__(self):
        return len(self._index)

    def search(self, desc, k):
        return self._index.search(desc, k)


def test_selector_keeps_the_individuals_keypoints(gallery, tmp_path):
    cfg, feats, ids = gallery
    sel = KeypointMatcher.build(cfg, feats, ids).selector
    assert sel.active, sel.reason
    band = lambda f: ((f.xy[:, 1] >= BAND[0]) & (f.xy[:, 1] < BAND[1])).mean()  # noqa: E731
    kept = sel.gallery()
    for f, k in zip(feats, kept):
        assert len(k) == int(np.ceil(cfg.select.keep * len(f)))
        assert set(map(tuple, k.xy)) <= set(map(tuple, f.xy))
    assert np.mean([band(k) for k in kept]) > np.mean([band(f) for f in feats]) + 0.2
    query = write(tmp_path / "q.png", photo(3, 7))  # a photo no model saw: the query side
    (q,) = FeatureStore(cfg, tmp_path / "store").features([query], workers=1, progress=False)
    (kq,) = sel.select([q])
    assert band(kq) > band(q) + 0.2


def test_without_same_individual_matches_every_keypoint_stays(gallery):
    cfg, feats, ids = gallery
    alone = np.array([f"x{i}" for i in range(len(feats))])
    m = KeypointMatcher.build(cfg, feats, alone)
    assert not m.selector.active and "fewer than" in m.selector.reason
    assert len(m.index) == sum(len(f) for f in feats) and m.gallery == list(feats)
    assert len(KeypointMatcher.build(cfg, feats).index) == sum(len(f) for f in feats)  # no ids: nothing to learn from


def test_matcher_with_selection_matches_on_fewer_keypoints(gallery):
    cfg, feats, ids = gallery
    m = KeypointMatcher.build(cfg, feats, ids)
    assert m.selector.active and len(m.index) < 0.5 * sum(len(f) for f in feats)
    result = m.match(feats[::3], progress=False)
    assert {"select", "search", "verify"} <= set(result.seconds)
    assert set(m.select_steps) == {"index", "labels", "fit", "score"}
    assert all(0 <= s <= m.select_seconds for s in m.select_steps.values())
    truth = [np.flatnonzero(ids == ids[i]) for i in range(0, len(feats), 3)]
    assert all(row.argmax() in t for row, t in zip(result.scores, truth))
    off = KeypointMatcher.build(cfg.without_selection(), feats, ids)
    assert off.selector is None and len(off.index) == sum(len(f) for f in feats) and not off.select_steps
    again = KeypointMatcher(cfg, feats[:3], selector=m.selector)  # a fitted selector reused, as the catalogue does
    assert len(again.index) == sum(len(f) for f in m.selector.select(feats[:3]))


def test_a_gallery_photo_keeps_its_gallery_selection_when_given_again(gallery):
    """The selector's gallery photos, given again (in the test gallery around a fold's), keep the keypoints chosen
    by the half of the classifier that never saw their individual, not both halves' (one of which learned from them)."""
    cfg, feats, ids = gallery
    sel = KeypointMatcher.build(cfg, feats, ids).selector
    kept = sel.gallery()
    again = sel.select([feats[4], feats[1]], keys=[4, 1])
    for k, i in zip(again, (4, 1)):
        assert np.array_equal(k.xy, kept[i].xy) and np.array_equal(k.desc, kept[i].desc)
    copy = dataclasses.replace(feats[4])  # the same keypoints, another photo to the selector: both halves score it
    (both,) = sel.select([copy])
    scores = selection.predict(sel.models, [copy])[0]
    assert np.array_equal(both.xy, sel.keep(copy, scores).xy)
    sub = KeypointMatcher(cfg, feats[::2], ids[::2], selector=sel, keys=range(0, len(feats), 2))  # a sub-gallery: no second fit
    assert not sub.select_steps and all(np.array_equal(a.xy, kept[i].xy) for a, i in zip(sub.gallery, range(0, 99, 2)))


def test_the_selector_is_fitted_by_the_caller_and_knows_photos_by_key_not_by_object(gallery):
    """``KeypointSelector.fit`` on a matcher of every keypoint, handed to a matcher that does not train: the same
    gallery as ``build``'s. A gallery photo is recognised by its key (its index, or the caller's key), whatever
    object holds it; without a key, even the very object the selector learned from counts as a new photo."""
    from whale.keypoints.selection import KeypointSelector

    cfg, feats, ids = gallery
    full = KeypointMatcher(cfg, feats, ids)  # the constructor trains nothing: every keypoint indexed
    assert full.selector is None and len(full.index) == sum(len(f) for f in feats)
    names = [f"photo-{i}" for i in range(len(feats))]
    sel = KeypointSelector.fit(cfg.select, full, ids, keys=names)
    built = KeypointMatcher.build(cfg, feats, ids)
    assert sel.active and set(sel.seconds) == {"labels", "fit", "score"}
    m = KeypointMatcher(cfg, feats, ids, selector=sel, keys=names)
    assert all(np.array_equal(a.xy, b.xy) for a, b in zip(m.gallery, built.gallery))
    kept = sel.gallery()
    copy = dataclasses.replace(feats[4])  # another object, the same key: the gallery selection
    (k,) = sel.select([copy], keys=["photo-4"])
    assert np.array_equal(k.xy, kept[4].xy)
    (new,) = sel.select([feats[4]])  # the same object, no key: both halves score it
    assert np.array_equal(new.xy, sel.keep(feats[4], selection.predict(sel.models, [feats[4]])[0]).xy)
    with pytest.raises(ValueError, match="keys: 1 keys for 2 photos"):
        sel.select(feats[:2], keys=["photo-0"])


def test_predict_in_chunks_is_predict_per_photo(monkeypatch):
    from sklearn.tree import DecisionTreeClassifier

    photos = _features(10, seed=3, per=12)
    for i, keep in {1: [], 2: [], 4: [0, 1, 2], 5: [0, 1, 2], 6: [], 9: [0]}.items():
        photos[i] = photos[i].take(keep)  # calls: [0], [1, 2] (no keypoint), [3], [4, 5, 6], [7], [8], [9]
    x = np.concatenate([keypoint_context(f) for f in photos])
    models = [DecisionTreeClassifier(random_state=s).fit(x, np.arange(len(x)) % (2 + s) == 0) for s in (0, 1)]
    monkeypatch.setattr(selection, "PREDICT_ROWS", 10)
    got = selection.predict(models, photos)
    assert [len(p) for p in got] == [len(f) for f in photos]
    for f, p in zip(photos, got):
        want = np.mean([m.predict_proba(keypoint_context(f))[:, 1] for m in models], axis=0) if len(f) else []
        np.testing.assert_array_equal(p, want)
    assert selection.predict(models, []) == []


def test_select_config_is_checked():
    assert load_keypoint_config().select.keep == 0.3  # on by default
    assert load_keypoint_config().without_selection().select.keep == 1.0
    assert load_keypoint_config(overrides={"select.keep": 1}).select.keep == 1.0
    with pytest.raises(ConfigError, match="select.keep"):
        load_keypoint_config(overrides={"select.keep": 0})
    with pytest.raises(ConfigError, match="select.photos"):
        load_keypoint_config(overrides={"select.photos": -1})
    with pytest.raises(ConfigError, match="unknown key 'share'"):
        load_keypoint_config(overrides={"select.share": 0.5})


def test_every_step_of_selection_shows_progress(gallery, monkeypatch, capsys):
    """Labels, the two fits and the scoring of every keypoint each show a line or a bar on stderr (issue 57: minutes
    of silence on 7,000 photos); quiet, nothing."""
    cfg, feats, ids = gallery
    monkeypatch.setattr(selection, "PREDICT_ROWS", 500)  # several classifier calls, as a large gallery's
    m = KeypointMatcher.build(cfg, feats, ids, progress=True)
    assert m.selector.active
    err = capsys.readouterr().err
    assert f"keypoint selection: labels from the verified same-whale matches of {len(feats)} photos" in err
    assert "keypoint selection: fitting classifier 1 of 2 on " in err and "fitting classifier 2 of 2 on " in err
    assert "keypoint selection: scoring " in err and "keypoints of the gallery (half 1 of 2)" in err
    new = [f.take(np.arange(len(f))) for f in feats[:8]]  # new photos (other objects): scored by both halves
    m.selector.select(new)
    assert "keypoints of 8 new photos" in capsys.readouterr().err
    m.selector.progress = False
    m.selector.select(new)
    assert capsys.readouterr().err == ""


def test_labels_among_the_sample_match_the_sampled_photos_against_each_other_alone(gallery, monkeypatch):
    """``select.among: sample``: the labelled photos (whole individuals) matched against an index of their own
    keypoints, not the gallery's; their labels the pattern's keypoints as with the whole gallery's index (not the
    same ones: fewer photos, other nearest descriptors), every gallery photo still scored and selected."""
    cfg, feats, ids = gallery
    whole_cfg = dataclasses.replace(cfg, select=dataclasses.replace(cfg.select, photos=12))
    sample_cfg = dataclasses.replace(cfg, select=dataclasses.replace(cfg.select, photos=12, among="sample"))
    searched = []
    real = selection.verified_labels

    def spy(matcher, *args, **kwargs):
        labels = real(matcher, *args, **kwargs)
        searched.append((len(matcher.gallery), len(matcher.index), labels))
        return labels

    monkeypatch.setattr(selection, "verified_labels", spy)
    whole = KeypointMatcher.build(whole_cfg, feats, ids)
    sampled = KeypointMatcher.build(sample_cfg, feats, ids)
    sample = labelled_photos(ids, 12, seed=cfg.select.seed)
    assert len(sample) == 12 and searched[0][:2] == (len(feats), sum(len(f) for f in feats))
    assert searched[1][:2] == (12, sum(len(feats[i]) for i in sample))
    in_gallery, alone = [searched[0][2][i] for i in sample], searched[1][2]  # the sampled photos' labels, both ways
    for labels in (in_gallery, alone):
        rows = np.concatenate([feats[i].xy[y, 1] for i, y in zip(sample, labels)])
        assert len(rows) >= 12 * cfg.select.min_inliers and ((rows >= BAND[0] - 8) & (rows < BAND[1] + 8)).mean() > 0.9
    assert sampled.selector.active and set(sampled.select_steps) == {"index", "labels", "fit", "score"}
    assert len(sampled.gallery) == len(feats) and len(sampled.index) == len(whole.index)
    band = lambda f: ((f.xy[:, 1] >= BAND[0]) & (f.xy[:, 1] < BAND[1])).mean()  # noqa: E731
    assert np.mean([band(k) for k in sampled.gallery]) > np.mean([band(f) for f in feats]) + 0.2
    assert sample_cfg.selection_hash() != whole_cfg.selection_hash() != cfg.selection_hash()
    assert sample_cfg.config_hash() != whole_cfg.config_hash()
    assert load_keypoint_config().selection_hash() == "7c07579bf344"  # pinned before `among`: stored selectors valid
    with pytest.raises(ConfigError, match="select.among"):
        load_keypoint_config(overrides={"select.among": "everything"})


def test_labels_among_a_sample_without_pairs_keep_every_keypoint(gallery):
    """``select.among: sample`` on a gallery where no individual has two photos: an empty sample, no classifier, every
    keypoint indexed, as with the whole gallery."""
    cfg, feats, _ = gallery
    sample_cfg = dataclasses.replace(cfg, select=dataclasses.replace(cfg.select, among="sample"))
    m = KeypointMatcher.build(sample_cfg, feats, np.array([f"x{i}" for i in range(len(feats))]))
    assert not m.selector.active and "fewer than" in m.selector.reason
    assert len(m.index) == sum(len(f) for f in feats) and m.gallery == list(feats)


def test_a_check_on_some_gallery_photos_fits_on_the_pairs_among_them_both_ways(gallery, monkeypatch):
    """``check.photos`` on a real matcher with ``both_ways``: the sampled photos alone are matched against the
    gallery, and the pairs counted are those between two of them, each same-whale one verified both ways."""
    from whale.keypoints.check import check_photos
    from whale.keypoints.pairstats import NAMES

    cfg, feats, ids = gallery
    checked = dataclasses.replace(cfg, check=dataclasses.replace(cfg.check, model="gbm", both_ways=True, photos=12))
    seen = []
    real = KeypointMatcher.match

    def spy(self, queries, *args, **kwargs):
        out = real(self, queries, *args, **kwargs)
        seen.append((len(queries), kwargs["leave_out"], out.pairs))
        return out

    monkeypatch.setattr(KeypointMatcher, "match", spy)
    m = KeypointMatcher(checked, feats, ids).fit_check(ids)
    sample = check_photos(ids, 12, seed=0)
    (asked, leave_out, pairs), = seen
    assert asked == 12 and np.array_equal(leave_out, sample)
    query, photo = sample[pairs.index[:, 0]], pairs.index[:, 1]
    assert not np.isin(photo, sample).all()  # the sampled photos did verify others: left out of the fit
    within = np.isin(photo, sample)
    same = ids[query] == ids[photo]
    assert m.check.pairs == (int((same & within).sum()), int((~same & within).sum()))
    assert m.check.pairs[0] == 4 * 3 * 2  # 4 whales of 3 photos, each ordered pair verified
    both = pairs.rows[same & within]
    assert (both[:, 0] > 0).all() and (both[:, len(NAMES)] > 0).all()  # inliers each way
