"""Backend neutrality: TensorFlow only on its own backend, checkpoints that cross backends,
TensorBoard scalars without TensorFlow, the precision key.

The cross-backend cases run each backend in its own subprocess (a process has one Keras
backend); they are skipped when JAX is not installed.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

needs_jax = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="JAX is not installed")


def _run(script: str, backend: str, *args, extra_env=None, timeout=400) -> dict:
    """Run ``script`` under ``KERAS_BACKEND=backend``; the dict it prints after ``RESULT ``."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "2",
           "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT), **(extra_env or {})}
    res = subprocess.run([sys.executable, "-c", script, *map(str, args)], env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    line = next(l for l in res.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


NO_TF_SCRIPT = r"""
import json, sys


class NoTensorFlow:  # as on a machine without TensorFlow (the GPU machine has none)
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError("TensorFlow blocked by the test")


sys.meta_path.insert(0, NoTensorFlow())
import numpy as np
from whale.models import load_model, save_model
from whale.models import HeadScorer, build_branch, build_head, build_siamese, compile_siamese
from whale.inference.features import compute_features
from whale.training.distribute import describe, strategy_scope
from whale.training.runlog import TensorBoardLog

with strategy_scope("auto") as strategy:
    branch = build_branch("tiny", (32, 32, 3))
    model = build_siamese(branch, build_head(int(branch.output_shape[-1]), mid=4))
    compile_siamese(model, 1e-3)
x = np.random.default_rng(0).uniform(0, 255, (8, 32, 32, 3)).astype("float32")
model.fit([x, x[::-1]], np.ones((8, 1), "float32"), epochs=1, verbose=0)
save_model(model, sys.argv[1] + "/model.keras")
model = load_model(sys.argv[1] + "/model.keras")
branch = model.get_layer("branch")
f = compute_features(branch, x, batch_size=4)
s = HeadScorer(model.get_layer("head")).matrix(f, progress=False)
TensorBoardLog(sys.argv[1] + "/tb", log=print).write({"epoch": 1, "loss": 0.5, "lr": 1e-3})
print("RESULT " + json.dumps({"tensorflow": "tensorflow" in sys.modules, "strategy": describe(strategy),
                              "shape": list(s.shape), "dtype": str(s.dtype)}))
"""


@needs_jax
def test_jax_backend_trains_saves_and_scores_without_tensorflow(tmp_path):
    out = _run(NO_TF_SCRIPT, "jax", tmp_path)
    assert out == {"tensorflow": False, "strategy": "SingleDevice with 1 replica(s)", "shape": [8, 8],
                   "dtype": "float32"}
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert (tmp_path / "model.keras").is_file()


TRAIN_SCRIPT = r"""
import json, sys
import numpy as np
from whale.config import config_from_dict
from whale.models.checkpoint import load_checkpoint
from whale.training.trainer import train_fold

data, run, max_epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = config_from_dict({
    "name": "cross", "seed": 0, "batch_size": 16, "mining_interval": 2, "workers": 1,
    "model": {"branch": "tiny", "channels": 3, "head_mid": 8},
    "stages": [{"epochs": 1, "k": 1000.0, "lr": 1.0e-3, "image_size": 32, "dataset": "main"},
               {"epochs": 1, "k": 0.5, "lr": 1.0e-3, "image_size": 32, "dataset": "main"}]})
before = None
if max_epochs > 1:  # the resumed call: the checkpoint as this backend reads it
    model, state = load_checkpoint(run + "/checkpoints", "last")
    before = float(sum(np.abs(w).sum() for w in model.get_weights()))
result = train_fold(cfg, data, 0, run, resume=True, max_epochs=max_epochs, verbose=0, log=print)
model, _ = load_checkpoint(run + "/checkpoints", "last")
print("RESULT " + json.dumps({"finished": result.finished, "epochs": result.epochs_done, "before": before,
                              "weights": float(sum(np.abs(w).sum() for w in model.get_weights()))}))
"""


@needs_jax
@pytest.mark.slow
@pytest.mark.parametrize("first,second", [("tensorflow", "jax"), ("jax", "tensorflow")])
def test_checkpoint_written_under_one_backend_resumes_under_the_other(tmp_path, first, second):
    from whale.data.synth import generate

    data = generate(tmp_path / "data", n_ids=12, seed=1, size=64, progress=False)
    run = tmp_path / "run"
    a = _run(TRAIN_SCRIPT, first, data, run, 1)
    assert a["finished"] is False and a["epochs"] == 1
    b = _run(TRAIN_SCRIPT, second, data, run, 5)
    assert b["before"] == pytest.approx(a["weights"], rel=1e-6)  # the same weights, read back
    assert b["finished"] is True and b["epochs"] == 2
    assert (run / "scores" / "test.npz").is_file()


def test_tensorboard_scalars_are_written_and_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from whale.training.runlog import TensorBoardLog

    tb = TensorBoardLog(tmp_path, log=lambda *_: None)
    tb.write({"epoch": 1, "loss": 0.5, "accuracy": "", "val_map5": 0.25, "k": 10.0, "lr": 1e-3})
    tb.write({"epoch": 2, "loss": 0.25, "accuracy": 0.75, "val_map5": "", "k": 5.0, "lr": 1e-3})
    tb.close()
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 0.5), (2, 0.25)]
    assert [e.step for e in acc.Scalars("accuracy")] == [2]
    assert [e.step for e in acc.Scalars("val_map5")] == [1]


def test_tensorboard_missing_writer_is_skipped_with_one_line(tmp_path, monkeypatch):
    from whale.training.runlog import TensorBoardLog

    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
    lines = []
    tb = TensorBoardLog(tmp_path / "tb", log=lines.append)
    for epoch in (1, 2, 3):
        tb.write({"epoch": epoch, "loss": 0.5})
    assert len(lines) == 1 and "scalars not written" in lines[0]
    assert not (tmp_path / "tb").exists()


def test_precision_key_is_validated_and_defaults_to_float32():
    from whale.config import config_from_dict
    from whale.core.errors import ConfigError

    base = {"name": "p", "stages": [{"epochs": 1, "k": 1.0, "lr": 1.0e-3, "image_size": 32}]}
    assert config_from_dict(base).precision == "float32"
    assert config_from_dict({**base, "precision": "mixed_bfloat16"}).precision == "mixed_bfloat16"
    with pytest.raises(ConfigError, match="precision"):
        config_from_dict({**base, "precision": "float64"})


@pytest.mark.backend
def test_mixed_precision_head_outputs_float32_and_scores_match(backend):
    import keras

    from whale.models import HeadScorer, build_head, precision_scope

    with precision_scope("mixed_bfloat16"):
        head = build_head(16, mid=8)
    assert keras.mixed_precision.global_policy().name == "float32"  # restored
    assert head.get_layer("per_feature").compute_dtype == "bfloat16"
    rng = np.random.default_rng(0)
    x, y = (np.maximum(rng.normal(size=(20, 16)), 0).astype("float32") for _ in range(2))
    out = head.predict([x, y], verbose=0)
    assert out.dtype == np.float32
    scorer = HeadScorer(head)
    assert scorer.exact_formula  # the float32 formula, checked at bfloat16's precision
    got = scorer.pairs(x, y)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, out[:, 0], atol=2e-2)
