"""benchmarks/flukes/outline_variants.py: a variant read by name, and its table paired against the first variant."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.flukes import outline_variants  # noqa: E402


def test_a_variant_is_read_by_name_and_a_bad_one_refused():
    assert outline_variants.parse_variant("base") == 0.0
    assert outline_variants.parse_variant("warp=0.25") == 0.25
    for bad in ("warp=1.5", "warp=x", "bend=0.2"):
        with pytest.raises(SystemExit, match="expected base or warp=A"):
            outline_variants.parse_variant(bad)


def test_the_table_pairs_each_split_seed_against_the_first_variant(capsys):
    def row(seed, variant, held):
        best = max(held, key=held.get)
        return {"split_seed": seed, "variant": variant, "best_steps": int(best), "best": held[best], "held": held}

    rows = [row(0, "base", {"1000": 0.50, "2000": 0.48}), row(0, "warp=0.3", {"1000": 0.51, "2000": 0.53}),
            row(1, "base", {"1000": 0.40, "2000": 0.44}), row(1, "warp=0.3", {"1000": 0.43, "2000": 0.42})]
    outline_variants.table(rows, ["base", "warp=0.3"])
    lines = capsys.readouterr().out.splitlines()
    warp = next(line for line in lines if line.startswith("| warp=0.3"))
    # best 0.53 against 0.50 and 0.43 against 0.44: +0.01 +- 0.0283; at 2000 batches +0.05 and -0.02
    assert "0.5300 (2000), 0.4300 (1000)" in warp and "+0.0100 +- 0.0283" in warp and "+0.0150 +- 0.0495" in warp
