"""batching: images: packing an epoch's pairs into batches that share images, and the shared model."""
import numpy as np
import pytest

from whale.mining import positive_pairs
from whale.training.imagebatches import ImageBatchDataset, describe, pack_pairs


def paper_epoch(sizes=(2, 3, 4, 6, 2, 5, 3, 2, 7, 4, 2, 3), seed=0):
    """An epoch shaped like Algorithm 1's: a derangement inside each id and one random
    different-id negative per image (a permutation, as the LAP gives)."""
    rng = np.random.default_rng(seed)
    ids = np.repeat(np.arange(len(sizes)), sizes)
    pos = positive_pairs(ids, rng)
    while True:
        perm = rng.permutation(len(ids))
        if (ids[perm] != ids).all():
            break
    neg = np.stack([np.arange(len(ids)), perm], axis=1)
    pairs = np.concatenate([pos, neg])
    labels = np.r_[np.ones(len(pos)), np.zeros(len(neg))].astype(np.float32)
    return ids, pairs, labels


def real_slots(packed):
    """``(batch, slot)`` of every real pair, and the pair row it holds."""
    b, s = np.nonzero(packed.weights > 0)
    return b, s, packed.rows[b, s]


@pytest.mark.parametrize("batch", [2, 5, 16, 32])
def test_every_pair_lands_once_with_its_label_and_its_two_images(batch):
    ids, pairs, labels = paper_epoch()
    packed = pack_pairs(pairs, labels, batch, np.random.default_rng(3))
    b, s, rows = real_slots(packed)
    assert sorted(rows.tolist()) == list(range(len(pairs)))
    assert (packed.rows[packed.weights == 0] == -1).all()
    np.testing.assert_array_equal(packed.labels[b, s], labels[rows])
    # The slot's two indices point at the batch's copies of the pair's two images.
    first = packed.images[b, packed.index[b, s, 0]]
    second = packed.images[b, packed.index[b, s, 1]]
    np.testing.assert_array_equal(np.stack([first, second], axis=1), pairs[rows])
    assert packed.images.shape == (len(packed.images), batch) and packed.index.shape[1:] == (batch, 2)


def test_a_batch_never_holds_more_distinct_images_than_its_size_and_padding_repeats_its_own():
    ids, pairs, labels = paper_epoch()
    packed = pack_pairs(pairs, labels, 8, np.random.default_rng(0))
    held = 0
    for i in range(len(packed.images)):
        real = packed.index[i][packed.weights[i] > 0]
        used = set(packed.images[i][np.unique(real)].tolist())
        assert len(used) <= 8
        assert set(packed.images[i].tolist()) == used  # padding slots repeat images of this batch
        held += len(used)
    assert packed.unique_images == held


def test_the_paper_shaped_epoch_needs_about_one_image_per_pair_against_two():
    ids, pairs, labels = paper_epoch(sizes=tuple(np.random.default_rng(1).integers(2, 9, 60)))
    packed = pack_pairs(pairs, labels, 32, np.random.default_rng(0))
    assert packed.num_pairs == len(pairs)
    # Each cycle of k images brings 2k pairs and at most 2k images; only batch edges cost more.
    assert packed.unique_images / len(pairs) < 1.1
    assert packed.images_per_pair < 1.15
    assert "images per pair (paper's batching: 2)" in describe(packed)


def test_a_positive_cycle_stays_in_one_batch_when_it_fits():
    # One id of 4 in a 4-cycle and negatives to 4 other images: 8 pairs, 8 images.
    pairs = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [0, 4], [1, 5], [2, 6], [3, 7]])
    labels = np.r_[np.ones(4), np.zeros(4)]
    packed = pack_pairs(pairs, labels, 8, np.random.default_rng(0))
    assert len(packed.images) == 1 and packed.weights.sum() == 8
    assert sorted(packed.images[0].tolist()) == list(range(8))


def test_packing_depends_on_the_generator_only():
    ids, pairs, labels = paper_epoch()
    a, b, c = (pack_pairs(pairs, labels, 16, np.random.default_rng(s)) for s in (7, 7, 8))
    np.testing.assert_array_equal(a.rows, b.rows)
    assert not np.array_equal(a.rows, c.rows)


def test_batch_size_one_is_refused():
    with pytest.raises(ValueError, match="batch_size >= 2"):
        pack_pairs(np.array([[0, 1]]), np.array([1.0]), 1, np.random.default_rng(0))


class _Store(list):
    channels = 1


def test_dataset_batches_are_the_same_whenever_built_and_carry_weights():
    ids, pairs, labels = paper_epoch()
    rng = np.random.default_rng(0)
    store = _Store(rng.integers(0, 255, (len(ids), 20, 20, 1), dtype=np.uint8))

    def jitter(img, r):  # a stand-in augmenter: the image resized plus noise from its generator
        import cv2

        return (cv2.resize(img, (16, 16))[..., None] + r.integers(0, 3, (16, 16, 1))).astype(np.uint8)

    ds = ImageBatchDataset(store, pairs, labels, 16, jitter, batch_size=8, seed=1, epoch=2)
    (x, index), y, w = ds[1]
    (x2, index2), y2, w2 = ImageBatchDataset(store, pairs, labels, 16, jitter, batch_size=8, seed=1, epoch=2)[1]
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(index, index2)
    assert x.shape == (8, 16, 16, 1) and x.dtype == np.float32 and index.dtype == np.int32
    assert y.shape == (8, 1) and w.shape == (8,)
    np.testing.assert_array_equal(w, ds.packed.weights[1])
    other = ImageBatchDataset(store, pairs, labels, 16, jitter, batch_size=8, seed=1, epoch=3)
    assert not np.array_equal(other.packed.rows, ds.packed.rows)
    with pytest.raises(IndexError, match="out of range"):
        ds[len(ds)]


@pytest.mark.backend
def test_the_shared_model_scores_each_pair_as_the_paper_s_model_does(backend):
    import keras

    from whale.models import build_branch, build_head, build_siamese, is_shared, resize_siamese

    keras.utils.set_random_seed(0)
    branch = build_branch("tiny", (32, 32, 3))
    head = build_head(int(branch.output_shape[-1]), mid=8)
    paper, shared = build_siamese(branch, head), build_siamese(branch, head, shared=True)
    assert not is_shared(paper) and is_shared(shared)
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 255, (6, 32, 32, 3)).astype(np.float32)
    index = np.array([[0, 1], [1, 2], [2, 0], [3, 5], [5, 4], [4, 3]], np.int32)
    got = np.asarray(shared.predict([images, index], verbose=0))
    want = np.asarray(paper.predict([images[index[:, 0]], images[index[:, 1]]], verbose=0))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert is_shared(resize_siamese(shared, 40)) and not is_shared(resize_siamese(paper, 40))
