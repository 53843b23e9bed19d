"""No network at run time: importing the toolkit and building the augmenter open no socket."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Every way out to the network goes through these; each records the call and refuses it.
_PROBE = """
import socket, sys
calls = []
def refuse(name):
    def f(*args, **kwargs):
        calls.append(name)
        raise OSError(f"network disabled by the test: {name}")
    return f
socket.socket.connect = refuse("connect")
socket.socket.connect_ex = refuse("connect_ex")
socket.create_connection = refuse("create_connection")
socket.getaddrinfo = refuse("getaddrinfo")
"""


def _run(body: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NO_ALBUMENTATIONS_UPDATE"}
    code = _PROBE + body + "\nprint('CALLS', calls)\n"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_importing_whale_and_augmenting_opens_no_socket():
    res = _run("""
import numpy as np
import whale
from whale.data.augment import build_augmenter
import whale.training.cli, whale.ensemble.cli, whale.kaggle.entry
aug = build_augmenter(32, 3)
out = aug(np.zeros((40, 40, 3), np.uint8), rng=np.random.default_rng(0))
assert out.shape == (32, 32, 3), out.shape
""")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "CALLS []" in res.stdout, res.stdout + res.stderr[-2000:]


def test_the_probe_sees_albumentations_reach_for_the_network_without_whale():
    """The detector works: albumentations imported on its own (no whale first) tries to connect."""
    res = _run("import albumentations")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "CALLS []" not in res.stdout, res.stdout
