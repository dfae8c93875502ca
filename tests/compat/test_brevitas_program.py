"""A program written for Brevitas runs unchanged on brevitas_cpp (issue 32):
programs/brevitas_program.py, importing ``brevitas``, is run here with ``brevitas`` resolving to
brevitas_cpp (a meta path finder, only for this test), and what it returns is compared with
what it returned on Brevitas 0.12.1 (golden/brevitas_0_12_program.pt, golden/record_program.py).

On the machine that recorded them the state_dict keys, the losses, every scale (trained,
calibrated, corrected) and the final output were equal to the bit, the weights and biases the
optimizer stepped within 2e-7 of their largest magnitude (the weight's gradient through its
max-abs scale sums in another order). All are compared at the precision the float kernels
define: another CPU's convolutions may move last bits."""

import importlib
import importlib.abc
import importlib.util
import os
import sys
from typing import Iterator

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = torch.load(os.path.join(HERE, "golden", "brevitas_0_12_program.pt"))


class _BrevitasIsBrevitasCpp(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import brevitas[.x]`` gives the module ``brevitas_cpp[.x]``."""

    def find_spec(self, name, path=None, target=None):
        if name == "brevitas" or name.startswith("brevitas."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("brevitas_cpp" + spec.name[len("brevitas") :])

    def exec_module(self, module):
        pass


@pytest.fixture
def program() -> Iterator[object]:
    finder = _BrevitasIsBrevitasCpp()
    sys.meta_path.insert(0, finder)
    try:
        path = os.path.join(HERE, "programs", "brevitas_program.py")
        spec = importlib.util.spec_from_file_location("brevitas_program", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == "brevitas" or n.startswith("brevitas.")]:
            del sys.modules[name]


def test_the_program_runs_to_brevitas_numbers(program):
    assert program.qnn.QuantConv2d.__module__.startswith("brevitas_cpp.")
    got = program.run()
    assert list(got) == list(GOLDEN)
    for key, want in GOLDEN.items():
        # 1e-5 relative: a few ulps, far below any quantization step of the program.
        torch.testing.assert_close(got[key], want, rtol=1e-5, atol=1e-7, msg=key)
