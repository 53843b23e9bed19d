"""benchmarks/seeds/mnist.py (seed 004, Section 4.4): the idx loader and its MNIST checks, inputs, pairs, and a
--quick run.

No MNIST ships with the toolkit: the files here are written by the test, with MNIST's shapes and per-digit counts.
"""

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.seeds import mnist  # noqa: E402
from whale.core.errors import DataError, MissingFileError  # noqa: E402


def _labels(name: str, rng) -> np.ndarray:
    return rng.permutation(np.repeat(np.arange(10), mnist.DIGIT_COUNTS[name])).astype(np.uint8)


def _images(labels: np.ndarray, rng) -> np.ndarray:
    """A learnable stand-in: digit d lights row band d, plus noise."""
    x = rng.integers(0, 60, (len(labels), 28, 28)).astype(np.uint8)
    for d in range(10):
        x[labels == d, 2 + 2 * d:4 + 2 * d, 4:24] = 255
    return x


def _write(folder: Path, labels_train=None, dash: bool = False) -> Path:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    y_train = _labels("train", rng) if labels_train is None else labels_train
    y_test = _labels("test", rng)
    for key, data in (("train_images", _images(y_train, rng)), ("train_labels", y_train),
                      ("test_images", _images(y_test, rng)), ("test_labels", y_test)):
        head = struct.pack(">IIII", 2051, len(data), 28, 28) if data.ndim == 3 else struct.pack(">II", 2049, len(data))
        name = mnist.FILES[key].replace(".idx", "-idx") if dash else mnist.FILES[key]
        (folder / name).write_bytes(head + data.tobytes())
    return folder


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("mnist"))


def test_loader_reads_the_four_idx_files_and_checks_they_are_mnist(fake, tmp_path):
    train_x, train_y, test_x, test_y = mnist.load_mnist(fake)
    assert train_x.shape == (60000, 28, 28) and test_x.shape == (10000, 28, 28) and train_x.dtype == np.uint8
    assert tuple(np.bincount(train_y)) == mnist.DIGIT_COUNTS["train"]
    assert mnist.load_mnist(_write(tmp_path / "dash", dash=True))[1].shape == (60000,)  # -idx3-ubyte spelling
    wrong = np.repeat(np.arange(10), 6000).astype(np.uint8)  # 60,000 labels, but not MNIST's counts
    with pytest.raises(DataError, match="the train labels count .* per digit; MNIST's are"):
        mnist.load_mnist(_write(tmp_path / "other", labels_train=wrong))
    (tmp_path / "other" / mnist.FILES["test_labels"]).write_bytes(b"\0\0\x08\x01")
    with pytest.raises(DataError, match="t10k-labels.idx1-ubyte: expected an idx file with magic 2049"):
        mnist.load_mnist(tmp_path / "other")
    with pytest.raises(MissingFileError, match="expected MNIST's four idx files"):
        mnist.load_mnist(tmp_path / "nothing")


def test_split_is_disjoint_and_seeded():
    tr, va = mnist.split(60000, 3)
    assert len(tr) == 50000 and len(va) == 10000 and not set(tr) & set(va)
    assert np.array_equal(tr, mnist.split(60000, 3)[0]) and not np.array_equal(tr, mnist.split(60000, 4)[0])


def test_quadratics_are_every_product_i_le_j_and_pca_inputs_are_fitted_on_the_training_rows():
    z = np.arange(1, 4, dtype=np.float32)[None]  # 1, 2, 3
    assert mnist.quadratics(z).tolist() == [[1, 2, 3, 4, 6, 9]]
    assert mnist.quadratics(np.ones((2, 30), np.float32)).shape == (2, 465)  # the thesis' 30 PCA + quadratics
    rng = np.random.default_rng(1)
    fit = rng.integers(0, 256, (200, 28, 28)).astype(np.uint8)
    other = rng.integers(0, 256, (50, 28, 28)).astype(np.uint8)
    a, b = mnist.inputs("pca5", fit, other)
    assert a.shape == (200, 15) and b.shape == (50, 15)
    np.testing.assert_allclose(a.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(a.std(0), 1, atol=1e-3)
    none = mnist.inputs("none", fit)[0]
    assert none.shape == (200, 784) and none.max() <= 1.0
    with pytest.raises(DataError, match="expected none or pcaK"):
        mnist.inputs("pca0", fit)


def test_base_pairs_are_half_one_digit_half_two_digits():
    labels = np.random.default_rng(2).integers(0, 10, 500)
    pairs, same = mnist.base_pairs(labels, 300, seed=0)
    assert pairs.shape == (600, 2) and same.tolist() == [1.0] * 300 + [0.0] * 300
    one = labels[pairs[:300, 0]] == labels[pairs[:300, 1]]
    two = labels[pairs[300:, 0]] != labels[pairs[300:, 1]]
    assert one.all() and two.all() and (pairs[:300, 0] != pairs[:300, 1]).all()


@pytest.mark.parametrize("spec,want", [("none:1000", ("none", (1000,))), ("pca40:1000-1000", ("pca40", (1000, 1000))),
                                       ("none:", ("none", ()))])
def test_net_specs(spec, want):
    assert mnist.parse_net(spec) == want


@pytest.mark.parametrize("spec", ["none", "pca:60", "none:60-x", "raw:60", "none:0"])
def test_a_bad_net_spec_is_an_error_naming_the_flag(spec):
    with pytest.raises(DataError, match="--nets"):
        mnist.parse_net(spec)


@pytest.mark.slow
def test_quick_run_trains_classifies_and_writes_its_table(fake, tmp_path, capsys):
    assert mnist.main(["--mnist", str(fake), "--out", str(tmp_path), "--quick", "--nets", "none:16,pca8:"]) == 0
    saved = json.loads((tmp_path / "mnist.json").read_text())
    assert [r["architecture"] for r in saved["rows"]] == ["784-16-30-1", "36-20-1"]
    assert all(0 <= r["test_error"] <= 100 and np.isfinite(r["loss"]) for r in saved["rows"])
    assert saved["rows"][0]["test_error"] < 50  # the stand-in's bands are learnable from similarity labels
    assert "| none:16 | 784-16-30-1 | 1 | 1 |" in saved["table"]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["benchmark"] == "mnist"
