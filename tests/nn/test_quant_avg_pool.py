"""Truncating average pooling (brevitas_cpp.nn.quant_avg_pool) against Brevitas 0.12's formulas
written out in plain torch: the pooled value read as an integer window sum at scale
input_scale / window with bit width ceil(log2((2^b - 1) * window)), then requantized to 8 bits
keeping the most significant bits (rounded, or floored by TruncTo8bit). Also: plain-tensor and
disabled paths (exactly the float pooling), gradients, train/eval, keywords, state_dict, shared
proxies, bad arguments and scripting under BREVITAS_JIT=1."""

import inspect

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_same, rand
from torch import nn

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.nn.quant_avg_pool import TruncAdaptiveAvgPool2d, TruncAvgPool2d
from brevitas_cpp.proxy import TruncQuantProxyFromInjector
from brevitas_cpp.quant import RoundTo8bit, TruncTo8bit
from brevitas_cpp.quant_tensor import IntQuantTensor

# ---- references ---------------------------------------------------------------------------------


def ste(fn, u):
    """fn(u) forward, identity backward."""
    return u + (fn(u) - u).detach()


def quant_tensor(
    shape,
    bit_width=8,
    signed=True,
    scale=0.05,
    dtype=torch.float32,
    seed=0,
    training=True,
    requires_grad=False,
):
    """An IntQuantTensor on a known grid: random integers in the bit width's range times scale."""
    g = torch.Generator().manual_seed(seed)
    if signed:
        lo, hi = -(2 ** (bit_width - 1)), 2 ** (bit_width - 1) - 1
    else:
        lo, hi = 0, 2**bit_width - 1
    ints = torch.randint(lo, hi + 1, shape, generator=g).to(dtype)
    s = torch.tensor(scale, dtype=dtype if dtype == torch.float64 else torch.float32)
    value = (ints * s).to(dtype).requires_grad_(requires_grad)
    return IntQuantTensor(
        value, s, torch.tensor(0.0), torch.tensor(float(bit_width)), signed, training
    )


def ref_trunc(pooled, scale, bit_width, window, signed, out_bits=8, float_to_int=torch.round):
    """The window sum at scale / window, requantized to out_bits keeping the MSBs.
    Returns (value, scale, zero_point, bit_width)."""
    acc_scale = scale / window
    acc_bit_width = torch.ceil(torch.log2((2.0**bit_width - 1) * window))
    y = ste(torch.round, pooled / acc_scale + 0.0)  # removes float error: an integer sum
    trunc_scale = 2.0 ** (acc_bit_width - out_bits)
    y = ste(float_to_int, y / trunc_scale)
    lo = -(2.0 ** (out_bits - 1)) if signed else 0.0
    hi = 2.0 ** (out_bits - 1) - 1 if signed else 2.0**out_bits - 1
    y = torch.where(y > hi, torch.tensor(hi, dtype=y.dtype), y)
    y = torch.where(y < lo, torch.tensor(lo, dtype=y.dtype), y)
    out_scale = acc_scale * trunc_scale
    out_zero_point = torch.tensor(0.0) / trunc_scale
    out_bit_width = torch.tensor(float(out_bits))
    return (y - out_zero_point) * out_scale, out_scale, out_zero_point, out_bit_width


def assert_quant_tensor(out, value, scale, zero_point, bit_width, signed, training):
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, value)
    assert torch.equal(out.scale, scale)
    assert torch.equal(out.zero_point, zero_point)
    assert torch.equal(out.bit_width, bit_width)
    assert out.signed == signed and out.training == training


# ---- construction -------------------------------------------------------------------------------


def test_defaults_as_brevitas():
    params = inspect.signature(TruncAvgPool2d.__init__).parameters
    assert params["trunc_quant"].default is RoundTo8bit
    assert params["return_quant_tensor"].default is True
    assert (
        params["stride"].default,
        params["ceil_mode"].default,
        params["count_include_pad"].default,
        params["divisor_override"].default,
    ) == (None, False, True, None)
    params = inspect.signature(TruncAdaptiveAvgPool2d.__init__).parameters
    assert params["trunc_quant"].default is RoundTo8bit
    assert params["return_quant_tensor"].default is True
    for m in (TruncAvgPool2d(3), TruncAdaptiveAvgPool2d(2)):
        assert isinstance(m.trunc_quant, TruncQuantProxyFromInjector)
        assert m.is_trunc_quant_enabled and m.return_quant_tensor is True
        assert m.channelwise_separable is True
        if JIT_ENABLED:
            assert isinstance(m.trunc_quant.tensor_quant, torch.jit.ScriptModule)
    m = TruncAvgPool2d((3, 2), stride=1)
    assert isinstance(m, nn.AvgPool2d) and m.kernel_size == (3, 2) and m.stride == 1
    assert m._avg_scaling == 6 and TruncAvgPool2d(3)._avg_scaling == 9
    assert isinstance(TruncAdaptiveAvgPool2d(2), nn.AdaptiveAvgPool2d)
    assert TruncAdaptiveAvgPool2d(2).padding == 0


