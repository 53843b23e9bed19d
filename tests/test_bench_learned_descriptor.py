"""benchmarks/flukes/learned_descriptor.py on a tiny fake source: trains, checks its photos against the queries,
compares."""
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

cv2 = pytest.importorskip("cv2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.flukes import learned_descriptor  # noqa: E402
from tests.test_keypoints import pattern, warp  # noqa: E402


def patterned_source(root: Path, counts) -> Path:
    (root / "train").mkdir(parents=True)
    rows = []
    for i, n in enumerate(counts):
        for j in range(n):
            name = f"{i:03d}{j:02d}.jpg"
            cv2.imwrite(str(root / "train" / name), warp(pattern(i), 10 * i + j) if j else pattern(i))
            rows.append((name, f"w_{i:03d}"))
    pd.DataFrame(rows, columns=["Image", "Id"]).to_csv(root / "train.csv", index=False)
    return root


@pytest.mark.slow  # about 3 minutes: training, and learned extraction in spawned workers
def test_learned_descriptor_benchmark_compares_with_rootsift(tmp_path, monkeypatch):
    src = patterned_source(tmp_path / "src", counts=(1,) * 6 + (3,) * 6 + (4,) * 3)
    monkeypatch.setattr(learned_descriptor.common, "shared_data", lambda *a: src)
    lines = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: lines.append(" ".join(map(str, a))))
    out = tmp_path / "out"
    assert learned_descriptor.main(["--out", str(out), "--ids", "1", "--epochs", "1", "--pairs", "300"]) == 0
    rows = json.loads((out / "descriptor.json").read_text())
    assert [r["setting"] for r in rows] == ["RootSIFT", "learned, tgloss, 1 epochs", "the same network untrained"]
    assert all(0 <= r["map5_known"] <= 1 for r in rows)
    assert (out / "descriptor_tgloss" / "descriptor.weights.h5").is_file()
    assert json.loads(lines[-1])["benchmark"] == "learned_descriptor"
    assert not np.isnan(rows[0]["top1"])
