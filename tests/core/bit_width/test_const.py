"""Constant bit-widths and the MSB clamp: values, state_dict presence, gradients, bad input."""

import pytest
import torch

from brevitas_cpp import config
from brevitas_cpp.core.bit_width import (
    BitWidthConst,
    BitWidthStatefulConst,
    MsbClampBitWidth,
    RemoveBitwidthParameter,
)


def test_bit_width_const_value_and_no_state():
    block = BitWidthConst(8)
    out = block()
    assert torch.equal(out, torch.tensor(8.0)) and out.dtype == torch.float32
    assert not out.requires_grad
    assert block.state_dict() == {}
    assert block.load_state_dict({}, strict=True).missing_keys == []
    assert BitWidthConst(3, dtype=torch.float64)().dtype == torch.float64
    assert BitWidthConst(1)().item() == 1.0


def test_bit_width_stateful_const_round_trip(monkeypatch):
    block = BitWidthStatefulConst(4)
    assert torch.equal(block(), torch.tensor(4.0))
    assert list(block.state_dict()) == ["bit_width"]
    fresh = BitWidthStatefulConst(8)
    fresh.load_state_dict(block.state_dict(), strict=True)
    assert torch.equal(fresh(), torch.tensor(4.0))
    assert BitWidthStatefulConst(8).load_state_dict({}, strict=False).missing_keys == ["bit_width"]
    monkeypatch.setattr(config, "IGNORE_MISSING_KEYS", True)
    missing = BitWidthStatefulConst(8).load_state_dict({}, strict=True).missing_keys
    assert missing == []


@pytest.mark.parametrize(
    "input_bit_width,expected", [(16.0, 8.0), (7.0, 4.0), (4.0, 2.0), (2.0, 2.0)]
)
def test_msb_clamp_bit_width_const(input_bit_width, expected):
    # |input - 3| clamped to [2, 8].
    block = MsbClampBitWidth(BitWidthConst(3), 2, 8)
    x = torch.tensor(input_bit_width, requires_grad=True)
    out = block(x)
    assert torch.equal(out.detach(), torch.tensor(expected))
    out.backward()
    # Straight-through clamp: the gradient is that of |input - 3|.
    assert torch.equal(x.grad, torch.sign(torch.tensor(input_bit_width - 3.0)))


def test_msb_clamp_bit_width_learned_gradient():
    remove = RemoveBitwidthParameter(3)
    block = MsbClampBitWidth(remove, 2, 32)
    x = torch.tensor(12.0)
    block(x).backward()
    c = torch.tensor(1 / 3, requires_grad=True)
    ref = torch.abs(x - 1.0 / (1e-6 + torch.abs(c)))
    ref.backward()
    assert torch.equal(remove.bit_width_coeff.grad, c.grad)


@pytest.mark.parametrize("cls", [BitWidthConst, BitWidthStatefulConst])
@pytest.mark.parametrize(
    "bad,error,match",
    [
        (0, ValueError, r"bit_width must be >= 1, got 0"),
        (-4, ValueError, r"bit_width must be >= 1, got -4"),
        (True, TypeError, r"bit_width must be an int, got True"),
        (2.5, TypeError, r"bit_width must be an int, got 2.5"),
        ("8", TypeError, r"bit_width must be an int, got '8'"),
    ],
)
def test_bit_width_const_bad_input(cls, bad, error, match):
    with pytest.raises(error, match=cls.__name__ + ": " + match):
        cls(bad)


def test_msb_clamp_bad_input():
    with pytest.raises(
        ValueError,
        match=r"MsbClampBitWidth: min_overall_bit_width \(8\) must be <= "
        r"max_overall_bit_width \(4\)",
    ):
        MsbClampBitWidth(BitWidthConst(1), 8, 4)
    with pytest.raises(
        ValueError, match=r"MsbClampBitWidth: min_overall_bit_width must be >= 1, got 0"
    ):
        MsbClampBitWidth(BitWidthConst(1), 0, 4)
    with pytest.raises(
        TypeError, match=r"MsbClampBitWidth: bit_width_to_remove_impl must be a torch.nn.Module"
    ):
        MsbClampBitWidth(3, 2, 4)


def test_blocks_follow_jit_switch():
    for block in (
        BitWidthConst(4),
        BitWidthStatefulConst(4),
        MsbClampBitWidth(BitWidthConst(1), 2, 8),
    ):
        assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED
