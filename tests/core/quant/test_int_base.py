"""IntQuant against the written-out affine quantization formula (helpers.ref_int_quant): values
bit for bit, the fused C++ path against the unfused composition, gradients, views, dtypes,
delay, state and argument errors."""

import pytest
import torch
from core_refs import UserTensorClamp
from helpers import (
    MODES,
    ROUND,
    SCALE_SHAPES,
    assert_bitwise,
    rand,
    rand_pos,
    ref_int_quant,
    ref_max_int,
    ref_min_int,
    ref_tensor_clamp,
)
from torch import Tensor

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.core.function_wrapper import (
    CeilSte,
    DPURoundSte,
    FloorSte,
    Identity,
    RoundSte,
    RoundToZeroSte,
    TensorClamp,
    TensorClampSte,
)
from brevitas_cpp.core.quant import IntQuant
from brevitas_cpp.function import round_ste, tensor_clamp_ste

ROUNDING_BLOCKS = {
    "round": RoundSte,
    "floor": FloorSte,
    "ceil": CeilSte,
    "round_to_zero": RoundToZeroSte,
    "dpu": DPURoundSte,
}
CLAMP_BLOCKS = {False: TensorClamp, True: TensorClampSte}
# Gradients of scale, zero point and bit width are sums over x, and the fused op sums in another
# order (and wider precision) than autograd: they agree to rounding, not bit for bit.
SUM_TOLERANCE = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 2e-2,
}


def assert_same_gradient(got, want) -> None:
    """Equal up to summation order; no gradient and an all-zero one count as the same (a
    straight-through clamp has no path to bit_width; scripted graphs may still return zeros)."""
    if got is None or want is None or not got.any() or not want.any():
        assert (got is None or not got.any()) and (want is None or not want.any())
        return
    tol = SUM_TOLERANCE[got.dtype]
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


# ---- stand-ins that force the unfused composition (their types are not the library's) -------


class UserRoundSte(torch.nn.Module):
    """A rounding block IntQuant does not recognise, with RoundSte's arithmetic."""

    def forward(self, x: Tensor) -> Tensor:
        return round_ste(x)


class UserTensorClampSte(torch.nn.Module):
    def forward(self, x: Tensor, min_val: Tensor, max_val: Tensor) -> Tensor:
        return tensor_clamp_ste(x, min_val, max_val)


