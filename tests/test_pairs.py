"""Tests for whale.training.pairs: cached crops, epoch pairs, and the Keras batch sequences."""
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest

import whale.data.images
from whale.data.augment import build_augmenter
from whale.data import crop_size_for, ImageStore
from whale.inference.features import ImageBatches
from whale.training.pairs import make_epoch_pairs, PairDataset

S = 32


@pytest.fixture
def store(tmp_path):
    """12 images of 4 ids (3 each), 50x40 px, with boxes; crops of 37 px."""
    rng = np.random.default_rng(0)
    paths, boxes = [], []
    for i in range(12):
        img = rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)
        img[:, :, i % 3] = 20 * i  # make images distinguishable
        p = tmp_path / f"img{i}.jpg"
        cv2.imwrite(str(p), img)
        paths.append(p)
        boxes.append((5, 4, 45, 36) if i % 2 else None)
    return ImageStore(paths, boxes, crop_size_for(S), channels=3)


def pairs_of(n_pos=10, n_neg=10):
    rng = np.random.default_rng(1)
    ids = np.repeat(np.arange(4), 3)
    pos, neg = [], []
    while len(pos) < n_pos or len(neg) < n_neg:
        i, j = rng.integers(0, 12, 2)
        if i == j:
            continue
        (pos if ids[i] == ids[j] else neg).append((i, j))
    return np.array(pos[:n_pos]), np.array(neg[:n_neg])


def test_crop_size_for():
    assert crop_size_for(384) == 442 and crop_size_for(32) == 37


def test_store_shapes_and_cache(store, monkeypatch):
    calls = []
    real = whale.data.images.load_crop

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(whale.data.images, "load_crop", counting)
    assert len(store) == 12
    a = store[3]
    assert a.shape == (37, 37, 3) and a.dtype == np.uint8
    b = store[3]
    assert b is a and len(calls) == 1
    store.preload(progress=False)
    assert len(calls) == 12 and store.n_cached == 12
    store[-1]
    assert len(calls) == 12
    with pytest.raises(IndexError):
        store[12]


