"""The keypoint matcher: extraction, the feature store, the index and LNBNN against brute force, verification,
and ``whale score --matcher keypoints`` into ``whale ensemble`` on a synthetic competition."""
import json
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from whale.core.errors import ConfigError, DataError  # noqa: E402
from whale.keypoints import FeatureStore, KeypointMatcher, extract, load_keypoint_config, pair_matches  # noqa: E402
from whale.keypoints.config import FeatureConfig, SearchConfig, VerifyConfig  # noqa: E402
from whale.keypoints.extract import as_float, trim_white  # noqa: E402
from whale.keypoints.index import DescriptorIndex  # noqa: E402
from whale.keypoints.verify import fit_geometry  # noqa: E402
from whale.keypoints.votes import lnbnn_votes  # noqa: E402


def pattern(seed: int, size=(120, 200)) -> np.ndarray:
    """A textured gray 'fluke': random blobs and lines, distinct per seed."""
    rng = np.random.default_rng(seed)
    img = np.full(size, 90, np.uint8)
    for _ in range(60):
        c = (int(rng.integers(0, size[1])), int(rng.integers(0, size[0])))
        cv2.circle(img, c, int(rng.integers(2, 9)), int(rng.integers(0, 256)), -1)
    for _ in range(15):
        p = [(int(rng.integers(0, size[1])), int(rng.integers(0, size[0]))) for _ in range(2)]
        cv2.line(img, p[0], p[1], int(rng.integers(0, 256)), int(rng.integers(1, 3)))
    return cv2.GaussianBlur(img, (3, 3), 0)


def warp(img: np.ndarray, seed: int) -> np.ndarray:
    """The same pattern under a mild random homography (another photo of the same individual)."""
    rng = np.random.default_rng(seed)
    h, w = img.shape
    src = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
    dst = (src + rng.uniform(-8, 8, src.shape)).astype(np.float32)
    return cv2.warpPerspective(img, cv2.getPerspectiveTransform(src, dst), (w, h), borderValue=90)


def write(path: Path, img: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), img)
    return path


def test_trim_white_cuts_the_padding_and_positions_stay_in_the_photo(tmp_path):
    img = pattern(0)
    padded = np.full((200, 200), 255, np.uint8)
    padded[40:160, :] = img
    crop, x0, y0 = trim_white(padded)
    assert (x0, y0) == (0, 40) and crop.shape == img.shape
    cfg = FeatureConfig()
    f_plain = extract(write(tmp_path / "a.png", img), cfg)
    f_pad = extract(write(tmp_path / "b.png", padded), cfg)
    assert len(f_plain) > 20 and len(f_pad) == len(f_plain)
    np.testing.assert_allclose(f_pad.xy, f_plain.xy + [0, 40], atol=1e-3)
    assert f_pad.photo_size == (200, 200)
    norms = np.linalg.norm(as_float(f_plain.desc), axis=1)  # RootSIFT: unit L2 norm, up to the uint8 step
    assert np.all(np.abs(norms - 1) < 0.03)


def test_all_white_or_unreadable_photos(tmp_path):
    assert len(extract(write(tmp_path / "white.png", np.full((50, 50), 255, np.uint8)), FeatureConfig())) == 0
    bad = tmp_path / "bad.jpg"
    bad.write_text("not an image")
    with pytest.raises(DataError, match="bad.jpg"):
        extract(bad, FeatureConfig())


def test_store_extracts_each_photo_once_by_content(tmp_path, monkeypatch):
    cfg = load_keypoint_config()
    a = write(tmp_path / "p" / "a.png", pattern(1))
    b = write(tmp_path / "p" / "b.png", pattern(2))
    store = FeatureStore(cfg, tmp_path / "store")
    first = store.features([a, b], workers=1, progress=False)
    copy = write(tmp_path / "q" / "renamed.png", cv2.imread(str(a), cv2.IMREAD_GRAYSCALE))
    import whale.keypoints.store as store_mod

    monkeypatch.setattr(store_mod, "extract", lambda *a, **k: pytest.fail("extracted again"))
    again = store.features([b, copy], workers=1, progress=False)
    np.testing.assert_array_equal(again[0].desc, first[1].desc)
    np.testing.assert_array_equal(again[1].xy, first[0].xy)
    # another feature setting is another folder; a damaged entry is extracted again
    assert FeatureStore(load_keypoint_config(overrides={"features.n_features": 50}), tmp_path / "store").folder != store.folder
    monkeypatch.undo()
    entry = next(store.folder.rglob("*.npz"))
    entry.write_bytes(b"garbage")
    assert len(store.features([a, b], workers=1, progress=False)) == 2


