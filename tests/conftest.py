"""Test set-up: TensorFlow pinned to the CPU with few threads, everything seeded.

The environment variables must be set before TensorFlow is imported anywhere.
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


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    yield


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, imported once, limited to 2 threads."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(2)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        pass  # already initialised by an earlier import; the limits are then fixed
    tf.random.set_seed(0)
    return tf
