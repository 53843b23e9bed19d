"""benchmarks/seeds/starter.py's Omniglot catalogue: the shared alphabets stay out, train and test share no bytes."""

import io
import sys
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.seeds import starter  # noqa: E402
from whale import NEW_WHALE  # noqa: E402


def _zip(path: Path, alphabets: dict[str, int], same_within_character: bool = False) -> Path:
    """A zip laid out as images_background_small2: ALPHABET/characterNN/NNNN_DD.png, 6 drawers."""
    rng = np.random.default_rng(0)
    with zipfile.ZipFile(path, "w") as z:
        for alphabet, n_chars in alphabets.items():
            for c in range(1, n_chars + 1):
                pixels = rng.integers(0, 255, (10, 10), dtype=np.uint8)
                for d in range(1, 7):
                    if not same_within_character:
                        pixels = rng.integers(0, 255, (10, 10), dtype=np.uint8)
                    buf = io.BytesIO()
                    Image.fromarray(pixels).save(buf, format="PNG")
                    z.writestr(f"images_background_small2/{alphabet}/character{c:02d}/{c:04d}_{d:02d}.png",
                               buf.getvalue())
    return path


@pytest.fixture
def small_counts(monkeypatch):
    monkeypatch.setattr(starter, "N_KNOWN", 3)
    monkeypatch.setattr(starter, "N_NEW_TRAIN", 1)
    monkeypatch.setattr(starter, "N_NEW_TEST", 1)


def test_omniglot_catalogue_leaves_out_greek_and_latin(tmp_path, small_counts):
    z = _zip(tmp_path / "s2.zip", {"Greek": 3, "Latin": 3, "Foo": 3, "Bar": 3})
    comp = starter.omniglot_catalogue(z, tmp_path / "out", seed=0)
    train, sol = pd.read_csv(comp / "train.csv"), pd.read_csv(comp / "test_solution.csv")
    known = train[train["Id"] != NEW_WHALE]
    assert len(known) == 3 * starter.TRAIN_DRAWERS and known["Id"].nunique() == 3
    assert (train["Id"] == NEW_WHALE).sum() == 2 and (sol["Id"] == NEW_WHALE).sum() == 2
    assert set(sol.loc[sol["Id"] != NEW_WHALE, "Id"]) == set(known["Id"])
    assert not any(i.startswith(("Greek", "Latin")) for i in pd.concat([train["Id"], sol["Id"]]))
    with zipfile.ZipFile(z) as zf:
        shared = {zf.read(n) for n in zf.namelist() if n.split("/")[1] in starter.SHARED_ALPHABETS}
    written = {p.read_bytes() for p in (comp / "train").iterdir()} | {p.read_bytes() for p in (comp / "test").iterdir()}
    assert not written & shared


def test_omniglot_catalogue_refuses_an_image_in_both_train_and_test(tmp_path, small_counts):
    z = _zip(tmp_path / "s2.zip", {"Foo": 6}, same_within_character=True)
    with pytest.raises(ValueError, match="byte-identical in train/ and test/"):
        starter.omniglot_catalogue(z, tmp_path / "out", seed=0)
