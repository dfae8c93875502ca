"""Restrict-value blocks: their forward (the value -> scale map), the init helpers scaling blocks
call, and the clamp/abs wrappers with scaling_min_val."""

import math

import pytest
import torch
from helpers import rand

from brevitas_cpp import config, jit
from brevitas_cpp.core.function_wrapper import CeilSte, FloorSte, Identity, InplaceLogTwo, LogTwo
from brevitas_cpp.core.restrict_val import (
    FloatRestrictValue,
    IntRestrictValue,
    LogFloatRestrictValue,
    PowerOfTwoRestrictValue,
    _AbsValue,
    _ClampValue,
    _RestrictClampValue,
    _RestrictValue,
)

X = torch.tensor([-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 3.7])


def _grad(block, x, g=None):
    x = x.clone().requires_grad_()
    y = block(x)
    y.backward(torch.ones_like(y) if g is None else g)
    return y.detach(), x.grad


# ---- restrict values -----------------------------------------------------------------------------


def test_float_restrict_value_is_identity():
    r = FloatRestrictValue()
    assert torch.equal(r(X), X)
    assert r.restrict_init_float(0.37) == 0.37
    assert r.restrict_init_tensor(X) is X
    assert isinstance(r.restrict_init_module(), Identity)
    assert isinstance(r.restrict_init_inplace_module(), Identity)


def test_log_float_restrict_value():
    r = LogFloatRestrictValue()
    x = rand((20,), seed=1, spread=3.0)
    assert torch.equal(r(x), 2.0**x)
    assert r.restrict_init_float(8.0) == 3.0
    assert r.restrict_init_float(0.37) == math.log2(0.37)
    pos = x.abs() + 0.1
    assert torch.equal(r.restrict_init_tensor(pos), torch.log2(pos))
    assert isinstance(r.restrict_init_module(), LogTwo)
    assert torch.equal(r.restrict_init_module()(pos), torch.log2(pos))
    inplace = pos.clone()
    assert isinstance(r.restrict_init_inplace_module(), InplaceLogTwo)
    assert r.restrict_init_inplace_module()(inplace) is inplace
    assert torch.equal(inplace, torch.log2(pos))
    y, g = _grad(r, x)
    assert torch.equal(g, (2.0**x) * math.log(2.0))


def test_int_restrict_value_rounds_half_even_with_ste():
    r = IntRestrictValue()
    y, g = _grad(r, X)
    assert torch.equal(y, torch.tensor([-2.0, -2.0, -0.0, -0.0, 0.0, 0.0, 2.0, 2.0, 4.0]))
    assert torch.equal(g, torch.ones_like(X))
    assert r.restrict_init_float(3.3) == 3.3
    assert isinstance(r.restrict_init_module(), Identity)
    assert torch.equal(IntRestrictValue(CeilSte())(X), torch.ceil(X))


@pytest.mark.parametrize(
    "float_to_int,rnd", [(None, torch.round), (CeilSte(), torch.ceil), (FloorSte(), torch.floor)]
)
def test_power_of_two_restrict_value(float_to_int, rnd):
    r = PowerOfTwoRestrictValue() if float_to_int is None else PowerOfTwoRestrictValue(float_to_int)
    x = rand((30,), seed=2, spread=4.0)
    y, g = _grad(r, x)
    assert torch.equal(y, 2.0 ** rnd(x))
    # Straight-through rounding: d/dx 2 ** int(x) = 2 ** int(x) * ln 2.
    assert torch.equal(g, (2.0 ** rnd(x)) * math.log(2.0))
    assert r.restrict_init_float(0.25) == -2.0
    assert isinstance(r.restrict_init_module(), LogTwo)
    assert isinstance(r.restrict_init_inplace_module(), InplaceLogTwo)


def test_restrict_values_have_no_state():
    for r in (
        FloatRestrictValue(),
        LogFloatRestrictValue(),
        IntRestrictValue(),
        PowerOfTwoRestrictValue(),
    ):
        assert r.state_dict() == {}
        assert list(r.parameters()) == []


# ---- clamp / abs wrappers ------------------------------------------------------------------------

V = torch.tensor([-2.0, -0.1, 0.0, 0.1, 3.0])


def test_restrict_clamp_value_order_and_gradients():
    # Float restriction, |x| >= 0.5 keeping the sign (0 counts as positive), then |x|.
    block = _RestrictClampValue(0.5, FloatRestrictValue(), True)
    y, g = _grad(block, V)
    assert torch.equal(y, torch.tensor([2.0, 0.5, 0.5, 0.5, 3.0]))
    # Clamp is straight-through; the final |.| contributes the sign of the clamped value.
    assert torch.equal(g, torch.tensor([-1.0, -1.0, 1.0, 1.0, 1.0]))
    signed = _RestrictClampValue(0.5, FloatRestrictValue(), False)
    y, g = _grad(signed, V)
    assert torch.equal(y, torch.tensor([-2.0, -0.5, 0.5, 0.5, 3.0]))
    assert torch.equal(g, torch.ones(5))


def test_restrict_clamp_value_restricts_before_clamping():
    # 2 ** x first, then the bound applies to the scale (not to the log-domain value).
    block = _RestrictClampValue(0.3, LogFloatRestrictValue())
    x = torch.tensor([-3.0, -1.0, 0.5])
    assert torch.equal(block(x), torch.tensor([0.3, 0.5, 2.0**0.5]))