# ---- TruncAvgPool2d forward ----------------------------------------------------------------------


CASES = {
    "k2": dict(kernel_size=2),
    "k3s1": dict(kernel_size=3, stride=1),
    "k32s2": dict(kernel_size=(3, 2), stride=2),
    "k3ceil": dict(kernel_size=3, stride=2, ceil_mode=True),
}


def window_of(kernel_size):
    return kernel_size[0] * kernel_size[1] if isinstance(kernel_size, tuple) else kernel_size**2


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
@pytest.mark.parametrize("bit_width", [8, 4, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_forward_requantizes_the_window_sum(case, bit_width, signed):
    kwargs = CASES[case]
    m = TruncAvgPool2d(**kwargs)
    qx = quant_tensor((2, 3, 6, 7), bit_width, signed, seed=1)
    out = m(qx)
    pool_args = {k: v for k, v in kwargs.items() if k != "kernel_size"}
    pooled = F.avg_pool2d(qx.value, kwargs["kernel_size"], **pool_args)
    ref = ref_trunc(pooled, qx.scale, qx.bit_width, window_of(kwargs["kernel_size"]), signed)
    assert_quant_tensor(out, *ref, signed=signed, training=True)


def test_worked_example_by_hand():
    # 8-bit unsigned input, scale 0.5: a 2x2 window of ints 10, 20, 30, 41 sums to 101.
    # Accumulator: scale 0.5 / 4 = 0.125, bit width ceil(log2(255 * 4)) = 10, so 2 bits are
    # dropped: round(101 / 4) = 25 at scale 0.125 * 4 = 0.5, value 12.5.
    value = torch.tensor([[[[10.0, 20.0], [30.0, 41.0]]]]) * 0.5
    qx = IntQuantTensor(
        value, torch.tensor(0.5), torch.tensor(0.0), torch.tensor(8.0), False, False
    )
    out = TruncAvgPool2d(2)(qx)
    # The output's training flag is the layer's mode, not the input's.
    assert_quant_tensor(
        out,
        torch.tensor([[[[12.5]]]]),
        torch.tensor(0.5),
        torch.tensor(0.0),
        torch.tensor(8.0),
        signed=False,
        training=True,
    )
    # TruncTo8bit floors instead: floor(101 / 4) = 25 as well; 103 / 4 would differ.
    qx = qx.set(value=torch.tensor([[[[10.0, 20.0], [30.0, 43.0]]]]) * 0.5)
    assert torch.equal(TruncAvgPool2d(2)(qx).value, torch.tensor([[[[13.0]]]]))
    assert torch.equal(
        TruncAvgPool2d(2, trunc_quant=TruncTo8bit)(qx).value, torch.tensor([[[[12.5]]]])
    )


def test_trunc_to_8bit_floors():
    m = TruncAvgPool2d(2, trunc_quant=TruncTo8bit)
    qx = quant_tensor((2, 2, 6, 6), 8, True, seed=2)
    ref = ref_trunc(
        F.avg_pool2d(qx.value, 2), qx.scale, qx.bit_width, 4, True, float_to_int=torch.floor
    )
    assert_quant_tensor(m(qx), *ref, signed=True, training=True)


def test_bit_width_keyword_configures_trunc_quant():
    m = TruncAvgPool2d(2, bit_width=4)
    qx = quant_tensor((1, 2, 4, 4), 8, True, seed=3)
    ref = ref_trunc(F.avg_pool2d(qx.value, 2), qx.scale, qx.bit_width, 4, True, out_bits=4)
    assert_quant_tensor(m(qx), *ref, signed=True, training=True)


def test_divisor_override_sets_the_window():
    # IntQuantTensor's avg_pool2d reads the window as divisor_override when given.
    m = TruncAvgPool2d(2, divisor_override=3)
    qx = quant_tensor((1, 2, 4, 4), 8, False, seed=4)
    pooled = F.avg_pool2d(qx.value, 2, divisor_override=3)
    ref = ref_trunc(pooled, qx.scale, qx.bit_width, 3, False)
    assert_quant_tensor(m(qx), *ref, signed=False, training=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16], ids=["f64", "f16"])
def test_dtypes(dtype):
    qx = quant_tensor((1, 2, 4, 6), 8, True, seed=5, dtype=dtype)
    out = TruncAvgPool2d(2)(qx)
    ref = ref_trunc(F.avg_pool2d(qx.value, 2), qx.scale, qx.bit_width, 4, True)
    assert out.value.dtype == dtype
    assert_same(out.value, ref[0])
    assert torch.equal(out.scale, ref[1])


def test_input_gradient():
    qx = quant_tensor((2, 2, 6, 6), 8, True, seed=6, requires_grad=True)
    g = rand((2, 2, 3, 3), seed=7)
    out = TruncAvgPool2d(2)(qx)
    (gx,) = torch.autograd.grad(out.value, qx.value, g)
    leaf = qx.value.detach().clone().requires_grad_()
    ref = ref_trunc(F.avg_pool2d(leaf, 2), qx.scale, qx.bit_width, 4, True)[0]
    (ref_gx,) = torch.autograd.grad(ref, leaf, g)
    assert torch.equal(out.value.detach(), ref.detach())
    torch.testing.assert_close(gx, ref_gx, rtol=1e-6, atol=1e-7)


def test_train_and_eval():
    m = TruncAvgPool2d(2)
    qx = quant_tensor((1, 2, 4, 4), 8, True, seed=8)
    assert m(qx).training is True
    assert m.trunc_quant.scale() is None  # nothing cached in training
    m.eval()
    out = m(qx)
    assert out.training is False
    # In eval the proxy remembers the last output's metadata.
    assert torch.equal(m.trunc_quant.scale(), out.scale)
    assert torch.equal(m.trunc_quant.bit_width(), torch.tensor(8.0))


# ---- float paths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16], ids=["f32", "f64", "bf16"]
)
def test_plain_tensor_is_pooled_in_float(dtype):
    m = TruncAvgPool2d(3, stride=2, return_quant_tensor=False)
    x = rand((2, 3, 7, 7), dtype, seed=9).requires_grad_()
    g = rand((2, 3, 3, 3), dtype, seed=10)
    out = m(x)
    ref = F.avg_pool2d(x, 3, stride=2)
    assert_same(out, ref)
    assert_same(torch.autograd.grad(out, x, g)[0], torch.autograd.grad(ref, x, g)[0])


def test_plain_tensor_cannot_return_a_quant_tensor():
    with pytest.raises(RuntimeError, match="TruncAvgPool2d: return_quant_tensor=True"):
        TruncAvgPool2d(2)(rand((1, 1, 4, 4)))


def test_disabled_trunc_quant_is_the_float_pooling():
    m = TruncAvgPool2d(2, trunc_quant=None, return_quant_tensor=False)
    assert not m.is_trunc_quant_enabled
    qx = quant_tensor((1, 2, 4, 4), 8, True, seed=11)
    out = m(qx)
    assert type(out) is torch.Tensor
    assert_same(out, F.avg_pool2d(qx.value, 2))


def test_default_output_is_unpacked_when_asked():
    qx = quant_tensor((1, 2, 4, 4), 8, True, seed=12)
    out = TruncAvgPool2d(2, return_quant_tensor=False)(qx)
    assert type(out) is torch.Tensor
    assert torch.equal(out, TruncAvgPool2d(2)(qx).value)


# ---- TruncAdaptiveAvgPool2d ----------------------------------------------------------------------


def test_compute_kernel_size_stride_by_hand():
    # 5 -> 2: stride 5 // 2 = 2, kernel 5 - 1 * 2 = 3; 6 -> 3: stride 2, kernel 6 - 2 * 2 = 2;
    # 7 -> 1: stride 7, kernel 7.
    assert TruncAdaptiveAvgPool2d.compute_kernel_size_stride((5, 6), (2, 3)) == ([3, 2], [2, 2])
    assert TruncAdaptiveAvgPool2d.compute_kernel_size_stride((7, 4), (1, 4)) == ([7, 1], [7, 1])


