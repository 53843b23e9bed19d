"""Tests for whale.folds: the paper's fold rules, on the real id histogram and tiny frames."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from whale import NEW_WHALE
from whale.core.errors import DataError
from whale.data.folds import assign_folds, fold_summary, main, split
from whale.data.synth import REAL_IMAGES_PER_ID

HISTOGRAM = Path(__file__).resolve().parents[2] / "shared" / "data" / "humpback2019_images_per_id.csv"


def _frame(sizes: list[int], n_new: int) -> pd.DataFrame:
    """Fake train.csv: one id per entry of ``sizes`` with that many images, plus new_whale."""
    rows = [(f"w{i}_{j}.jpg", f"w{i}") for i, n in enumerate(sizes) for j in range(n)]
    rows += [(f"nw_{j}.jpg", NEW_WHALE) for j in range(n_new)]
    return pd.DataFrame(rows, columns=["Image", "Id"])


def _check_rules(df: pd.DataFrame, folds: pd.Series, n_folds: int = 4) -> None:
    """Assert every rule of the paper's split (and of split())."""
    assert folds.index.equals(df.index) and folds.dtype == np.int64
    assert set(folds.unique()) <= set(range(-1, n_folds))
    is_new = df["Id"] == NEW_WHALE
    known = df[~is_new]
    for _, f in folds[~is_new].groupby(known["Id"]):
        n = len(f)
        if n <= 2:
            assert (f == -1).all()
        elif n == 3:
            assert (f >= 0).all() and f.nunique() == 3
        else:
            assert (f >= 0).all()
            per_fold = np.bincount(f, minlength=n_folds)
            assert per_fold.max() - per_fold.min() <= 1  # round-robin
            if n >= n_folds:
                assert per_fold.min() >= 1
    known_per_fold = np.bincount(folds[~is_new][folds[~is_new] >= 0], minlength=n_folds)
    new_per_fold = np.bincount(folds[is_new][folds[is_new] >= 0], minlength=n_folds)
    assert known_per_fold.max() - known_per_fold.min() <= 2
    if is_new.sum() >= np.rint(known_per_fold / 3).sum():
        np.testing.assert_allclose(new_per_fold, known_per_fold / 3, atol=1)
    for k in range(n_folds):
        train, val = split(df, folds, k)
        assert (val.index == df.index[folds == k]).all()
        assert not (train["Id"] == NEW_WHALE).any()
        assert set(train.index).isdisjoint(val.index)
        assert len(train) + (val["Id"] != NEW_WHALE).sum() == len(known)
        # every known validation id keeps at least one image in training
        assert set(val.loc[val["Id"] != NEW_WHALE, "Id"]) <= set(train["Id"])


@pytest.fixture(scope="module")
def real_frame():
    # The real competition's long tail, as shipped with the synthetic generator (no skip without ../shared).
    sizes = [size for size, count in sorted(REAL_IMAGES_PER_ID.items()) for _ in range(count)]
    df = _frame(sizes, 9664)
    assert df["Id"].nunique() == 5004 + 1 and len(df) == 25361
    return df


def test_shipped_histogram_equals_the_shared_file():
    if not HISTOGRAM.is_file():
        pytest.skip(f"{HISTOGRAM} not present (the shipped copy is used by the other tests)")
    hist = pd.read_csv(HISTOGRAM)
    assert dict(zip(hist["images_per_id"].tolist(), hist["number_of_ids"].tolist())) == REAL_IMAGES_PER_ID


def test_real_histogram(real_frame):
    folds = assign_folds(real_frame, seed=0)
    _check_rules(real_frame, folds)
    is_new = real_frame["Id"] == NEW_WHALE
    for k in range(4):
        share = (is_new & (folds == k)).sum() / (folds == k).sum()
        assert abs(share - 0.25) < 0.01
    text = fold_summary(real_frame, folds)
    assert "new_whale" in text and len(text.splitlines()) == 1 + 5 + 1


