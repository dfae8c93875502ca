"""Learned bit-widths: BitWidthParameter (offset above min_bit_width) and
RemoveBitwidthParameter (1 / coefficient), including their checkpoint conversions."""

import pytest
import torch

from brevitas_cpp import config
from brevitas_cpp.core.bit_width import BitWidthParameter, RemoveBitwidthParameter
from brevitas_cpp.core.bit_width.parameter import (
    MIN_INT_BIT_WIDTH,
    NON_ZERO_EPSILON,
    REMOVE_ZERO_BIT_WIDTH,
)
from brevitas_cpp.core.restrict_val import FloatRestrictValue, PowerOfTwoRestrictValue


def test_constants():
    assert (MIN_INT_BIT_WIDTH, NON_ZERO_EPSILON, REMOVE_ZERO_BIT_WIDTH) == (2, 1e-6, 0.1)


# ---- BitWidthParameter ---------------------------------------------------------------------------


def test_bit_width_parameter_init_and_forward():
    block = BitWidthParameter(8, 3)
    assert torch.equal(block.bit_width_offset.detach(), torch.tensor(5.0))
    assert block.bit_width_base == 3.0
    out = block()
    assert torch.equal(out.detach(), torch.tensor(8.0))
    assert list(block.state_dict()) == ["bit_width_offset"]
    assert BitWidthParameter(4)().item() == 4.0  # default min_bit_width is 2
    assert BitWidthParameter(4, dtype=torch.float64)().dtype == torch.float64


@pytest.mark.parametrize(
    "offset,expected,grad",
    [
        (2.6, 6.0, 1.0),  # round(|2.6| + 3) = 6, d/d offset = sign(2.6)
        (-1.4, 4.0, -1.0),  # |offset| keeps the bit-width above the minimum
        (0.0, 3.0, 1.0),  # the sign gradient is +1 at 0 so the offset can grow from the minimum
        (-0.0, 3.0, 1.0),
        (1.5, 4.0, 1.0),  # 4.5 rounds half to even
    ],
)
def test_bit_width_parameter_learned_values_and_gradient(offset, expected, grad):
    block = BitWidthParameter(3, 3)
    with torch.no_grad():
        block.bit_width_offset.fill_(offset)
    out = block()
    assert torch.equal(out.detach(), torch.tensor(expected))
    out.backward()
    assert torch.equal(block.bit_width_offset.grad, torch.tensor(grad))


def test_bit_width_parameter_with_other_restrictions():
    # No rounding: the offset is used as it is.
    block = BitWidthParameter(6, 2, restrict_bit_width_impl=FloatRestrictValue())
    with torch.no_grad():
        block.bit_width_offset.fill_(1.25)
    assert torch.equal(block().detach(), torch.tensor(3.25))
    # Power-of-two: the offset lives in the log2 domain (log2(8) - log2(2) = 2).
    p2 = BitWidthParameter(8, 2, restrict_bit_width_impl=PowerOfTwoRestrictValue())
    assert p2.bit_width_base == 1.0
    assert torch.equal(p2.bit_width_offset.detach(), torch.tensor(2.0))
    assert torch.equal(p2().detach(), torch.tensor(8.0))


def test_bit_width_parameter_state_dict_round_trip():
    block = BitWidthParameter(8, 2)
    with torch.no_grad():
        block.bit_width_offset.fill_(3.7)
    fresh = BitWidthParameter(4, 2)
    assert fresh.load_state_dict(block.state_dict(), strict=True).missing_keys == []
    assert torch.equal(fresh.bit_width_offset.detach(), torch.tensor(3.7))
    assert torch.equal(fresh().detach(), torch.tensor(6.0))


def test_bit_width_parameter_loads_a_constant_bit_width():
    block = BitWidthParameter(8, 3)
    state = {"bit_width": torch.tensor(5.0)}
    assert block.load_state_dict(state, strict=True).missing_keys == []
    assert torch.equal(block.bit_width_offset.detach(), torch.tensor(2.0))
    assert torch.equal(block().detach(), torch.tensor(5.0))
    both = {"bit_width": torch.tensor(5.0), "bit_width_offset": torch.tensor(2.0)}
    with pytest.raises(
        RuntimeError, match=r"BitWidthParameter: the state_dict has both 'bit_width'"
    ):
        BitWidthParameter(8, 3).load_state_dict(both)


def test_bit_width_parameter_override_pretrained():
    block = BitWidthParameter(8, 2, override_pretrained_bit_width=True)
    result = block.load_state_dict({"bit_width_offset": torch.tensor(1.0)}, strict=True)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert torch.equal(block().detach(), torch.tensor(8.0))  # the loaded value is ignored
    assert block.load_state_dict({}, strict=True).missing_keys == []