class HalveAndRound(torch.nn.Module):
    """Deliberately not a rounding of its own input: proves the user's block is called."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.round(x / 2)


class GroupView(torch.nn.Module):
    """[N, C*G] -> [N, C, G]: quantization per group of G consecutive elements."""

    def __init__(self, group_size: int) -> None:
        super().__init__()
        self.group_size = group_size

    def forward(self, x: Tensor) -> Tensor:
        return x.view(x.shape[0], -1, self.group_size)


def make(mode="round", clamp_ste=False, signed=True, narrow=False, view=None, delay=0):
    return IntQuant(
        narrow_range=narrow,
        signed=signed,
        input_view_impl=view if view is not None else Identity(),
        float_to_int_impl=ROUNDING_BLOCKS[mode](),
        tensor_clamp_impl=CLAMP_BLOCKS[clamp_ste](),
        quant_delay_steps=delay,
    )


def operands(shape_key, dtype=torch.float32, bits=4.0, seed=0):
    x_shape, s_shape = SCALE_SHAPES[shape_key]
    x = rand(x_shape, dtype, seed=seed, spread=2.0)
    scale = rand_pos(s_shape, dtype, seed=seed + 1) * 0.5
    zero_point = torch.round(rand(s_shape, torch.float64, seed=seed + 2) * 2).to(dtype)
    return x, scale, zero_point, torch.tensor(bits)


# ---- values --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("clamp_ste", [False, True])
@pytest.mark.parametrize(
    "signed,narrow", [(True, False), (True, True), (False, False), (False, True)]
)
def test_values_match_formula_bitwise(mode, clamp_ste, signed, narrow):
    q = make(mode, clamp_ste, signed, narrow)
    assert q.fused
    for shape_key in SCALE_SHAPES:  # per tensor, per channel along several dims, per group
        x, scale, zp, bw = operands(shape_key)
        y = q(scale, zp, bw, x)
        assert_bitwise(y, ref_int_quant(x, scale, zp, bw, signed, narrow, mode, clamp_ste))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", MODES)
def test_values_in_other_dtypes(dtype, mode):
    x, scale, zp, bw = operands("dim1", dtype)
    y = make(mode, signed=False, narrow=True)(scale, zp, bw, x)
    assert y.dtype == dtype
    assert_bitwise(y, ref_int_quant(x, scale, zp, bw, False, True, mode))


def test_brevitas_docstring_example():
    # Worked by hand: 4-bit signed narrow range is [-7, 7] with scale 0.01.
    q = IntQuant(narrow_range=True, signed=True, input_view_impl=Identity())
    x = torch.tensor([0.042, -0.053, 0.31, -0.44])
    y = q(torch.tensor(0.01), torch.tensor(0.0), torch.tensor(4.0), x)
    assert torch.equal(y, torch.tensor([4.0, -5.0, 7.0, -7.0]) * torch.tensor(0.01))


@pytest.mark.parametrize(
    "signed,narrow,lo,hi",
    [(True, False, -8, 7), (True, True, -7, 7), (False, False, 0, 15), (False, True, 0, 14)],
)
def test_integer_range_by_hand(signed, narrow, lo, hi):
    q = make(signed=signed, narrow=narrow)
    bw = torch.tensor(4.0)
    assert q.min_int(bw).item() == lo and q.max_int(bw).item() == hi
    x = torch.arange(-20.0, 21.0)
    y = q(torch.tensor(1.0), torch.tensor(0.0), bw, x)
    assert torch.equal(y, x.clamp(lo, hi))


@pytest.mark.parametrize("bits", [1.0, 2.0, 8.0, 16.0, 32.0])
def test_bit_widths(bits):
    x, scale, zp, bw = operands("dim1", torch.float64, bits=bits)
    x = x * 2.0 ** (bits - 2)  # reach the edges of wide ranges too
    for signed in (True, False):
        y = make(signed=signed)(scale, zp, bw, x)
        assert_bitwise(y, ref_int_quant(x, scale, zp, bw, signed, False))


def test_to_int_is_clamped_integer():
    x, scale, zp, bw = operands("dim0")
    q = make("floor", signed=True, narrow=True)
    y_int = q.to_int(scale, zp, bw, x)
    expected = ref_tensor_clamp(
        torch.floor(x / scale + zp), ref_min_int(True, True, bw), ref_max_int(True, True, bw)
    )
    assert_bitwise(y_int, expected)
    assert torch.equal(y_int, torch.round(y_int))


# ---- fused and unfused paths ---------------------------------------------------------------------


@pytest.mark.parametrize("shape_key", ["per_tensor_0d", "dim0", "dim1", "per_group"])
@pytest.mark.parametrize("clamp_ste", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_fused_equals_unfused_values_and_gradients(shape_key, clamp_ste, dtype):
    x, scale, zp, bw = operands(shape_key, dtype)
    fused = make("round", clamp_ste, signed=True, narrow=False)
    unfused = IntQuant(
        False,
        True,
        Identity(),
        UserRoundSte(),
        UserTensorClampSte() if clamp_ste else UserTensorClamp(),
    )
    assert fused.fused and not unfused.fused
    g = rand(x.shape, dtype, seed=9)
    results = []
    for q in (fused, unfused):
        leaves = [t.clone().requires_grad_() for t in (x, scale, zp)]
        b = bw.clone().requires_grad_()
        y = q(leaves[1], leaves[2], b, leaves[0])
        # The fused op leaves its own autograd node; the composition ends in a multiplication.
        assert ("IntQuantFunction" in y.grad_fn.name()) == q.fused
        y.backward(g)
        results.append((y.detach(), [t.grad for t in leaves] + [b.grad]))
    (y_f, grads_f), (y_u, grads_u) = results
    assert_bitwise(y_f, y_u)
    # TorchScript differentiates the scripted composition itself and masks with a product, so
    # there clamped elements get -0.0 where the op (and eager autograd) give +0.0.
    assert_bitwise(grads_f[0], grads_u[0], signed_zero=not JIT_ENABLED)
    # Parameter gradients are sums over x: equal up to the order of summation. In half precision
    # TorchScript's own derivative formulas for the composition round each term differently
    # from eager autograd, so there only float32 and float64 are compared.
    if dtype in (torch.float32, torch.float64) or not JIT_ENABLED:
        for gf, gu in zip(grads_f[1:], grads_u[1:]):
            assert_same_gradient(gf, gu)


def test_user_blocks_are_called():
    x, scale, zp, bw = operands("dim1")
    q = IntQuant(False, True, Identity(), HalveAndRound(), TensorClamp())
    y = q(scale, zp, bw, x)
    expected = (
        ref_tensor_clamp(torch.round((x / scale + zp) / 2), torch.tensor(-8.0), torch.tensor(7.0))
        - zp
    ) * scale
    assert_bitwise(y, expected)


@pytest.mark.parametrize(
    "x_dtype,s_dtype",
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float64),
    ],
)
def test_mixed_dtypes_promote_like_pytorch(x_dtype, s_dtype):
    # The op wants one dtype; other combinations take the composition and PyTorch's promotion.
    x, scale, zp, bw = operands("dim1", s_dtype)
    x = x.to(x_dtype)
    y = make("round")(scale, zp, bw, x)
    y_graph = make("round")(scale, zp, bw, x.clone().requires_grad_())
    assert "IntQuantFunction" not in y_graph.grad_fn.name()
    assert y.dtype == s_dtype
    assert_bitwise(y, ref_int_quant(x, scale, zp, bw, True, False))


def test_scale_with_more_dims_than_x_broadcasts_like_pytorch():
    x = rand((5,), seed=3)
    scale = rand_pos((2, 5), seed=4)
    y = make()(scale, torch.tensor(0.0), torch.tensor(3.0), x)
    assert y.shape == (2, 5)
    assert_bitwise(y, ref_int_quant(x, scale, torch.tensor(0.0), torch.tensor(3.0), True, False))


def test_non_contiguous_input():
    base = rand((6, 4, 5), seed=5)
    x = base.transpose(0, 2)  # [5, 4, 6]
    scale = rand_pos((1, 4, 1), seed=6)
    y = make("dpu")(scale, torch.tensor(0.0), torch.tensor(5.0), x)
    assert_bitwise(
        y, ref_int_quant(x, scale, torch.tensor(0.0), torch.tensor(5.0), True, False, "dpu")
    )


def test_bit_width_outside_fused_range_is_an_error():
    x, scale, zp, _ = operands("dim1")
    with pytest.raises(RuntimeError, match=r"bit_width must be an integer in \[1, 32\]"):
        make()(scale, zp, torch.tensor(33.0), x)


def test_swapping_the_rounding_block():
    x, scale, zp, bw = operands("dim1")
    q = make("round")
    if JIT_ENABLED:
        # A scripted module's submodule types are fixed, so its fused choice cannot go stale.
        with pytest.raises(RuntimeError, match="Expected a value of type"):
            q.float_to_int_impl = FloorSte()
        assert q.fused and q.rounding_mode == "round"
        return
    q.float_to_int_impl = FloorSte()
    assert q.fused and q.rounding_mode == "floor"
    assert_bitwise(q(scale, zp, bw, x), ref_int_quant(x, scale, zp, bw, True, False, "floor"))
    q.float_to_int_impl = HalveAndRound()
    assert not q.fused
    q.float_to_int_impl = RoundSte()
    q.tensor_clamp_impl = UserTensorClamp()
    assert not q.fused


# ---- gradients -----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape_key", ["per_tensor_1", "dim0", "dim1", "last"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("clamp_ste", [False, True])
def test_gradients_match_autograd_of_formula(shape_key, mode, clamp_ste):
    x, scale, zp, bw = operands(shape_key, seed=11)
    g = rand(x.shape, seed=12)

    def run(fn):
        leaves = [t.clone().requires_grad_() for t in (x, scale, zp, bw)]
        y = fn(*leaves)
        y.backward(g)
        return y.detach(), [t.grad for t in leaves]

    q = make(mode, clamp_ste, signed=True, narrow=True)
    y, grads = run(lambda x_, s_, z_, b_: q(s_, z_, b_, x_))
    _, grads_ref = run(
        lambda x_, s_, z_, b_: ref_int_quant(x_, s_, z_, b_, True, True, mode, clamp_ste)
    )
    # The reference's straight-through form u + (round(u) - u) turns -0.0 into +0.0; its
    # values are compared without a graph, where it is the plain formula.
    assert_bitwise(y, ref_int_quant(x, scale, zp, bw, True, True, mode, clamp_ste))
    assert_bitwise(grads[0], grads_ref[0])
    for got, want in zip(grads[1:], grads_ref[1:]):
        assert_same_gradient(got, want)


def test_gradient_by_hand():
    # Inside the range the x gradient is 1 (straight-through); outside it is 0; the scale gets
    # (q - z) - x / s inside and (clamped q - z) outside.
    x = torch.tensor([0.26, 5.0], requires_grad=True)
    s = torch.tensor(0.5, requires_grad=True)
    y = make()(s, torch.tensor(0.0), torch.tensor(3.0), x)  # range [-4, 3]
    y.sum().backward()
    assert torch.equal(y.detach(), torch.tensor([0.5, 1.5]))
    assert torch.equal(x.grad, torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(s.grad, torch.tensor((1.0 - 0.52) + 3.0))


# ---- views, delay, state, modes ------------------------------------------------------------------


def test_input_view_impl_per_group():
    x = rand((3, 8), seed=20)
    scale = rand_pos((3, 4, 1), seed=21)
    q = make(view=GroupView(2))
    y = q(scale, torch.tensor(0.0), torch.tensor(4.0), x)
    assert y.shape == (3, 4, 2)
    assert_bitwise(
        y, ref_int_quant(x.view(3, 4, 2), scale, torch.tensor(0.0), torch.tensor(4.0), True, False)
    )
    assert_bitwise(
        q.to_int(scale, torch.tensor(0.0), torch.tensor(4.0), x),
        ref_tensor_clamp(
            torch.round(x.view(3, 4, 2) / scale), torch.tensor(-8.0), torch.tensor(7.0)
        ),
    )


def test_quant_delay_steps_returns_input_first():
    x, scale, zp, bw = operands("dim1")
    q = make(delay=2)
    expected = ref_int_quant(x, scale, zp, bw, True, False)
    assert q(scale, zp, bw, x) is x
    q.eval()  # the countdown counts calls in either mode, as Brevitas
    assert q(scale, zp, bw, x) is x
    for _ in range(2):
        assert_bitwise(q(scale, zp, bw, x), expected)


def test_delayed_input_keeps_original_shape_with_view():
    x = rand((3, 8), seed=22)
    q = make(view=GroupView(4), delay=1)
    scale = torch.tensor(0.1)
    assert q(scale, torch.tensor(0.0), torch.tensor(4.0), x).shape == (3, 8)
    assert q(scale, torch.tensor(0.0), torch.tensor(4.0), x).shape == (3, 2, 4)


def test_state_dict_is_empty_and_round_trips():
    q = make(delay=3)
    assert list(q.state_dict().keys()) == []
    fresh = make(delay=3)
    assert fresh.load_state_dict(q.state_dict(), strict=True).missing_keys == []


def test_train_and_eval_agree():
    x, scale, zp, bw = operands("dim0")
    q = make("ceil")
    y_train = q.train()(scale, zp, bw, x)
    y_eval = q.eval()(scale, zp, bw, x)
    assert_bitwise(y_train, y_eval)


def test_scripts_under_jit():
    q = make()
    assert isinstance(q, torch.jit.ScriptModule) == JIT_ENABLED
    if JIT_ENABLED:
        assert "int_quant" in q.forward.code


def test_default_blocks_are_round_and_tensor_clamp():
    q = IntQuant(narrow_range=False, signed=False, input_view_impl=Identity())
    assert type(q.float_to_int_impl) is RoundSte and type(q.tensor_clamp_impl) is TensorClamp
    assert q.fused and q.rounding_mode == "round" and not q.clamp_ste


# ---- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(narrow_range=1), TypeError, r"IntQuant: narrow_range must be a bool.*got 1"),
        (dict(signed="yes"), TypeError, r"IntQuant: signed must be a bool.*got 'yes'"),
        (
            dict(input_view_impl=None),
            TypeError,
            r"IntQuant: input_view_impl must be a torch.nn.Module",
        ),
        (
            dict(float_to_int_impl="round"),
            TypeError,
            r"IntQuant: float_to_int_impl must be a torch.nn.Module",
        ),
        (
            dict(tensor_clamp_impl="clamp"),
            TypeError,
            r"IntQuant: tensor_clamp_impl must be a torch.nn.Module.*'clamp'",
        ),
        (
            dict(quant_delay_steps=2.5),
            TypeError,
            r"IntQuant: quant_delay_steps must be an int.*2.5",
        ),
        (
            dict(quant_delay_steps=True),
            TypeError,
            r"IntQuant: quant_delay_steps must be an int.*True",
        ),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    args = dict(narrow_range=False, signed=True, input_view_impl=Identity())
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        IntQuant(**args)


def test_reference_rounding_table_is_complete():
    # Guards the parametrization above: every rounding mode has a block and a reference.
    assert set(ROUNDING_BLOCKS) == set(ROUND)