def test_store_gray_and_no_cache(store, monkeypatch):
    gray = ImageStore(store.paths, store.boxes, 20, channels=1, cache=False)
    calls = []
    real = whale.data.images.load_crop
    monkeypatch.setattr(whale.data.images, "load_crop", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert gray[0].shape == (20, 20, 1)
    gray[0]
    assert len(calls) == 2 and gray.n_cached == 0
    with pytest.raises(ValueError, match="one box"):
        ImageStore(store.paths, store.boxes[:3], 20)


@pytest.mark.parametrize("channels", [1, 3])
def test_store_jpeg_cache(tmp_path, channels, monkeypatch):
    """``cache="jpeg"``: encoded bytes in memory, one file read, crops close to the decoded ones."""
    yy, xx = np.mgrid[0:120, 0:160]
    img = np.stack([0.9 * (xx + yy), 1.5 * xx, 2 * yy], -1).astype(np.uint8)  # smooth, like photos
    path = tmp_path / "smooth.png"
    cv2.imwrite(str(path), img)
    exact = ImageStore([path], None, 90, channels=channels)
    packed = ImageStore([path], None, 90, channels=channels, cache="jpeg")
    calls = []
    real = whale.data.images.load_crop
    monkeypatch.setattr(whale.data.images, "load_crop", lambda *a, **k: calls.append(1) or real(*a, **k))
    first, again = packed[0], packed[0]
    assert len(calls) == 1 and packed.n_cached == 1
    assert first.shape == again.shape == (90, 90, channels) and again.dtype == np.uint8
    ref = exact[0]
    assert np.abs(again.astype(int) - ref.astype(int)).mean() < 2.0
    assert packed.nbytes < exact.nbytes / 3
    with pytest.raises(ValueError, match="cache: expected one of memory, jpeg, none"):
        ImageStore([path], None, 90, cache="disk")


def test_make_epoch_pairs_balanced():
    pos, neg = pairs_of(10, 10)
    pairs, labels = make_epoch_pairs(pos, neg, np.random.default_rng(0))
    assert pairs.shape == (20, 2) and pairs.dtype == np.int64 and labels.dtype == np.float32
    assert labels.sum() == 10
    assert np.array_equal(pairs[:10], pos) and np.array_equal(pairs[10:], neg)


@pytest.mark.parametrize("n_pos,n_neg", [(4, 10), (10, 3)])
def test_make_epoch_pairs_unequal_keeps_every_pair(n_pos, n_neg):
    pos, neg = pairs_of(n_pos, n_neg)
    pairs, labels = make_epoch_pairs(pos, neg, np.random.default_rng(0))
    n = max(n_pos, n_neg)
    assert pairs.shape == (2 * n, 2) and labels.sum() == n
    got_pos = {tuple(p) for p in pairs[labels == 1]}
    got_neg = {tuple(p) for p in pairs[labels == 0]}
    assert got_pos == {tuple(p) for p in pos} and got_neg == {tuple(p) for p in neg}
    with pytest.raises(ValueError, match="at least one"):
        make_epoch_pairs(pos, np.zeros((0, 2), int), np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        make_epoch_pairs(pos[:, :1], neg, np.random.default_rng(0))


def make_ds(store, augment=True, **kw):
    pos, neg = pairs_of(10, 10)
    pairs, labels = make_epoch_pairs(pos, neg, np.random.default_rng(0))
    aug = build_augmenter(S, 3) if augment else None
    args = dict(image_size=S, augmenter=aug, batch_size=6, seed=0, epoch=2)
    args.update(kw)
    return PairDataset(store, pairs, labels, **args)


def test_pair_dataset_batches(store):
    ds = make_ds(store)
    assert len(ds) == 4 and ds.num_batches == 4  # 20 pairs in batches of 6
    ys = []
    for i in range(len(ds)):
        (a, b), y = ds[i]
        assert a.shape == b.shape == (6, S, S, 3) and a.dtype == b.dtype == np.float32
        assert y.shape == (6, 1) and y.dtype == np.float32
        assert 0 <= a.min() and a.max() <= 255 and a.max() > 1  # raw pixels, not scaled
        ys.append(y)
    # The last batch holds the 2 remaining pairs topped up with the epoch's first 4.
    np.testing.assert_array_equal(ds[3][1][2:], ds[0][1][:4])
    ys = np.concatenate(ys)[:20]
    assert ys.sum() == 10  # half positive
    assert not np.array_equal(ys[:10, 0], np.ones(10))  # shuffled
    with pytest.raises(IndexError):
        ds[4]


def test_pair_dataset_deterministic(store):
    first = [make_ds(store)[i] for i in range(4)]
    second = make_ds(store)
    for i in reversed(range(4)):  # order of access does not matter
        (a, b), y = second[i]
        assert np.array_equal(a, first[i][0][0]) and np.array_equal(b, first[i][0][1])
        assert np.array_equal(y, first[i][1])
    # another epoch: other order and other augmentation
    other = make_ds(store, epoch=3)
    assert not all(np.array_equal(other[i][0][0], first[i][0][0]) for i in range(4))


def test_pair_sides_augmented_independently(store):
    pairs = np.array([[0, 0], [1, 1]])  # same image on both sides
    ds = PairDataset(store, pairs, np.ones(2), S, build_augmenter(S, 3), 2, seed=0, epoch=0)
    (a, b), _ = ds[0]
    assert not np.array_equal(a, b)
    plain = PairDataset(store, pairs, np.ones(2), S, None, 2, seed=0, epoch=0)
    (a, b), _ = plain[0]
    assert np.array_equal(a, b)


def test_pair_dataset_workers(store):
    expected = [make_ds(store)[i] for i in range(4)]
    ds = make_ds(store, workers=2)
    with ThreadPoolExecutor(2) as pool:  # concurrent, out of order
        got = list(pool.map(ds.__getitem__, [3, 1, 2, 0]))
    for i, g in zip([3, 1, 2, 0], got):
        assert np.array_equal(g[0][0], expected[i][0][0]) and np.array_equal(g[0][1], expected[i][0][1])
    # through Keras' own PyDataset machinery (thread pool of 2 workers)
    from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

    batches = list(PyDatasetAdapter(make_ds(store, workers=2), shuffle=False).get_numpy_iterator())
    assert len(batches) == 4
    for i, batch in enumerate(batches):
        (a, b), y = batch
        assert np.array_equal(a, expected[i][0][0]) and np.array_equal(b, expected[i][0][1])
        assert np.array_equal(y, expected[i][1])


def test_pair_dataset_checks(store):
    with pytest.raises(ValueError, match="one label per pair"):
        PairDataset(store, np.array([[0, 1]]), np.ones(2), S, None, 2, 0, 0)
    with pytest.raises(ValueError, match=r"\[0, 12\)"):
        PairDataset(store, np.array([[0, 12]]), np.ones(1), S, None, 2, 0, 0)


def test_image_batches(store):
    ib = ImageBatches(store, [5, 0, 7], S, batch_size=2)
    assert len(ib) == 2
    x0, x1 = ib[0], ib[1]
    assert x0.shape == (2, S, S, 3) and x1.shape == (1, S, S, 3) and x0.dtype == np.float32
    plain = cv2.resize(store[0], (S, S), interpolation=cv2.INTER_AREA).astype(np.float32)
    assert np.array_equal(x0[1], plain)
    assert len(ImageBatches(store, None, S, batch_size=5)) == 3  # all 12 images by default
