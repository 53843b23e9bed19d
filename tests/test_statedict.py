"""PyTorch checkpoints read without torch (whale.models.statedict).

``tests/data/torch/{zip,legacy}.pth`` were written once by torch 2.13 (``torch.save`` in its zip layout and with
``_use_new_zipfile_serialization=False``) from one state dict nested under ``state_dict`` beside an ``epoch``:
a parameter, a transposed (non-contiguous) tensor, float16, bfloat16 and int64 tensors, and a view with a storage
offset, every name prefixed ``module.``; ``expected.npz`` holds the same tensors as float32 NumPy arrays::

    sd = {"module.conv.weight": nn.Parameter(torch.randn(4, 3, 3, 3)), "module.fc.weight": torch.randn(5, 6).t(),
          "module.bn.running_var": torch.rand(4).half(), "module.bn.running_mean": torch.randn(4).to(torch.bfloat16),
          "module.bn.num_batches_tracked": torch.tensor(7), "module.slice": torch.arange(20.0)[5:11]}
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from whale.core.errors import DataError
from whale.models.statedict import read_state_dict, read_torch_file

DATA = Path(__file__).parent / "data" / "torch"


@pytest.mark.parametrize("layout", ["zip", "legacy"])
def test_both_torch_layouts_read_exactly_without_torch(layout):
    expected = np.load(DATA / "expected.npz")
    state = read_state_dict(DATA / f"{layout}.pth")
    assert sorted(state) == sorted(expected.files)  # unwrapped from state_dict, module. dropped
    for name in expected.files:
        assert state[name].dtype == np.float32
        np.testing.assert_array_equal(state[name], expected[name], err_msg=name)
    assert state["fc.weight"].shape == (6, 5)
    assert read_torch_file(DATA / f"{layout}.pth")["epoch"] == 3


class _Exploit:
    def __reduce__(self):
        import os

        return (os.system, ("echo pwned",))


def test_a_checkpoint_that_asks_for_code_is_refused(tmp_path):
    path = tmp_path / "evil.pth"
    with open(path, "wb") as f:  # a legacy file whose object pickle calls os.system
        for head in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):
            pickle.dump(head, f, protocol=2)
        pickle.dump({"w": _Exploit()}, f, protocol=2)
    with pytest.raises(DataError, match=r"evil\.pth: .*asks for (posix|os|nt)\.system"):
        read_state_dict(path)


class _Touch:
    def __init__(self, target):
        self.target = str(target)

    def __reduce__(self):
        import pathlib

        return pathlib.Path.touch, (pathlib.Path(self.target),)


@pytest.mark.parametrize("where", range(4))
def test_code_in_any_of_the_legacy_layouts_other_pickles_is_refused_unrun(tmp_path, where):
    """The magic number, protocol, system info and storage keys are pickles too: none is read with plain pickle."""
    path, planted = tmp_path / "evil.pth", tmp_path / "planted.txt"
    heads = [0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}, {}, []]
    heads[where if where < 3 else 4] = _Touch(planted)
    with open(path, "wb") as f:
        for head in heads:
            pickle.dump(head, f, protocol=2)
    with pytest.raises(DataError, match=r"evil\.pth: .*asks for "):
        read_state_dict(path)
    assert not planted.exists()


def test_a_truncated_checkpoint_is_named(tmp_path):
    raw = (DATA / "legacy.pth").read_bytes()
    (tmp_path / "cut.pth").write_bytes(raw[: len(raw) - 40])
    with pytest.raises(DataError, match=r"cut\.pth: not a PyTorch checkpoint"):
        read_state_dict(tmp_path / "cut.pth")
