"""Multi-device training: a data-parallel strategy over two CPU devices matches one device.

TensorFlow: MirroredStrategy over two logical CPUs. JAX: keras.distribution.DataParallel over
two host devices (``XLA_FLAGS=--xla_force_host_platform_device_count=2``). Devices can only be
configured before the backend initialises them, and other test modules initialise them in
this process, so each comparison runs in a subprocess.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import importlib.util

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
tf.config.threading.set_intra_op_parallelism_threads(2)

import keras
from whale.training.distribute import describe, get_strategy, strategy_scope
from whale.models import build_branch, build_head, build_siamese, compile_siamese


def build():
    branch = build_branch("tiny", (32, 32, 3))
    return build_siamese(branch, build_head(int(branch.output_shape[-1]), mid=8))


rng = np.random.default_rng(0)
xa, xb = (rng.uniform(0, 255, (8, 32, 32, 3)).astype("float32") for _ in range(2))
y = (rng.uniform(size=(8, 1)) > 0.5).astype("float32")
# The global batch is two copies of 8 pairs: each of the 2 replicas gets one copy, so its
# BatchNorm batch statistics equal those of the whole batch on one device.
xa, xb, y = np.concatenate([xa, xa]), np.concatenate([xb, xb]), np.concatenate([y, y])


class Batches(keras.utils.PyDataset):  # the trainer feeds a PyDataset too
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return (xa, xb), y


keras.utils.set_random_seed(1)
w0 = build().get_weights()
out = {"auto": describe(get_strategy("auto"))}
for name in ("default", "mirrored"):
    with strategy_scope(name) as strategy:
        model = build()
        model.set_weights(w0)
        compile_siamese(model, 1e-3)
    hist = model.fit(Batches(), epochs=2, verbose=0, shuffle=False)
    out[name] = {"replicas": strategy.num_replicas_in_sync, "describe": describe(strategy),
                 "loss": hist.history["loss"],
                 "eval": float(model.evaluate([xa, xb], y, batch_size=16, verbose=0)[0])}
print("RESULT " + json.dumps(out))
"""


def test_mirrored_over_two_cpus_gives_the_same_loss_as_one_device(tf, tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
           "KERAS_BACKEND": "tensorflow", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    line = next(l for l in res.stdout.splitlines() if l.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    assert out["default"]["replicas"] == 1
    assert out["mirrored"]["replicas"] == 2 and "CPU:1" in out["mirrored"]["describe"]
    assert out["auto"].startswith("_DefaultDistributionStrategy")  # no GPU: auto = default
    assert out["default"]["loss"][0] > out["default"]["loss"][-1]  # it trained
    for a, b in zip(out["default"]["loss"], out["mirrored"]["loss"]):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-5)
    assert out["default"]["eval"] == pytest.approx(out["mirrored"]["eval"], rel=1e-4, abs=1e-5)


def test_unknown_strategy_names_the_valid_ones():
    from whale.training.distribute import get_strategy

    with pytest.raises(ValueError, match="auto, mirrored, default"):
        get_strategy("tpu")


TRAIN_SCRIPT = r"""
import sys
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from whale.config import config_from_dict
from whale.data.synth import generate
from whale.training.trainer import train_fold

data = generate(sys.argv[1] + "/data", n_ids=16, seed=2, size=96, progress=False)
cfg = config_from_dict({
    "name": "mirrored", "seed": 0, "strategy": "mirrored", "batch_size": 16, "mining_interval": 2,
    "model": {"branch": "tiny", "channels": 3, "head_mid": 8},
    "stages": [{"epochs": 2, "k": 1000.0, "lr": 1.0e-3, "image_size": 32, "dataset": "main"},
               {"epochs": 1, "k": 0.5, "lr": 1.0e-3, "image_size": 40, "dataset": "main"}]})
result = train_fold(cfg, data, 0, sys.argv[1] + "/run", verbose=0)
print("RESULT", result.finished, result.epochs_done)
try:  # batching: images indexes the whole batch's images: one device only
    train_fold(config_from_dict({**cfg.to_dict(), "batching": "images"}), data, 0, sys.argv[1] + "/run_images", verbose=0)
except Exception as err:
    print("IMAGES", type(err).__name__, err)
"""


def test_train_fold_under_mirrored_strategy_mines_trains_and_scores(tf, tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2",
           "KERAS_BACKEND": "tensorflow", "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", TRAIN_SCRIPT, str(tmp_path)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "RESULT True 3" in res.stdout
    assert "MirroredStrategy" in res.stdout
    assert (tmp_path / "run" / "scores" / "test.npz").exists()
    assert "IMAGES ConfigError mirrored: batching: images needs one device" in res.stdout
    assert "strategy 'mirrored' gives 2 replicas: set strategy: default" in res.stdout


JAX_SCRIPT = r"""
import json
import numpy as np
import keras
from whale.training.distribute import describe, get_strategy, strategy_scope
from whale.models import build_branch, build_head, build_siamese, compile_siamese

rng = np.random.default_rng(0)
xa, xb = (rng.uniform(0, 255, (8, 32, 32, 3)).astype("float32") for _ in range(2))
y = (rng.uniform(size=(8, 1)) > 0.5).astype("float32")
# Two copies of 8 pairs: each device's BatchNorm statistics equal those of the whole batch.
xa, xb, y = np.concatenate([xa, xa]), np.concatenate([xb, xb]), np.concatenate([y, y])
keras.utils.set_random_seed(1)
branch = build_branch("tiny", (32, 32, 3))
w0 = build_siamese(branch, build_head(int(branch.output_shape[-1]), mid=8)).get_weights()
out = {"auto": describe(get_strategy("auto"))}
for name in ("default", "mirrored"):
    with strategy_scope(name) as strategy:
        branch = build_branch("tiny", (32, 32, 3))
        model = build_siamese(branch, build_head(int(branch.output_shape[-1]), mid=8))
        model.set_weights(w0)
        compile_siamese(model, 1e-3)
        hist = model.fit([xa, xb], y, batch_size=16, epochs=2, verbose=0, shuffle=False)
    out[name] = {"replicas": strategy.num_replicas_in_sync, "describe": describe(strategy),
                 "loss": hist.history["loss"]}
print("RESULT " + json.dumps(out))
"""


@pytest.mark.backend
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="JAX is not installed")
def test_jax_data_parallel_over_two_cpu_devices_gives_the_same_loss_as_one_device(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "KERAS_BACKEND": "jax", "PYTHONPATH": str(ROOT),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    res = subprocess.run([sys.executable, "-c", JAX_SCRIPT], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    line = next(l for l in res.stdout.splitlines() if l.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    assert out["auto"] == "SingleDevice with 1 replica(s)"  # no GPU: auto = one device
    assert out["default"]["replicas"] == 1
    assert out["mirrored"]["replicas"] == 2 and out["mirrored"]["describe"].startswith("DataParallel with 2")
    assert out["default"]["loss"][0] > out["default"]["loss"][-1]  # it trained
    for a, b in zip(out["default"]["loss"], out["mirrored"]["loss"]):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-5)