def one_photo_store(tmp_path: Path):
    """``(cfg, photo, store, features, entry)``: the shipped config's store of one test photo, its features and its
    one file."""
    cfg = load_keypoint_config()
    a = write(tmp_path / "p" / "a.png", pattern(1))
    store = FeatureStore(cfg, tmp_path / "store")
    [clean] = store.features([a], workers=1, progress=False)
    return cfg, a, store, clean, next(store.folder.rglob("*.npz"))


def format_1(path: Path, doubled: bool = False) -> None:
    """Rewrite the store file ``path`` as the store wrote it before it recorded a format: no ``format`` array, and
    128 bytes a descriptor (``doubled``: an XFeat file's 64 written twice)."""
    from whale.core.sealed import read_sealed, write_sealed

    arrays = {k: v for k, v in read_sealed(path).items() if k != "format"}
    if doubled:
        arrays["desc"] = np.hstack([arrays["desc"], arrays["desc"]])
    write_sealed(path, arrays)


def test_a_rootsift_store_of_format_1_is_read_as_it_is_never_extracted_again(tmp_path, monkeypatch):
    from whale.core.sealed import read_sealed
    from whale.keypoints.store import FORMAT, read_entry

    cfg, a, store, clean, entry = one_photo_store(tmp_path)
    assert int(read_sealed(entry)["format"]) == FORMAT == 2 and store.width == 128
    format_1(entry)
    old = entry.read_bytes()
    import whale.keypoints.store as store_mod

    monkeypatch.setattr(store_mod, "extract", lambda *a, **k: pytest.fail("extracted again"))
    for width in (128, None):  # the store's width, or a check that does not know it (whale catalogue check)
        features, why = read_entry(entry, entry.stem, width)
        assert why == "" and features.desc.shape == clean.desc.shape
        np.testing.assert_array_equal(features.desc, clean.desc)
    [again] = FeatureStore(cfg, tmp_path / "store").features([a], workers=1, progress=False)
    [mapped] = FeatureStore(cfg, tmp_path / "store").features([a], workers=1, progress=False, mapped=True)
    for f in (again, mapped):
        np.testing.assert_array_equal(f.desc, clean.desc)
        np.testing.assert_array_equal(f.xy, clean.xy)
    assert entry.read_bytes() == old  # read, not written again
    assert "not XFeat's 64 bytes written twice" in read_entry(entry, entry.stem, 64)[1]  # never taken for XFeat's


def test_a_feature_file_of_a_later_format_is_extracted_again(tmp_path):
    from whale.core.sealed import read_sealed, write_sealed
    from whale.keypoints.store import read_entry

    cfg, a, store, clean, entry = one_photo_store(tmp_path)
    good = entry.read_bytes()
    for version, why in ((3, "of format 3, later than this version's 2"),
                         ("two", "not a readable feature file (its format is")):
        write_sealed(entry, {**read_sealed(entry), "format": np.asarray(version)})
        features, what = read_entry(entry, entry.stem, 128)
        assert features is None and what.startswith(why), what
        redone = store.redone
        [again] = store.features([a], workers=1, progress=False)
        assert store.redone == redone + 1
        np.testing.assert_array_equal(again.desc, clean.desc)
        assert entry.read_bytes() == good