class AbsMaxLike:
    """Stands in for a stats op class whose is_scale_unsigned injection passes on."""

    @classmethod
    def is_scale_unsigned(cls):
        return True


def test_restrict_clamp_value_defaults():
    block = _RestrictClampValue()
    assert isinstance(block.clamp_min_ste, Identity)
    assert isinstance(block.restrict_value_impl, Identity)
    assert torch.equal(block(V), V.abs())
    # A zero bound is no bound; a negative one bounds |x| by its magnitude.
    assert isinstance(_RestrictClampValue(0.0).clamp_min_ste, Identity)
    assert torch.equal(
        _RestrictClampValue(-0.5, None, False)(V), torch.tensor([-2.0, -0.5, 0.5, 0.5, 3.0])
    )
    # Injection may pass a truthy non-bool as is_unsigned.
    assert torch.equal(_RestrictClampValue(None, None, AbsMaxLike.is_scale_unsigned)(V), V.abs())


def test_restrict_clamp_value_exposes_its_parts_when_nested():
    # Scaling blocks call restrict_value_impl's Python helpers and clamp_min_ste directly, also
    # once the block sits inside another (scripted) module.
    class Parent(jit.ScriptModule):
        def __init__(self):
            super().__init__()
            self.restrict_clamp_scaling = _RestrictClampValue(1e-3, PowerOfTwoRestrictValue())

        @jit.script_method
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.restrict_clamp_scaling(x)

    parent = Parent()
    pre = parent.restrict_clamp_scaling.restrict_value_impl.restrict_init_module()
    assert isinstance(pre, LogTwo)
    assert parent.restrict_clamp_scaling.restrict_value_impl.restrict_init_float(4.0) == 2.0
    assert torch.equal(
        parent.restrict_clamp_scaling.clamp_min_ste(torch.tensor([0.0])), torch.tensor([1e-3])
    )
    # 2 ** round(-20) is below the bound; 2 ** round(1.4) = 2.
    assert torch.equal(parent(torch.tensor([-20.0, 1.4])), torch.tensor([1e-3, 2.0]))


def test_restrict_value_clamp_value_abs_value():
    assert torch.equal(_RestrictValue(None)(V), V)
    assert torch.equal(_RestrictValue(PowerOfTwoRestrictValue())(V), 2.0 ** torch.round(V))
    clamp = _ClampValue(0.5)
    assert clamp.min_val == 0.5
    y, g = _grad(clamp, V)
    assert torch.equal(y, torch.tensor([-2.0, -0.5, 0.5, 0.5, 3.0]))
    assert torch.equal(g, torch.ones(5))
    assert _ClampValue(None).min_val is None
    assert torch.equal(_ClampValue(None)(V), V)
    assert torch.equal(_AbsValue()(V), V.abs())
    assert torch.equal(_AbsValue(False)(V), V)


def test_wrappers_have_no_state():
    for block in (
        _RestrictClampValue(0.1, PowerOfTwoRestrictValue()),
        _RestrictValue(None),
        _ClampValue(0.1),
        _AbsValue(),
    ):
        assert block.state_dict() == {}
        assert block.load_state_dict({}, strict=True).missing_keys == []


# ---- bad input and scripting ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "build,error,match",
    [
        (
            lambda: _RestrictClampValue(float("nan")),
            ValueError,
            r"_RestrictClampValue: scaling_min_val must be finite, got nan",
        ),
        (
            lambda: _ClampValue(float("inf")),
            ValueError,
            r"_ClampValue: scaling_min_val must be finite, got inf",
        ),
        (
            lambda: _ClampValue("1e-3"),
            TypeError,
            r"_ClampValue: scaling_min_val must be a real number or None",
        ),
        (
            lambda: _RestrictClampValue(None, "log"),
            TypeError,
            r"_RestrictClampValue: restrict_value_impl must be a torch.nn.Module, got 'log'",
        ),
        (
            lambda: _RestrictValue(3),
            TypeError,
            r"_RestrictValue: restrict_value_impl must be a torch.nn.Module",
        ),
        (
            lambda: IntRestrictValue("round"),
            TypeError,
            r"IntRestrictValue: restrict_value_float_to_int_impl must be a torch.nn.Module",
        ),
        (
            lambda: PowerOfTwoRestrictValue(None),
            TypeError,
            r"PowerOfTwoRestrictValue: restrict_value_float_to_int_impl must be a torch.nn.Module",
        ),
        (
            lambda: LogFloatRestrictValue().restrict_init_float(0.0),
            ValueError,
            r"LogFloatRestrictValue: restrict_init_float needs a positive value .* got 0.0",
        ),
        (
            lambda: PowerOfTwoRestrictValue().restrict_init_float(-1.0),
            ValueError,
            r"PowerOfTwoRestrictValue: restrict_init_float needs a positive value .* got -1.0",
        ),
    ],
)
def test_bad_input(build, error, match):
    with pytest.raises(error, match=match):
        build()


def test_blocks_follow_jit_switch():
    blocks = [
        FloatRestrictValue(),
        LogFloatRestrictValue(),
        IntRestrictValue(),
        PowerOfTwoRestrictValue(),
        _RestrictClampValue(0.1),
        _RestrictValue(None),
        _ClampValue(0.1),
        _AbsValue(),
    ]
    for block in blocks:
        assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED
