"""Fitted tree classifiers as plain arrays (:mod:`whale.core.trees`) and sealed array files (:mod:`whale.core.sealed`):
predictions equal to scikit-learn's, nothing parsed from a damaged or altered file."""
import io
import zipfile

import numpy as np
import pytest

from whale.core.sealed import SealError, read_sealed, sealed_bytes, write_sealed
from whale.core.trees import TreeEnsemble, prefixed, tree_arrays, unprefixed

sklearn = pytest.importorskip("sklearn.ensemble")


def fitted(seed=0, n=600, d=7, nan=0.1, **kw):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = (x[:, 0] + 0.5 * x[:, 1] ** 2 + rng.normal(scale=0.5, size=n)) > 0.5
    x[rng.random(x.shape) < nan] = np.nan
    return sklearn.HistGradientBoostingClassifier(max_iter=30, max_leaf_nodes=15, random_state=seed, **kw).fit(x, y)


@pytest.mark.parametrize("seed,nan", [(0, 0.1), (1, 0.0), (2, 0.3)])
def test_the_arrays_predict_what_the_model_predicts_nan_included(seed, nan):
    model = fitted(seed, nan=nan)
    rng = np.random.default_rng(seed + 10)
    x = rng.normal(size=(2000, 7)) * 2
    x[rng.random(x.shape) < 0.15] = np.nan
    x[:5] = np.nan  # rows with nothing known
    ensemble = TreeEnsemble.from_arrays(tree_arrays(model))
    expected, got = model.predict_proba(x), ensemble.predict_proba(x)
    assert got.shape == (2000, 2) and got.dtype == np.float64
    assert np.abs(got - expected).max() <= 1e-9
    assert np.array_equal(got, expected)  # the same sums in the same order: equal to the bit
    assert np.array_equal(ensemble.predict_proba(x.astype(np.float32)), model.predict_proba(x.astype(np.float32)))
    assert ensemble.compiled() is not None  # scikit-learn's compiled walk, found equal on its probe
    np.testing.assert_array_equal(ensemble.numpy_raw(x), ensemble.raw(x))  # and the NumPy walk: the same sums


def test_without_scikit_learns_compiled_walk_the_numpy_walk_predicts_the_same(monkeypatch):
    """A scikit-learn whose internals differ (the compiled walk not made, or not equal on the probe): the NumPy walk
    serves, with the model's probabilities to the bit."""
    model = fitted(4, nan=0.2)
    x = np.random.default_rng(6).normal(size=(500, 7))
    monkeypatch.setattr(TreeEnsemble, "_compile", lambda self: None)
    ensemble = TreeEnsemble.from_arrays(tree_arrays(model))
    assert ensemble.compiled() is None
    assert np.array_equal(ensemble.predict_proba(x), model.predict_proba(x))


def test_the_arrays_survive_a_sealed_file_and_refuse_what_is_not_a_tree(tmp_path):
    model = fitted(3)
    write_sealed(tmp_path / "m.npz", prefixed(tree_arrays(model), "a_"))
    back = unprefixed(read_sealed(tmp_path / "m.npz"), "a_")
    x = np.random.default_rng(0).normal(size=(100, 7))
    assert np.array_equal(TreeEnsemble.from_arrays(back).predict_proba(x), model.predict_proba(x))
    cyclic = dict(back)
    inner = int(np.flatnonzero(~back["is_leaf"][:back["tree_starts"][1]])[-1])
    cyclic["left"] = back["left"].copy()
    cyclic["left"][inner] = 0  # a child before its parent: a walk that might never end
    with pytest.raises(ValueError, match="tree 0 has a child out of order"):
        TreeEnsemble.from_arrays(cyclic)
    with pytest.raises(ValueError, match="missing"):
        TreeEnsemble.from_arrays({k: v for k, v in back.items() if k != "threshold"})
    with pytest.raises(ValueError, match="binary HistGradientBoostingClassifier"):
        tree_arrays(object())


def test_a_sealed_file_reads_back_exactly_and_is_a_plain_npz(tmp_path):
    arrays = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "s": np.asarray(["x", "yz"]), "e": np.zeros(0)}
    path = write_sealed(tmp_path / "s.npz", arrays)
    back = read_sealed(path)
    assert set(back) == set(arrays) and all(np.array_equal(back[k], arrays[k]) and back[k].dtype == arrays[k].dtype
                                            for k in arrays)
    with np.load(path, allow_pickle=False) as z:
        assert np.array_equal(z["a"], arrays["a"])
    assert sealed_bytes(arrays) == path.read_bytes()  # the same arrays, the same bytes
    with pytest.raises(ValueError, match="Python objects"):
        sealed_bytes({"o": np.asarray([{}], dtype=object)})


def test_every_damage_to_a_sealed_file_is_a_seal_error_naming_it(tmp_path):
    path = write_sealed(tmp_path / "s.npz", {"a": np.arange(1000, dtype=np.int64), "b": np.ones((4, 4))})
    good = path.read_bytes()
    rng = np.random.default_rng(0)
    for trial in range(300):  # three random bytes changed, anywhere (the 279 of 300 loaded silently)
        bad = bytearray(good)
        for at in rng.choice(len(bad), 3, replace=False):
            bad[at] = (bad[at] + int(rng.integers(1, 256))) % 256
        path.write_bytes(bytes(bad))
        with pytest.raises(SealError, match="s.npz"):
            read_sealed(path)
    for cut in (0, 10, len(good) // 2, len(good) - 1):
        path.write_bytes(good[:cut])
        with pytest.raises(SealError, match="s.npz"):
            read_sealed(path)
    with pytest.raises(FileNotFoundError):
        read_sealed(tmp_path / "none.npz")


def test_an_altered_file_with_consistent_checksums_is_refused_before_any_array_is_made(tmp_path):
    path = tmp_path / "s.npz"
    np.savez(path, a=np.zeros((2, 3)))  # a plain npz: no content hash
    with pytest.raises(SealError, match="records no content hash"):
        read_sealed(path)
    good = sealed_bytes({"a": np.zeros((2, 3))})
    members = {}
    with zipfile.ZipFile(io.BytesIO(good)) as zf:
        for info in zf.infolist():
            members[info.filename] = zf.read(info)
    members["a.npy"] = members["a.npy"].replace(b"(2, 3)", b"(9999999999, 9999)")  # a length field, CRC redone
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    path.write_bytes(buf.getvalue())
    with pytest.raises(SealError, match="does not match the hash"):
        read_sealed(path)
