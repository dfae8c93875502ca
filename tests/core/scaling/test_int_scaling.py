"""IntScaling and PowerOfTwoIntScaling: integer-range thresholds worked out by hand."""

import pytest
import torch

from brevitas_cpp import config
from brevitas_cpp.core.scaling import IntScaling, PowerOfTwoIntScaling

# (signed, narrow_range) -> threshold for 8 bits
INT_SCALING_8BIT = {
    (True, False): 128.0,  # -min_int = 2^7
    (True, True): 127.0,  # -min_int = 2^7 - 1
    (False, False): 255.0,  # max_int = 2^8 - 1
    (False, True): 254.0,  # max_int = 2^8 - 2
}


@pytest.mark.parametrize("signed, narrow_range", list(INT_SCALING_8BIT))
def test_int_scaling_fixed_signedness(signed, narrow_range):
    block = IntScaling(narrow_range=narrow_range, signed=signed)
    assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED
    out = block(torch.tensor(8.0))
    assert torch.equal(out, torch.tensor(INT_SCALING_8BIT[(signed, narrow_range)]))


@pytest.mark.parametrize("signed, narrow_range", list(INT_SCALING_8BIT))
def test_int_scaling_signedness_per_call(signed, narrow_range):
    block = IntScaling(narrow_range=narrow_range)
    expected = torch.tensor(INT_SCALING_8BIT[(signed, narrow_range)])
    assert torch.equal(block(torch.tensor(8.0), signed), expected)
    assert torch.equal(block(torch.tensor(8.0), torch.tensor(signed)), expected)
    # The call's flag wins over the constructor's.
    assert torch.equal(
        IntScaling(narrow_range, signed=not signed)(torch.tensor(8.0), signed), expected
    )


def test_int_scaling_bit_width_gradient_and_per_channel():
    bit_width = torch.tensor([2.0, 4.0], requires_grad=True)
    out = IntScaling(narrow_range=False, signed=True)(bit_width)
    assert torch.equal(out, torch.tensor([2.0, 8.0]))
    out.sum().backward()
    # d 2^(b-1) / db = 2^(b-1) ln 2
    expected = torch.tensor([2.0, 8.0]) * torch.log(torch.tensor(2.0))
    torch.testing.assert_close(bit_width.grad, expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("signed, expected", [(True, 128.0), (False, 256.0)])
def test_power_of_two_int_scaling(signed, expected):
    block = PowerOfTwoIntScaling(signed=signed)
    assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED
    assert torch.equal(block(torch.tensor(8.0)), torch.tensor(expected))
    per_call = PowerOfTwoIntScaling()
    assert torch.equal(per_call(torch.tensor(8.0), torch.tensor(signed)), torch.tensor(expected))


def test_signed_must_be_known():
    for block in (IntScaling(narrow_range=False), PowerOfTwoIntScaling()):
        name = type(block).__name__
        with pytest.raises(
            (ValueError, torch.jit.Error),
            match=f"{name}: signed is None both at construction and in the call",
        ):
            block(torch.tensor(8.0))


def test_bad_flags():
    with pytest.raises(TypeError, match="IntScaling: narrow_range must be a bool, got None"):
        IntScaling(narrow_range=None)
    with pytest.raises(TypeError, match="IntScaling: signed must be a bool or None, got 'yes'"):
        IntScaling(narrow_range=True, signed="yes")
    with pytest.raises(
        TypeError, match="PowerOfTwoIntScaling: signed must be a bool or None, got 1"
    ):
        PowerOfTwoIntScaling(signed=1)


def test_no_state():
    assert IntScaling(narrow_range=True, signed=True).state_dict() == {}
    assert PowerOfTwoIntScaling(signed=True).state_dict() == {}