@pytest.mark.parametrize("output_size, window", [((2, 2), 9), (1, 30), ((2, 3), 6), ((5, 6), 1)])
@pytest.mark.parametrize("bit_width", [8, 4])
def test_adaptive_forward(output_size, window, bit_width):
    # Input 5 x 6: (2, 2) pools 3 x 3 windows, 1 the whole 5 x 6, (2, 3) 3 x 2, (5, 6) 1 x 1.
    m = TruncAdaptiveAvgPool2d(output_size)
    qx = quant_tensor((2, 3, 5, 6), bit_width, True, seed=13)
    pooled = F.adaptive_avg_pool2d(qx.value, output_size)
    ref = ref_trunc(pooled, qx.scale, qx.bit_width, window, True)
    assert_quant_tensor(m(qx), *ref, signed=True, training=True)


def test_adaptive_float_paths():
    m = TruncAdaptiveAvgPool2d(2, return_quant_tensor=False)
    x = rand((1, 2, 5, 5), seed=14)
    assert_same(m(x), F.adaptive_avg_pool2d(x, 2))
    qx = quant_tensor((1, 2, 5, 5), 8, True, seed=15)
    off = TruncAdaptiveAvgPool2d(2, trunc_quant=None, return_quant_tensor=False)
    assert_same(off(qx), F.adaptive_avg_pool2d(qx.value, 2))


def test_adaptive_bit_width_keyword_and_unsigned():
    m = TruncAdaptiveAvgPool2d(1, bit_width=6)
    qx = quant_tensor((2, 2, 4, 4), 8, False, seed=16)
    ref = ref_trunc(
        F.adaptive_avg_pool2d(qx.value, 1), qx.scale, qx.bit_width, 16, False, out_bits=6
    )
    assert_quant_tensor(m(qx), *ref, signed=False, training=True)


# ---- state_dict, sharing, errors -----------------------------------------------------------------


def test_state_dict_round_trip():
    # The truncation has no learned state; a round trip leaves the output unchanged.
    m = TruncAvgPool2d(2)
    sd = m.state_dict()
    assert list(sd) == []
    fresh = TruncAvgPool2d(2)
    fresh.load_state_dict(sd)
    qx = quant_tensor((1, 1, 4, 4), 8, True, seed=17)
    assert torch.equal(fresh(qx).value, m(qx).value)


def test_shared_trunc_quant():
    first = TruncAvgPool2d(2, bit_width=4)
    second = TruncAdaptiveAvgPool2d(1, trunc_quant=first.trunc_quant)
    assert second.trunc_quant is first.trunc_quant
    qx = quant_tensor((1, 1, 2, 2), 8, True, seed=18)
    # Same 2 x 2 window, same 4-bit truncation.
    assert torch.equal(second(qx).value, first(qx).value)
    assert torch.equal(second(qx).bit_width, torch.tensor(4.0))


@pytest.mark.parametrize("cls, args", [(TruncAvgPool2d, (2,)), (TruncAdaptiveAvgPool2d, (2,))])
def test_bad_trunc_quant_raises(cls, args):
    with pytest.raises(TypeError, match=rf"{cls.__name__}: trunc_quant must be"):
        cls(*args, trunc_quant="round")


def test_unknown_keyword_raises():
    with pytest.raises(TypeError, match="TruncAvgPool2d"):
        TruncAvgPool2d(2, bitwidth=4)


def test_bad_return_quant_tensor_raises():
    with pytest.raises(TypeError, match="TruncAvgPool2d: return_quant_tensor must be a bool"):
        TruncAvgPool2d(2, return_quant_tensor=1)


@pytest.mark.parametrize(
    "make", [lambda: TruncAvgPool2d(2), lambda: TruncAdaptiveAvgPool2d(2)], ids=["avg", "adaptive"]
)
def test_cached_input_metadata_requantizes_later_plain_tensors(make):
    m = make()
    assert (m.cache_inference_quant_act, m.cache_quant_io_metadata_only, m.cache_class) == (
        False,
        True,
        None,
    )
    qx = quant_tensor((1, 2, 4, 4), 8, True, seed=19)
    m(qx)
    assert m.cache_class is None  # caching is opt-in
    m.cache_inference_quant_act = True
    m.eval()
    expected = m(qx)
    assert m.cache_class is not None and m.cache_class.value is None  # metadata only
    assert torch.equal(m.cache_class.scale, qx.scale)
    # A plain tensor is now read on the cached grid.
    out = m(qx.value)
    assert_quant_tensor(
        out,
        expected.value,
        expected.scale,
        expected.zero_point,
        expected.bit_width,
        signed=True,
        training=False,
    )