def test_a_damaged_or_altered_feature_file_is_extracted_again_never_matched_on(tmp_path):
    from whale.keypoints.store import UNTIED, read_entry

    cfg, a, store, clean, entry = one_photo_store(tmp_path)
    good = entry.read_bytes()
    rng = np.random.default_rng(0)

    def flipped():
        bad = bytearray(good)
        for at in rng.choice(len(bad), 3, replace=False):
            bad[at] ^= 0xFF
        return bytes(bad)

    def zeroed_desc(keep_hash: bool):  # the descriptors replaced by a plain writer, the old hash kept or not
        with np.load(entry, allow_pickle=False) as z:
            arrays = {k: (np.zeros_like(z[k]) if k == "desc" else z[k]) for k in z.files
                      if keep_hash or k != "content_sha256"}
        with open(entry, "wb") as fh:
            np.savez(fh, **arrays)

    harms = {"cut short": lambda: entry.write_bytes(good[:len(good) // 3]), "empty": lambda: entry.write_bytes(b""),
             "bytes flipped": lambda: entry.write_bytes(flipped()),
             "replaced without a hash": lambda: zeroed_desc(False),
             "replaced, the hash kept": lambda: zeroed_desc(True)}
    for what, harm in harms.items():
        harm()
        features, why = read_entry(entry, entry.stem)
        assert features is None and why, what
        expected = UNTIED if what == "replaced without a hash" else "not a readable feature file"
        assert why.startswith(expected), (what, why)
        redone = store.redone
        [again] = store.features([a], workers=1, progress=False)
        assert store.redone == redone + 1, what
        np.testing.assert_array_equal(again.desc, clean.desc)
        assert entry.read_bytes() == good, what  # extracted again: the bytes of a clean run


def test_mapped_descriptors_are_the_stored_ones_read_or_extracted_and_leave_no_file(tmp_path):
    cfg = load_keypoint_config()
    paths = [write(tmp_path / f"{i}.png", pattern(i)) for i in range(10)]
    store = FeatureStore(cfg, tmp_path / "store")
    held = store.features(paths[:4], workers=1, progress=False)  # 4 stored, 6 to extract (in 2 workers)
    mapped = FeatureStore(cfg, tmp_path / "store").features(paths + paths[:1], workers=2, progress=False, mapped=True)
    plain = store.features(paths + paths[:1], workers=1, progress=False)
    for x, y in zip(mapped, plain):
        assert isinstance(x.desc, np.memmap) and not x.desc.flags.writeable
        np.testing.assert_array_equal(x.desc, y.desc)
        np.testing.assert_array_equal(x.xy, y.xy)
    np.testing.assert_array_equal(mapped[0].desc, held[0].desc)
    assert not [p for p in store.folder.iterdir() if p.is_file()]  # the mapped file has no name: nothing left
    from whale.keypoints.store import MappedDescriptors

    (tmp_path / "a_file").write_text("")
    elsewhere = MappedDescriptors(tmp_path / "a_file" / "no")  # no folder there: the system's temporary folder
    np.testing.assert_array_equal(elsewhere.mapped([elsewhere.put(held[1])])[0].desc, held[1].desc)


def test_a_stand_in_carries_its_rows_so_a_copy_maps_and_a_stranger_is_refused(tmp_path):
    import copy
    import dataclasses

    from whale.keypoints.store import MappedDescriptors, StandIn

    gallery = _features(3, 0, per=5) + _features(1, 1, per=0) + _features(1, 2, per=7)
    pack = MappedDescriptors(tmp_path)
    stand_ins = [pack.put(f) for f in gallery]
    assert [s.rows for s in stand_ins] == [(0, 5), (5, 10), (10, 15), (15, 15), (15, 22)]
    assert all(isinstance(s, StandIn) and s.desc.shape == (0, 128) for s in stand_ins)
    # copies (which an id() key would not know) and a reordered list map to the photo's own descriptors
    copies = [copy.copy(stand_ins[4]), dataclasses.replace(stand_ins[0]), copy.deepcopy(stand_ins[2]),
              dataclasses.replace(stand_ins[1], xy=stand_ins[1].xy + 1)]
    assert copies[2].pack is pack  # the file is not copied
    got = pack.mapped(copies + [stand_ins[3]])
    for g, want in zip(got, [gallery[4], gallery[0], gallery[2], gallery[1], gallery[3]]):
        np.testing.assert_array_equal(g.desc, want.desc)
        assert g.desc.shape == (len(want), 128) and g.photo_size == want.photo_size
    np.testing.assert_array_equal(got[3].xy, gallery[1].xy + 1)  # the keypoints are the stand-in's own
    other = MappedDescriptors(tmp_path)
    stranger = other.put(gallery[0])
    with pytest.raises(ValueError, match="item 1 is another file's stand-in"):
        pack.mapped([stand_ins[0], stranger])
    with pytest.raises(ValueError, match="item 0 is a Features"):
        pack.mapped([gallery[0]])


def test_store_extracts_in_worker_processes_and_names_a_bad_photo(tmp_path):
    cfg = load_keypoint_config()
    paths = [write(tmp_path / f"{i}.png", pattern(i)) for i in range(10)]
    store = FeatureStore(cfg, tmp_path / "store")
    parallel = store.features(paths, workers=2, progress=False)
    serial = FeatureStore(cfg, tmp_path / "store2").features(paths, workers=1, progress=False)
    for x, y in zip(parallel, serial):
        np.testing.assert_array_equal(x.desc, y.desc)
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff")
    with pytest.raises(DataError, match="broken.jpg"):
        store.features(paths[:8] + [bad], workers=2, progress=False)


def _features(n_photos: int, seed: int, per: int = 12):
    from whale.keypoints.extract import Features

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_photos):
        d = rng.random((per, 128)).astype(np.float32)
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        out.append(Features(rng.random((per, 2)).astype(np.float32) * 100, np.zeros((per, 2), np.float32),
                            np.clip(d * 512 + 0.5, 0, 255).astype(np.uint8), (100, 100)))
    return out


@pytest.mark.parametrize("kind", ["exact", "ivf"])
def test_index_finds_the_brute_force_neighbours(kind):
    pytest.importorskip("faiss") if kind == "ivf" else None
    gallery = _features(40, 0, per=60)
    query = as_float(_features(1, 1, per=30)[0].desc)
    index = DescriptorIndex(gallery, SearchConfig(index=kind, nprobe=4096))
    dist, rows = index.search(query, 5)
    allg = np.concatenate([as_float(f.desc) for f in gallery])
    brute = np.linalg.norm(query[:, None] - allg[None], axis=2)
    want = np.sort(brute, axis=1)[:, :5]
    np.testing.assert_allclose(np.take_along_axis(brute, rows, 1), dist, atol=1e-4)  # exact distances
    if kind == "exact":
        np.testing.assert_allclose(dist, want, atol=1e-4)
    else:  # approximate: most true neighbours found (random vectors: the hardest case for PQ)
        true_rows = np.argsort(brute, axis=1)[:, :5]
        recall = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(rows, true_rows)])
        assert recall >= 0.7, recall
    assert index.owner[rows[0, 0]] == np.repeat(np.arange(40), 60)[rows[0, 0]]
    few = DescriptorIndex(_features(1, 2, per=3), SearchConfig(index="exact"))
    d, r = few.search(query[:2], 5)
    assert (r[:, 3:] == -1).all() and np.isinf(d[:, 3:]).all()