def test_deterministic_and_row_order_free(real_frame):
    a = assign_folds(real_frame, seed=3)
    pd.testing.assert_series_equal(a, assign_folds(real_frame, seed=3))
    assert not a.equals(assign_folds(real_frame, seed=4))
    shuffled = real_frame.sample(frac=1.0, random_state=0)
    b = assign_folds(shuffled, seed=3)
    pd.testing.assert_series_equal(a, b.loc[a.index])


def test_tiny_frame_by_hand():
    df = _frame([1, 2, 3, 4, 5, 8], n_new=10)
    folds = assign_folds(df)
    _check_rules(df, folds)
    f = dict(zip(df["Image"], folds))
    assert f["w0_0.jpg"] == -1 and f["w1_0.jpg"] == f["w1_1.jpg"] == -1
    assert len({f[f"w2_{j}.jpg"] for j in range(3)} - {-1}) == 3
    assert sorted(f[f"w3_{j}.jpg"] for j in range(4)) == [0, 1, 2, 3]
    assert sorted(np.bincount([f[f"w5_{j}.jpg"] for j in range(8)])) == [2, 2, 2, 2]
    # 20 known validation images, 5 per fold -> round(5 / 3) = 2 new_whale per fold
    nw = folds[df["Id"] == NEW_WHALE]
    assert np.bincount(nw[nw >= 0], minlength=4).tolist() == [2, 2, 2, 2]
    assert (nw == -1).sum() == 2


def test_many_three_image_ids_balance():
    df = _frame([3] * 40, n_new=0)
    folds = assign_folds(df, seed=1)
    _check_rules(df, folds)
    assert np.bincount(folds, minlength=4).tolist() == [30, 30, 30, 30]


def test_scarce_new_whale_shared_out():
    df = _frame([4] * 30, n_new=8)
    folds = assign_folds(df)
    _check_rules(df, folds)
    nw = folds[df["Id"] == NEW_WHALE]
    assert (nw >= 0).sum() == 8 and np.bincount(nw, minlength=4).tolist() == [2, 2, 2, 2]


def test_only_small_ids():
    df = _frame([1, 2, 2, 1], n_new=3)
    folds = assign_folds(df)
    assert (folds == -1).all()
    train, val = split(df, folds, -1)
    assert len(val) == 0 and len(train) == 6


def test_split_all():
    df = _frame([1, 3, 5], n_new=4)
    folds = assign_folds(df)
    train, val = split(df, folds, -1)
    assert val.empty and list(val.columns) == ["Image", "Id"]
    assert train.index.equals(df.index[df["Id"] != NEW_WHALE])


def test_other_fold_counts():
    df = _frame([3, 4, 5, 6, 7], n_new=20)
    _check_rules(df, assign_folds(df, n_folds=5), n_folds=5)
    with pytest.raises(ValueError, match="n_folds"):
        assign_folds(df, n_folds=2)


def test_bad_inputs():
    df = _frame([3, 4], n_new=2)
    with pytest.raises(DataError, match="missing column.*Id"):
        assign_folds(df.rename(columns={"Id": "id"}))
    with pytest.raises(DataError, match="index"):
        assign_folds(pd.concat([df, df]))
    folds = assign_folds(df)
    with pytest.raises(ValueError, match="k=-2"):
        split(df, folds, -2)
    with pytest.raises(ValueError, match="same index"):
        split(df, folds.iloc[1:], 0)


def test_cli(tmp_path, capsys):
    df = _frame([1, 2, 3, 4, 5], n_new=6)
    df.to_csv(tmp_path / "train.csv", index=False)
    assert main(["--data", str(tmp_path), "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["fold", "known", "new_whale", "nw", "share", "ids"]
    assert len(out.splitlines()) == 1 + 5 + 1
    assert main(["--data", str(tmp_path / "nowhere")]) == 2
    assert "nowhere/train.csv: file not found" in capsys.readouterr().err


def test_empty_fold_listed_and_split():
    df = _frame([3], n_new=1)
    folds = assign_folds(df)
    empty = int(np.setdiff1d(np.arange(4), folds)[0])
    train, val = split(df, folds, empty)
    assert val.empty and len(train) == 3
    lines = fold_summary(df, folds, n_folds=4).splitlines()
    assert [line.split()[0] for line in lines[1:6]] == ["-1*", "0", "1", "2", "3"]
