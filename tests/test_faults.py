"""kill -9 anywhere: a tiny run killed at random moments and resumed equals an uninterrupted run.

The work is :mod:`benchmarks.speed.faults` in a fresh interpreter (it forks its attempts from one
process that imported TensorFlow but ran nothing, which a pytest process that already ran
TensorFlow cannot do safely). Two chains of kills run side by side: 3 kills per objective (the
paper's head, ArcFace) in `make test`, 20 in `make test-slow`.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("kills,objective", [(3, "head"), (3, "arcface"),
                                            pytest.param(20, "head", marks=pytest.mark.slow)])
def test_kills_leave_nothing_half_written_and_change_nothing(kills, objective, tmp_path):
    """The paper's head, and ArcFace (an embedding objective with its own trained class centres)."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed" / "faults.py"), "--out", str(tmp_path),
                           "--kills", str(kills), "--chains", "2", "--seed", "1", "--objective", objective],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["kills"] == kills
    assert result["problems"] == [], "\n".join(result["problems"])
    assert result["stale_temporary_files"] == 0
    assert proc.returncode == 0


def test_phase_of_names_where_a_kill_landed():
    sys.path.insert(0, str(ROOT))
    from benchmarks.speed.faults import phase_of

    assert phase_of("x\nmining the negatives of epochs 1-2 (K=1000)\n") == "mining"
    assert phase_of("epoch 2 (stage 1/2, 32px, K=1000, lr=0.001): 32 pairs") == "mid-epoch or validation"
    assert phase_of("epoch 2: validation MAP@5 0.5 at threshold 0.5") == "checkpoint writing"
    assert phase_of("scoring validation and test images with checkpoint 'best' into r/scores") == "scoring"
    assert phase_of("") == "start-up or resume"