def test_auto_takes_the_approximate_index_when_exact_search_would_compare_too_many_pairs(monkeypatch):
    pytest.importorskip("faiss")
    from whale.keypoints import index as index_module

    gallery = _features(20, 0, per=30)  # 600 descriptors: exact by their number
    assert DescriptorIndex(gallery, SearchConfig()).kind == "exact"
    monkeypatch.setattr(index_module, "AUTO_IVF_PAIRS", 600 * 1000)
    assert DescriptorIndex(gallery, SearchConfig(), searched_by=999).kind == "exact"
    assert DescriptorIndex(gallery, SearchConfig(), searched_by=1000).kind == "ivf"  # the gallery searching queries
    assert DescriptorIndex(gallery, SearchConfig(index="exact"), searched_by=10**6).kind == "exact"  # as asked


def test_the_ivf_index_added_in_blocks_finds_what_it_finds_added_at_once(monkeypatch):
    pytest.importorskip("faiss")
    from whale.keypoints import index as index_module

    gallery = _features(40, 0, per=60)
    query = as_float(_features(1, 1, per=30)[0].desc)
    whole = DescriptorIndex(gallery, SearchConfig(index="ivf", nprobe=4096))
    monkeypatch.setattr(index_module, "ADD_ROWS", 7)  # blocks that cut photos anywhere
    blocks = DescriptorIndex(gallery, SearchConfig(index="ivf", nprobe=4096))
    for a, b in zip(whole.search(query, 5), blocks.search(query, 5)):
        np.testing.assert_array_equal(a, b)
    assert blocks._desc is None  # the gallery's descriptors live once, as bytes, inside the index
    np.testing.assert_array_equal(blocks.owner, np.repeat(np.arange(40), 60))
    np.testing.assert_array_equal(blocks.local, np.tile(np.arange(60), 40))
    rows = np.array([3, 5, 4, 6, 61, 2399])  # any rows, in any order: each the stored bytes of its descriptor
    got = index_module._gather(gallery, blocks.owner[rows], blocks.local[rows])
    np.testing.assert_array_equal(got, np.concatenate([f.desc for f in gallery])[rows].astype(np.float32))


