"""benchmarks/seeds/catalogue.py's scale phase: exact product vs FAISS, built per match and stored."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.seeds import catalogue  # noqa: E402


def test_scale_only_times_exact_faiss_and_the_stored_index(tmp_path, capsys):
    pytest.importorskip("faiss")
    assert catalogue.main(["--out", str(tmp_path), "--scale-only", "--sizes", "300,600", "--dim", "16",
                           "--queries", "5", "--pool", "20"]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())["scale_embedding"]
    assert [r["size"] for r in rows] == [300, 600]
    for r in rows:
        assert r["exact_s"] > 0 and r["faiss_build_s"] > 0 and r["faiss_stored_s"] > 0
        assert r["stored_same"] and 0.5 <= r["faiss_recall10"] <= 1
        assert np.isclose(r["stored_ratio"], r["exact_s"] / r["faiss_stored_s"])
    assert len(list((tmp_path / "index").glob("faiss-hnsw-*.index"))) == 1  # the last size's; the first deleted
    out = capsys.readouterr().out
    assert "stored index" in out and json.loads(out.strip().splitlines()[-1])["benchmark"] == "catalogue"
