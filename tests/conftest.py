"""Test set-up: the Keras backend on the CPU with few threads, everything seeded.

The backend is ``KERAS_BACKEND`` (``tensorflow`` unless set; ``make test`` runs part of the
suite again under ``jax``). The environment variables must be set before any backend is
imported. Tests take the ``backend`` fixture to run on whichever backend this is, and the
``tf`` fixture only where they need TensorFlow itself (skipped on other backends).
"""
import os

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("OMP_NUM_THREADS", "2")

import random

import numpy as np
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a case that takes more than ~20 s on 2 cores")
    config.addinivalue_line("markers", "backend: depends on the Keras backend; `make test` runs these again under JAX")


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    yield


@pytest.fixture(scope="session")
def backend():
    """The Keras backend's name, its threads limited to 2 and its random state seeded.

    TensorFlow is imported only when it is the backend.
    """
    import keras

    name = keras.backend.backend()
    if name == "tensorflow":
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(2)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:
            pass  # already initialised by an earlier import; the limits are then fixed
        tf.random.set_seed(0)
    keras.utils.set_random_seed(0)
    return name


@pytest.fixture(scope="session")
def tf(backend):
    """TensorFlow itself, for tests of TensorFlow-only features; skipped on other backends."""
    if backend != "tensorflow":
        pytest.skip(f"needs the TensorFlow backend (KERAS_BACKEND={backend})")
    import tensorflow as tf

    return tf


TINY_RUN = {"model": {"branch": "tiny", "weights": None, "channels": 3, "head_mid": 8, "head_hidden": 0},
            "batch_size": 16, "mining_interval": 2, "augment": False, "workers": 1}
"""Settings of the tiny runs of the pre-training, snapshot and Kaggle tests: only the stages differ."""


@pytest.fixture(scope="session")
def tiny_config():
    """``tiny_config(name, seed, stages)``: the YAML text of a :data:`TINY_RUN` config with these stages."""
    def make(name: str, seed: int, stages: list[dict]) -> str:
        from whale.config import config_from_dict

        return config_from_dict({"name": name, "seed": seed, **TINY_RUN, "stages": stages}).to_yaml()

    return make


ONE_EPOCH_RUN = {"seed": 1, "batch_size": 32, "mining_interval": 1, "workers": 1,
                 "model": {"branch": "tiny", "weights": None, "channels": 3, "head_mid": 8, "head_hidden": 0},
                 "stages": [{"epochs": 1, "k": 1000.0, "lr": 1.0e-3, "image_size": 32, "dataset": "main"}]}
"""The one-epoch tiny run the explain, catalogue and review tests score with."""


def train_tiny_run(root, name: str, n_ids: int = 10, seed: int = 4, size: int = 96):
    """``(data, run)``: a synthetic competition under ``root/data`` and :data:`ONE_EPOCH_RUN` trained
    on its fold 0 into ``root/run``."""
    from pathlib import Path

    from whale.config import config_from_dict
    from whale.data.synth import generate
    from whale.training.trainer import train_fold

    root = Path(root)
    data = generate(root / "data", n_ids=n_ids, seed=seed, size=size, progress=False)
    train_fold(config_from_dict({"name": name, **ONE_EPOCH_RUN}), data, 0, root / "run", overwrite=True,
               verbose=0, log=lambda m: None)
    return data, root / "run"