def test_the_ivf_index_of_mapped_photos_reranks_from_the_file_as_faiss_does(tmp_path):
    pytest.importorskip("faiss")
    from whale.keypoints.index import shared_rows
    from whale.keypoints.store import MappedDescriptors

    gallery = _features(40, 0, per=60)
    pack = MappedDescriptors(tmp_path)
    mapped = pack.mapped([pack.put(f) for f in gallery])
    query = as_float(_features(1, 1, per=30)[0].desc)
    held = DescriptorIndex(gallery, SearchConfig(index="ivf", nprobe=4096))
    read = DescriptorIndex(mapped, SearchConfig(index="ivf", nprobe=4096))
    assert held._mapped is None and read._mapped is not None  # no copy of the descriptors: read from the file
    for a, b in zip(read.search(query, 5), held.search(query, 5)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    backwards = DescriptorIndex(mapped[::-1], SearchConfig(index="ivf", nprobe=4096))  # any order of the photos
    dist, rows = backwards.search(query, 5)
    allg = np.concatenate([as_float(f.desc) for f in mapped[::-1]])
    np.testing.assert_allclose(np.linalg.norm(query[:, None] - allg[rows], axis=2), dist, atol=1e-5)  # exact
    np.testing.assert_array_equal(backwards.owner[rows], np.repeat(np.arange(40), 60)[rows])
    assert shared_rows(mapped[:3] + [gallery[3]]) is None  # one photo held apart: the index keeps its own copy
    few = DescriptorIndex(mapped[:2], SearchConfig(index="ivf", nprobe=4096))
    d, r = few.search(query[:2], 130)  # more neighbours than the gallery has: -1 and inf after its 120
    assert (r[:, 120:] == -1).all() and np.isinf(d[:, 120:]).all() and (r[:, :100] >= 0).all()


def test_lnbnn_votes_match_a_loop():
    rng = np.random.default_rng(0)
    m, k, n_photos = 30, 3, 6
    owner = rng.integers(0, n_photos, 50)
    rows = np.stack([rng.choice(50, k + 1, replace=False) for _ in range(m)])
    dist = np.sort(rng.random((m, k + 1)).astype(np.float32), axis=1)
    rows[0, 1] = -1
    dist[0, 1] = np.inf
    votes, feat, photo, row, weight = lnbnn_votes(dist, rows, owner, k, n_photos)
    want = np.zeros(n_photos)
    for i in range(m):
        best = {}
        for j in range(k):
            if rows[i, j] < 0:
                continue
            w = dist[i, k] - dist[i, j]
            p = owner[rows[i, j]]
            if w > 0:
                best[p] = max(best.get(p, 0), w)
        for p, w in best.items():
            want[p] += w
    np.testing.assert_allclose(votes, want, rtol=1e-5)
    assert len(set(zip(feat.tolist(), photo.tolist()))) == len(feat)  # one vote per (descriptor, photo)


def test_the_name_rule_normalises_with_another_individual():
    from whale.keypoints.votes import normaliser

    owner = np.arange(6)  # one row per gallery photo
    individual = np.array([0, 0, 0, 1, 0, 2])
    rows = np.array([[0, 1, 2, 3, 4], [0, 3, 5, 1, 2], [0, 1, 2, 4, -1]])
    # k = 2: voters of row 0 are individual 0 twice -> normaliser: photo 3 (column 3, individual 1)
    # row 1: voters of individuals 0 and 1 -> photo 5 (column 2); row 2: none other, the last found (column 3)
    np.testing.assert_array_equal(normaliser(rows, owner, individual, 2), [3, 2, 3])
    np.testing.assert_array_equal(normaliser(rows, owner, None, 2), [2, 2, 2])
    dist = np.array([[0.1, 0.2, 0.3, 0.9, 1.0]] * 3, np.float32)
    votes, *_ = lnbnn_votes(dist, rows, owner, 2, 6, individual)
    assert votes[0] == pytest.approx((0.9 - 0.1) + (0.3 - 0.1) + (0.9 - 0.1))
    assert votes[3] == pytest.approx(0.3 - 0.2)


@pytest.mark.parametrize("geometry", ["homography", "affine", "similarity"])
def test_verification_keeps_the_consistent_correspondences(geometry):
    rng = np.random.default_rng(0)
    src = rng.random((40, 2)).astype(np.float32) * 200
    dst = src * 1.1 + np.float32([5, -3])
    dst[:10] = rng.random((10, 2)).astype(np.float32) * 200  # outliers
    mask = fit_geometry(src, dst, VerifyConfig(geometry=geometry, reproj_px=3.0))
    assert mask[10:].all() and mask[:10].sum() <= 1
    assert fit_geometry(src[:3], dst[:3], VerifyConfig()) is None


def test_matcher_ranks_the_same_pattern_first_and_scores_in_0_1(tmp_path):
    cfg = load_keypoint_config()
    gallery_paths = [write(tmp_path / f"g{i}.png", pattern(i)) for i in range(8)]
    query_paths = [write(tmp_path / f"q{i}.png", warp(pattern(i), 100 + i)) for i in range(3)]
    query_paths.append(write(tmp_path / "stranger.png", pattern(99)))
    store = FeatureStore(cfg, tmp_path / "store")
    matcher = KeypointMatcher(cfg, store.features(gallery_paths, workers=1, progress=False))
    result = matcher.match(store.features(query_paths, workers=1, progress=False), progress=False)
    assert result.scores.shape == (4, 8) and result.scores.dtype == np.float32
    assert (result.scores >= 0).all() and (result.scores < 1).all()
    assert list(result.scores[:3].argmax(axis=1)) == [0, 1, 2]
    assert (result.inliers[np.arange(3), [0, 1, 2]] >= 10).all()
    assert result.scores[3].max() < result.scores[np.arange(3), [0, 1, 2]].min()  # the stranger: less evidence
    q_xy, g_xy = pair_matches(store.features([query_paths[0]], progress=False)[0],
                              store.features([gallery_paths[0]], progress=False)[0], cfg)
    assert len(q_xy) >= 10 and q_xy.shape == g_xy.shape


def test_matcher_s_parts_are_handed_in_and_the_display_fits_through_the_same_verifier(tmp_path):
    """Parts built once from the config give what the matcher builds itself; a verifier of other settings changes
    the matcher's verification and the display's correspondences alike."""
    import dataclasses

    from whale.keypoints.matcher import MatchParts
    from whale.keypoints.scoring import EvidenceScore, evidence_to_score
    from whale.keypoints.verify import GeometricVerifier

    cfg = load_keypoint_config()
    store = FeatureStore(cfg, tmp_path / "store")
    gallery = store.features([write(tmp_path / f"g{i}.png", pattern(i)) for i in range(4)], workers=1, progress=False)
    query = store.features([write(tmp_path / "q.png", warp(pattern(1), 101))], workers=1, progress=False)
    own = KeypointMatcher(cfg, gallery).match(query, progress=False)
    given = KeypointMatcher(cfg, gallery, parts=MatchParts.of(cfg)).match(query, progress=False)
    np.testing.assert_array_equal(own.scores, given.scores)
    unverified = np.zeros_like(own.votes)
    np.testing.assert_array_equal(EvidenceScore.of(cfg.verify)(unverified, own.votes),
                                  evidence_to_score(unverified, own.votes, cfg.verify))
    strict = GeometricVerifier(dataclasses.replace(cfg.verify, min_matches=1000))  # no candidate has that many
    parts = dataclasses.replace(MatchParts.of(cfg), verifier=strict)
    assert KeypointMatcher(cfg, gallery, parts=parts).match(query, progress=False).inliers.max() == 0
    assert len(pair_matches(query[0], gallery[1], strict)[0]) == 0
    assert len(pair_matches(query[0], gallery[1], GeometricVerifier(cfg.verify))[0]) >= 10


def test_matching_leaves_opencv_s_thread_count_as_it_found_it(tmp_path):
    """``match`` runs its robust fits on one OpenCV thread and restores the process-wide setting after, also when
    the match fails."""
    cfg = load_keypoint_config()
    store = FeatureStore(cfg, tmp_path / "store")
    feats = store.features([write(tmp_path / f"g{i}.png", pattern(i)) for i in range(3)], workers=1, progress=False)
    matcher = KeypointMatcher(cfg, feats)
    before = cv2.getNumThreads()
    try:
        cv2.setNumThreads(3)
        matcher.match(feats[:1], progress=False)
        assert cv2.getNumThreads() == 3
        with pytest.raises(TypeError):
            matcher.match(feats[:1], progress=False, on_verified=lambda: None)  # a callback that fails
        assert cv2.getNumThreads() == 3
    finally:
        cv2.setNumThreads(before)


def test_queries_verified_in_threads_give_what_one_thread_gives(tmp_path, monkeypatch):
    """The queries of a searched block verified by several threads: the same scores, inliers, votes and described
    pairs both ways, and the ``on_verified`` calls in the same order, as one thread gives."""
    import whale.keypoints.matcher as matcher_module

    monkeypatch.setattr(matcher_module, "_QUERY_BLOCK", 4)  # three blocks of queries
    cfg = load_keypoint_config(overrides={"check.both_ways": True})
    store = FeatureStore(cfg, tmp_path / "store")
    gallery = store.features([write(tmp_path / f"g{i}.png", pattern(i)) for i in range(6)], workers=1, progress=False)
    queries = store.features([write(tmp_path / f"q{i}.png", warp(pattern(i % 6), 200 + i)) for i in range(10)],
                             workers=1, progress=False)
    results, calls = {}, {}
    for threads in (1, 3):
        seen: list = []
        matcher = KeypointMatcher(cfg, gallery, threads=threads)
        results[threads] = matcher.match(queries, progress=False, describe=True,
                                         on_verified=lambda i, c, qk, gk: seen.append((i, c, qk.tolist(), gk.tolist())))
        calls[threads] = seen
    one, three = results[1], results[3]
    assert one.inliers.max() >= 10 and len(one.pairs.index) > 10
    for name in ("scores", "inliers", "votes"):
        np.testing.assert_array_equal(getattr(one, name), getattr(three, name))
    np.testing.assert_array_equal(one.pairs.index, three.pairs.index)
    np.testing.assert_array_equal(one.pairs.rows, three.pairs.rows)
    assert calls[1] == calls[3] and [c[0] for c in calls[1]] == sorted(c[0] for c in calls[1])
    with pytest.raises(ValueError, match="threads"):
        KeypointMatcher(cfg, gallery, threads=0)


def test_the_default_settings_keep_their_fingerprint_and_hash():
    """The feature store's folder (the fingerprint) and the score files' run id (the config hash) of the shipped
    settings, pinned: a new feature setting that changed the fingerprint would orphan every stored feature, and one
    that changed the hash every score file's run id. A deliberate change updates these literals."""
    cfg = load_keypoint_config()
    assert cfg.fingerprint() == "dc148c049307"
    assert cfg.config_hash() == "7d5abae91a1a"
    assert load_keypoint_config(Path(__file__).resolve().parents[1] / "configs" / "keypoints.yaml").fingerprint() \
        == "dc148c049307"


def test_config_rejects_unknown_keys_and_bad_values(tmp_path):
    bad = tmp_path / "k.yaml"
    bad.write_text("verify: {geometry: circle}\n")
    with pytest.raises(ConfigError, match=r"k.yaml: verify.geometry: expected one of homography"):
        load_keypoint_config(bad)
    bad.write_text("search: {neighbours: 3}\n")
    with pytest.raises(ConfigError, match="unknown key 'neighbours'"):
        load_keypoint_config(bad)
    cfg = load_keypoint_config(Path(__file__).resolve().parents[1] / "configs" / "keypoints.yaml")
    assert cfg == load_keypoint_config(None)  # the shipped file says what the defaults are
    assert load_keypoint_config(overrides={"verify.shortlist": 5}).verify.shortlist == 5


def test_an_old_config_naming_the_moved_new_threshold_is_read_with_a_note(tmp_path, capsys):
    """``verify.new_threshold`` is the catalogue's now (:data:`whale.catalogue.keypoints.SCORE_THRESHOLD`): an old
    YAML (a batch's recorded ``keypoints.yaml`` among them) or ``--set`` naming it is read without it, one line says
    where it went, and the config is the one without it (its scores and config hash)."""
    from whale.catalogue.keypoints import SCORE_THRESHOLD

    old = tmp_path / "old.yaml"
    old.write_text("verify: {shortlist: 7, new_threshold: 0.15}\n")
    cfg = load_keypoint_config(old)
    assert cfg == load_keypoint_config(None, {"verify.shortlist": 7}) and not hasattr(cfg.verify, "new_threshold")
    note = capsys.readouterr().err.strip().splitlines()
    assert len(note) == 1 and "old.yaml: verify.new_threshold is no longer a keypoint setting (ignored)" in note[0]
    assert "whale.catalogue.keypoints.SCORE_THRESHOLD" in note[0] and SCORE_THRESHOLD == 0.15
    assert load_keypoint_config(None, {"verify.new_threshold": 0.3}) == load_keypoint_config(None)
    assert "verify.new_threshold" in capsys.readouterr().err
    old.write_text("verify: {new_thresholds: 0.15}\n")  # any other unknown key is still refused
    with pytest.raises(ConfigError, match="unknown key 'new_thresholds'"):
        load_keypoint_config(old)


def test_score_keypoints_then_ensemble_writes_a_checked_submission(tmp_path, monkeypatch):
    from whale.data.synth import generate
    from whale.ensemble.cli import main as ensemble_main
    from whale.inference.__main__ import main as score_main
    from whale.inference.scorefile import load_score_file

    monkeypatch.setenv("WHALE_CACHE", str(tmp_path / "cache"))
    data = generate(tmp_path / "data", n_ids=12, seed=3, size=96, progress=False)
    out = tmp_path / "kp"
    assert score_main(["--matcher", "keypoints", "--data", str(data), "--out", str(out), "--fold", "0",
                       "--quiet", "--workers", "1"]) == 0
    test = load_score_file(out / "test.npz")
    val = load_score_file(out / "val.npz", need_query_ids=True)
    assert test.identity["matcher"] == "keypoints" and val.identity["fold"] == 0
    assert not set(val.query) & set(val.gallery)
    assert (out / "run.json").is_file() and (out / "keypoints.yaml").is_file()
    seconds = json.loads((out / "run.json").read_text())["seconds"]
    assert {"val_select", "val_select_index", "val_select_labels", "test_select"} <= set(seconds)
    assert "test_select_labels" not in seconds  # the test reuses the validation fold's selector
    assert any((tmp_path / "cache" / "keypoints").rglob("*.npz"))
    sub = tmp_path / "kp.csv"
    assert ensemble_main([str(out), "--tune", "--out", str(sub)], log=lambda m: None) == 0
    assert sub.is_file()
    # the single-file form, and the refusals
    assert score_main(["--matcher", "keypoints", "--data", str(data), "--out", str(tmp_path / "t.npz"),
                       "--quiet"]) == 0
    assert score_main(["--matcher", "keypoints", "--data", str(data), "--out", str(tmp_path / "t2.npz"),
                       "--fold", "0", "--quiet"]) == 2
    with pytest.raises(SystemExit):  # argparse: --run is required without --matcher keypoints
        score_main(["--data", str(data), "--out", str(tmp_path / "t3.npz")])


def test_scores_worked_out_in_blocks_are_those_of_the_whole_matrix(monkeypatch):
    from whale.keypoints import scoring

    rng = np.random.default_rng(0)
    evidence = (rng.random((30, 70)) * 5).astype(np.float32)
    votes = (rng.random((30, 70)) * 100).astype(np.float32)
    total = evidence.astype(np.float64) + 0.001 * votes.astype(np.float64)
    whole = (total / (total + 1.0)).astype(np.float32)
    monkeypatch.setattr(scoring, "BLOCK", 97)  # blocks that cut rows anywhere
    got = scoring.EvidenceScore(0.001, 1.0)(evidence, votes)
    assert got.dtype == np.float32 and got.shape == (30, 70)
    np.testing.assert_array_equal(got, whole)


def test_a_second_fit_adds_the_other_half_of_a_bent_fluke():
    import dataclasses

    from whale.keypoints.verify import GeometricVerifier

    rng = np.random.default_rng(0)
    left = rng.random((40, 2)).astype(np.float32) * [150, 200]
    right = rng.random((40, 2)).astype(np.float32) * [150, 200] + [150, 0]
    src = np.concatenate([left, right])
    dst = np.concatenate([left + [10, 0], right @ np.float32([[1, 0.25], [0, 1]]) + [10, 30]])  # the halves apart
    cfg = load_keypoint_config().verify
    one = GeometricVerifier(cfg).fit(src, dst)
    assert 30 <= one.sum() <= 45  # one homography holds one half
    two = GeometricVerifier(dataclasses.replace(cfg, second_fit=8)).fit(src, dst)
    assert two.sum() >= 75 and (two >= one).all()  # the other half fitted by a second one
    assert GeometricVerifier(dataclasses.replace(cfg, second_fit=60)).fit(src, dst).sum() == one.sum()  # too few
    default, on = load_keypoint_config(), load_keypoint_config(overrides={"verify.second_fit": 8})
    assert dataclasses.replace(default.verify, second_fit=0) == default.verify
    assert on.config_hash() != default.config_hash() and on.selection_hash() != default.selection_hash()
