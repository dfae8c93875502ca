"""The per-call shortcuts of the core blocks keep every number: identity submodules that forward
skips (and un-skips when, in eager mode, a real block replaces one), IntScaling's threshold
without the two negations of -min_int, and the flag tensors IntQuantTensor shares."""

import pytest
import torch
from helpers import assert_same

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.function_wrapper import Abs, Identity, PowerOfTwo, RoundSte
from brevitas_cpp.core.quant import IntQuant
from brevitas_cpp.core.quant.delay import DelayWrapper
from brevitas_cpp.core.restrict_val import (
    FloatRestrictValue,
    LogFloatRestrictValue,
    _AbsValue,
    _ClampValue,
    _RestrictClampValue,
    _RestrictValue,
)
from brevitas_cpp.core.scaling import IntScaling, PowerOfTwoIntScaling
from brevitas_cpp.function import max_int, min_int
from brevitas_cpp.quant_tensor import IntQuantTensor

eager_only = pytest.mark.skipif(
    JIT_ENABLED, reason="scripted blocks cannot change a submodule's type"
)

X = torch.tensor([-2.5, -1.5, -0.5, -0.0, 0.0, 1e-12, 0.5, 1.5, 2.5])


# ---- identity submodules -------------------------------------------------------------------------


def test_identity_flags_follow_the_blocks_given():
    plain = _RestrictClampValue()
    assert (plain.restrict_is_identity, plain.clamp_is_identity, plain.abs_is_identity) == (
        True,
        True,
        False,
    )
    full = _RestrictClampValue(1e-3, LogFloatRestrictValue(), is_unsigned=False)
    assert (full.restrict_is_identity, full.clamp_is_identity, full.abs_is_identity) == (
        False,
        False,
        True,
    )
    assert _RestrictValue(FloatRestrictValue()).restrict_is_identity
    assert not _RestrictValue(LogFloatRestrictValue()).restrict_is_identity
    assert _ClampValue(None).clamp_is_identity and not _ClampValue(0.1).clamp_is_identity
    assert _AbsValue(False).abs_is_identity and not _AbsValue(True).abs_is_identity


@pytest.mark.parametrize(
    "block",
    [
        _RestrictClampValue(),
        _RestrictClampValue(1e-3, LogFloatRestrictValue(), is_unsigned=False),
        _RestrictValue(None),
        _RestrictValue(LogFloatRestrictValue()),
        _ClampValue(None),
        _ClampValue(0.75),
        _AbsValue(True),
        _AbsValue(False),
    ],
    ids=lambda b: type(b).__name__,
)
def test_skipping_keeps_values_and_gradients(block):
    """Each block equals the plain chain of its submodules, called one after the other."""
    chain = [getattr(block, name) for name, _ in type(block).IDENTITY_SLOTS]
    x = X.clone().requires_grad_()
    y = block(x)
    y.backward(torch.arange(1.0, 1.0 + X.numel()))
    xr = X.clone().requires_grad_()
    yr = xr
    for sub in chain:
        yr = sub(yr)
    yr.backward(torch.arange(1.0, 1.0 + X.numel()))
    assert_same(y.detach(), yr.detach())
    assert_same(x.grad, xr.grad)


@eager_only
def test_replacing_an_identity_after_construction_takes_effect():
    block = _RestrictClampValue()
    block.restrict_value_impl = PowerOfTwo()  # no longer an identity: must be called
    assert not block.restrict_is_identity
    assert_same(block(X), torch.abs(2.0**X))
    block.apply_abs = Identity()
    assert block.abs_is_identity
    assert_same(block(X), 2.0**X)
    value = _RestrictValue(None)
    value.restrict_value_impl = Abs()
    assert_same(value(X), torch.abs(X))


def _int_quant(**kw):
    return IntQuant(narrow_range=False, signed=True, input_view_impl=Identity(), **kw)


def test_int_quant_flags():
    q = _int_quant()
    assert q.view_is_identity and q.never_delays
    delayed = _int_quant(quant_delay_steps=2)
    assert delayed.view_is_identity and not delayed.never_delays


def test_int_quant_delay_still_counts_down():
    q = _int_quant(quant_delay_steps=1)
    s, z, b = torch.tensor(0.5), torch.tensor(0.0), torch.tensor(4.0)
    assert_same(q(s, z, b, X), X)  # delayed: x itself
    assert_same(q(s, z, b, X), _int_quant()(s, z, b, X))


@eager_only
def test_int_quant_view_replaced_after_construction_is_applied():
    class Twice(torch.nn.Module):
        def forward(self, x):
            return x * 2

    q = _int_quant()
    q.input_view_impl = Twice()
    assert not q.view_is_identity
    s, z, b = torch.tensor(0.5), torch.tensor(0.0), torch.tensor(8.0)
    assert_same(q(s, z, b, X), _int_quant()(s, z, b, X * 2))
    q.delay_wrapper = DelayWrapper(1)
    assert not q.never_delays
    assert_same(q(s, z, b, X), X)


# ---- IntScaling ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("narrow", [False, True])
def test_int_scaling_equals_min_int_and_max_int(dtype, narrow):
    bits = torch.arange(1, 33, dtype=dtype)
    assert_same(IntScaling(narrow, signed=True)(bits), -min_int(True, narrow, bits))
    assert_same(IntScaling(narrow, signed=False)(bits), max_int(False, narrow, bits))
    assert_same(IntScaling(narrow)(bits, torch.tensor(True)), -min_int(True, narrow, bits))
    assert_same(PowerOfTwoIntScaling(True)(bits), max_int(True, False, bits) + 1)


@pytest.mark.parametrize("narrow", [False, True])
def test_int_scaling_learned_bit_width_gradient(narrow):
    b = torch.tensor([3.0, 7.0, 8.0], requires_grad=True)
    IntScaling(narrow, signed=True)(b).backward(torch.tensor([0.3, -1.7, 2.0]))
    br = b.detach().clone().requires_grad_()
    (-min_int(True, narrow, br)).backward(torch.tensor([0.3, -1.7, 2.0]))
    assert_same(b.grad, br.grad)


# ---- IntQuantTensor flags ------------------------------------------------------------------------


def test_quant_tensor_flags_are_shared_and_read_without_item():
    v = torch.randn(3)
    a = IntQuantTensor(v, 0.1, 0.0, 8.0, True, False)
    b = IntQuantTensor(v, 0.1, 0.0, 8.0, True, False)
    assert a.signed_t is b.signed_t and a.training_t is b.training_t
    assert a.signed is True and a.training is False
    assert a.signed_t.dtype == torch.bool and a.signed_t.item() is True
    # Flags given as tensors are kept as they are.
    flag = torch.tensor(False)
    c = IntQuantTensor(v, 0.1, 0.0, 8.0, flag, torch.tensor(True))
    assert c.signed_t is flag and c.signed is False and c.training is True


def test_round_ste_default_block_still_fuses():
    # The fast paths did not change which quantizers take the fused op.
    assert _int_quant().fused and type(_int_quant().float_to_int_impl) is RoundSte
