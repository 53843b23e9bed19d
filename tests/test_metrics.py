"""MAP@5 and top-k accuracy against the paper's Table 1 and hand-built cases."""

import numpy as np
import pytest

from whale.metrics import map_at_k, precision_at_k_per_image, top_k_accuracy

PRED = ["w1", "w2", "w3", "w4", "w5"]


@pytest.mark.parametrize(
    "truth, expected",
    [("w1", 1.0), ("w2", 1 / 2), ("w3", 1 / 3), ("w4", 1 / 4), ("w5", 1 / 5), ("w9", 0.0)],
)
def test_table1_rank_scores(truth, expected):
    assert map_at_k([PRED], [truth]) == pytest.approx(expected)
    assert map_at_k([" ".join(PRED)], [truth]) == pytest.approx(expected)


def test_mean_over_images():
    truths = ["w1", "w2", "w3", "w4", "w5", "w9"]
    expected = (1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 6
    assert map_at_k([PRED] * 6, truths) == pytest.approx(expected)
    np.testing.assert_allclose(
        precision_at_k_per_image([PRED] * 6, truths), [1, 1 / 2, 1 / 3, 1 / 4, 1 / 5, 0]
    )


def test_duplicates_count_once_and_k_cuts():
    assert map_at_k([["a", "a", "b", "b", "c"]], ["b"]) == pytest.approx(1 / 3)
    assert map_at_k([["a", "b", "c", "d", "e", "f"]], ["f"]) == 0.0
    assert map_at_k([["a", "b", "c"]], ["c"], k=2) == 0.0
    assert map_at_k([["new_whale", "w1"]], ["new_whale"]) == 1.0


def test_top_k_accuracy():
    truths = ["w1", "w3", "w5", "w9"]
    assert top_k_accuracy([PRED] * 4, truths, 1) == pytest.approx(0.25)
    assert top_k_accuracy([PRED] * 4, truths, 3) == pytest.approx(0.5)
    assert top_k_accuracy([PRED] * 4, truths, 5) == pytest.approx(0.75)


def test_length_mismatch_names_both():
    with pytest.raises(ValueError, match="3.*2"):
        map_at_k([PRED] * 3, ["w1", "w2"])
    with pytest.raises(ValueError, match="k"):
        map_at_k([PRED], ["w1"], k=0)


def test_empty_is_zero():
    assert map_at_k([], []) == 0.0