def test_bit_width_parameter_missing_keys(monkeypatch):
    assert BitWidthParameter(8).load_state_dict({}, strict=False).missing_keys == [
        "bit_width_offset"
    ]
    monkeypatch.setattr(config, "IGNORE_MISSING_KEYS", True)
    assert BitWidthParameter(8).load_state_dict({}, strict=True).missing_keys == []


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (
            dict(bit_width=1),
            RuntimeError,
            r"BitWidthParameter: bit_width must be >= max\(2, min_bit_width=2\), got 1",
        ),
        (
            dict(bit_width=4, min_bit_width=6),
            RuntimeError,
            r"BitWidthParameter: bit_width must be >= max\(2, min_bit_width=6\), got 4",
        ),
        (
            dict(bit_width=4, min_bit_width=1),
            RuntimeError,
            r"BitWidthParameter: min_bit_width must be >= 2, got 1",
        ),
        (dict(bit_width=4.5), TypeError, r"BitWidthParameter: bit_width must be an int, got 4.5"),
        (dict(bit_width=True), TypeError, r"BitWidthParameter: bit_width must be an int, got True"),
        (
            dict(bit_width=4, min_bit_width=None),
            TypeError,
            r"BitWidthParameter: min_bit_width must be an int",
        ),
        (
            dict(bit_width=4, restrict_bit_width_impl=torch.nn.Identity()),
            TypeError,
            r"BitWidthParameter: restrict_bit_width_impl must be a restrict-value module",
        ),
    ],
)
def test_bit_width_parameter_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        BitWidthParameter(**kwargs)


# ---- RemoveBitwidthParameter ---------------------------------------------------------------------


@pytest.mark.parametrize("bits,coeff", [(1, 1.0), (3, 1 / 3), (7, 1 / 7), (0, 1 / 0.1)])
def test_remove_bit_width_parameter_values(bits, coeff):
    block = RemoveBitwidthParameter(bits)
    assert torch.equal(block.bit_width_coeff.detach(), torch.tensor(coeff))
    out = block()
    c = torch.tensor(coeff, requires_grad=True)
    ref = 1.0 / (1e-6 + torch.abs(c))
    assert torch.equal(out.detach(), ref.detach())
    out.backward()
    ref.backward()
    assert torch.equal(block.bit_width_coeff.grad, c.grad)
    assert list(block.state_dict()) == ["bit_width_coeff"]


def test_remove_bit_width_parameter_gradcheck():
    block = RemoveBitwidthParameter(3, dtype=torch.float64)
    # gradcheck perturbs its input in place, and the input is the block's own parameter.
    assert torch.autograd.gradcheck(lambda coeff: block(), (block.bit_width_coeff,))


def test_remove_bit_width_parameter_state(monkeypatch):
    block = RemoveBitwidthParameter(3)
    with torch.no_grad():
        block.bit_width_coeff.fill_(0.25)
    fresh = RemoveBitwidthParameter(2)
    fresh.load_state_dict(block.state_dict(), strict=True)
    assert torch.equal(fresh.bit_width_coeff.detach(), torch.tensor(0.25))
    override = RemoveBitwidthParameter(2, override_pretrained_bit_width=True)
    assert override.load_state_dict(block.state_dict(), strict=True).missing_keys == []
    assert torch.equal(override.bit_width_coeff.detach(), torch.tensor(0.5))
    assert RemoveBitwidthParameter(2).load_state_dict({}, strict=False).missing_keys == [
        "bit_width_coeff"
    ]
    monkeypatch.setattr(config, "IGNORE_MISSING_KEYS", True)
    assert RemoveBitwidthParameter(2).load_state_dict({}, strict=True).missing_keys == []


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (
            dict(bit_width_to_remove=-1),
            RuntimeError,
            r"RemoveBitwidthParameter: bit_width_to_remove must be >= 0, got -1",
        ),
        (
            dict(bit_width_to_remove="2"),
            TypeError,
            r"RemoveBitwidthParameter: bit_width_to_remove must be a number",
        ),
        (
            dict(bit_width_to_remove=0, remove_zero_bit_width=0.0),
            ValueError,
            r"RemoveBitwidthParameter: remove_zero_bit_width must be a finite number > 0, got 0.0",
        ),
        (
            dict(bit_width_to_remove=2, non_zero_epsilon=-1.0),
            ValueError,
            r"RemoveBitwidthParameter: non_zero_epsilon must be a finite number >= 0, got -1.0",
        ),
    ],
)
def test_remove_bit_width_parameter_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        RemoveBitwidthParameter(**kwargs)


def test_blocks_follow_jit_switch():
    for block in (BitWidthParameter(4), RemoveBitwidthParameter(2)):
        assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED
