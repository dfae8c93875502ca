"""QuantEltwiseAdd and QuantCat (brevitas_cpp.nn.quant_eltwise) against formulas written out in
plain torch: both operands requantized by the one input quantizer (batch statistics in training,
the running statistic in eval), the sum's or concatenation's metadata (Brevitas 0.12's
IntQuantTensor rules), the output quantizer, gradients, the eval-mode scale check, keyword
routing, tied and shared quantizers, disabled quantization (exactly the float op), state_dict
round trips and bad arguments, in both JIT modes."""

import inspect
import math

import pytest
import torch
from helpers import assert_same, rand, ref_int_quant

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.nn.quant_eltwise import QuantCat, QuantEltwiseAdd
from brevitas_cpp.proxy import ActQuantProxyFromInjector
from brevitas_cpp.quant import Int8ActPerTensorFloat
from brevitas_cpp.quant_tensor import IntQuantTensor

ZERO = torch.tensor(0.0)
MOMENTUM = 0.1


# ---- references ---------------------------------------------------------------------------------


def ref_stat(y):
    """99.999th percentile of |y| (rank floor(q/100 n + 0.5)); float32 or wider, min 1e-10."""
    k = int(math.floor(0.01 * 99.999 * y.numel() + 0.5))
    stat = torch.kthvalue(y.abs().reshape(-1), k).values
    return stat.to(torch.promote_types(stat.dtype, torch.float32)).clamp_min(1e-10)


def ref_act(y, scale, bit_width=8):
    """Signed activation quantization on a given scale."""
    return ref_int_quant(y, scale, ZERO.to(y.dtype), torch.tensor(float(bit_width)), True, False)


def batch_scale(y, bit_width=8):
    return ref_stat(y) / float(2 ** (bit_width - 1))


def running(*stats):
    """The quantizer's running statistic after collecting stats in this order (momentum 0.1)."""
    buf = stats[0].clone()
    for s in stats[1:]:
        buf.mul_(1 - MOMENTUM).add_(MOMENTUM * s)
    return buf


def int_qt(value, scale, bit_width=8, signed=True, training=True):
    return IntQuantTensor(
        value,
        torch.tensor(scale),
        torch.tensor(0.0),
        torch.tensor(float(bit_width)),
        signed,
        training,
    )


def grid(shape, scale, seed, bit_width=8):
    """Values on a signed grid: random ints in range times scale."""
    g = torch.Generator().manual_seed(seed)
    ints = torch.randint(-(2 ** (bit_width - 1)), 2 ** (bit_width - 1), shape, generator=g)
    return ints.float() * torch.tensor(scale)


# ---- construction -------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [QuantEltwiseAdd, QuantCat])
def test_defaults_as_brevitas(cls):
    params = inspect.signature(cls.__init__).parameters
    assert params["input_quant"].default is Int8ActPerTensorFloat
    assert params["output_quant"].default is Int8ActPerTensorFloat
    assert params["tie_input_output_quant"].default is False
    assert params["return_quant_tensor"].default is False
    m = cls()
    assert isinstance(m.input_quant, ActQuantProxyFromInjector)
    assert isinstance(m.output_quant, ActQuantProxyFromInjector)
    assert m.input_quant is not m.output_quant
    assert m.input_quant.is_quant_enabled and m.output_quant.is_quant_enabled
    assert m.input_quant.is_signed and m.output_quant.is_signed
    assert m.channelwise_separable is True and m.return_quant_tensor is False
    if JIT_ENABLED:
        for proxy in (m.input_quant, m.output_quant):
            assert isinstance(
                proxy.fused_activation_quant_proxy.tensor_quant, torch.jit.ScriptModule
            )


# ---- QuantEltwiseAdd -----------------------------------------------------------------------------


def test_add_training_step_quantizes_each_operand_with_its_batch_scale():
    m = QuantEltwiseAdd(return_quant_tensor=True)
    a, b = rand((3, 4), seed=1), rand((3, 4), seed=2, spread=2.0)
    out = m(a, b)
    sa, sb = batch_scale(a), batch_scale(b)
    total = ref_act(a, sa) + ref_act(b, sb)
    # The output quantizer sees the sum (a QuantTensor's value) and takes its own batch scale.
    assert torch.equal(out.value, ref_act(total, batch_scale(total)))
    assert torch.equal(out.scale, batch_scale(total))
    assert torch.equal(out.bit_width, torch.tensor(8.0)) and out.signed and out.training


def test_add_metadata_of_the_sum_without_output_quant():
    # Sum of two signed 8-bit tensors: mean scale, bit width ceil(log2(2 * 127 + 2 * 128)) = 9.
    m = QuantEltwiseAdd(output_quant=None, return_quant_tensor=True)
    a, b = rand((2, 5), seed=3), rand((2, 5), seed=4, spread=3.0)
    out = m(a, b)
    sa, sb = batch_scale(a), batch_scale(b)
    assert torch.equal(out.value, ref_act(a, sa) + ref_act(b, sb))
    assert torch.equal(out.scale, (sa + sb) / 2)
    assert torch.equal(out.zero_point, torch.tensor(0.0))
    assert torch.equal(out.bit_width, torch.tensor(9.0))


def test_add_eval_uses_one_running_scale_for_both_operands():
    m = QuantEltwiseAdd(output_quant=None, return_quant_tensor=True)
    a, b = rand((2, 6), seed=5), rand((2, 6), seed=6, spread=2.0)
    m(a, b)  # one step: the input quantizer collected a, then b
    m.eval()
    s = running(ref_stat(a), ref_stat(b)) / 128.0
    c, d = rand((2, 6), seed=7), rand((2, 6), seed=8)
    out = m(c, d)
    assert torch.equal(out.scale, s)
    assert torch.equal(out.value, ref_act(c, s) + ref_act(d, s))
    assert out.training is False


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_add_gradients(dtype):
    m = QuantEltwiseAdd().to(dtype)
    a = rand((3, 5), dtype, seed=9).requires_grad_()
    b = rand((3, 5), dtype, seed=10, spread=2.0).requires_grad_()
    g = rand((3, 5), dtype, seed=11)
    out = m(a, b)
    ga, gb = torch.autograd.grad(out, [a, b], g)

    def ref(x, y):
        total = ref_act(x, batch_scale(x)) + ref_act(y, batch_scale(y))
        return ref_act(total, batch_scale(total))

    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    r = ref(a2, b2)
    ra, rb = torch.autograd.grad(r, [a2, b2], g)
    assert torch.equal(out.detach(), r.detach())
    # The fused op sums the scale gradient in another order: float rounding only.
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(ga, ra, **tol)
    torch.testing.assert_close(gb, rb, **tol)


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.float64, torch.float16, torch.bfloat16],
    ids=["f32", "f64", "f16", "bf16"],
)
def test_add_disabled_is_the_float_sum(dtype):
    m = QuantEltwiseAdd(input_quant=None, output_quant=None)
    a = rand((3, 4), dtype, seed=12).requires_grad_()
    b = rand((3, 4), dtype, seed=13).requires_grad_()
    out = m(a, b)
    assert_same(out, a + b)
    ga, gb = torch.autograd.grad(out, [a, b], torch.ones_like(out))
    assert_same(ga, torch.ones_like(a))
    assert_same(gb, torch.ones_like(b))


def test_add_quant_tensors_without_input_quant():
    m = QuantEltwiseAdd(input_quant=None, output_quant=None, return_quant_tensor=True)
    qa = int_qt(grid((2, 3), 0.1, seed=14), 0.1)
    qb = int_qt(grid((2, 3), 0.3, seed=15, bit_width=4), 0.3, bit_width=4, signed=False)
    out = m(qa, qb)
    assert torch.equal(out.value, qa.value + qb.value)
    assert torch.equal(out.scale, (torch.tensor(0.1) + torch.tensor(0.3)) / 2)
    # signed 8 bit + unsigned 4 bit: range [-128, 127 + 15], ceil(log2(270)) = 9 bits.
    assert torch.equal(out.bit_width, torch.tensor(9.0)) and out.signed


def test_add_quant_tensor_and_plain_tensor_shift_the_zero_point():
    m = QuantEltwiseAdd(input_quant=None, output_quant=None, return_quant_tensor=True)
    qa = int_qt(grid((2, 3), 0.5, seed=16), 0.5)
    b = torch.full((2, 3), 1.5)
    out = m(qa, b)
    assert torch.equal(out.value, qa.value + b)
    assert torch.equal(out.zero_point, torch.tensor(0.0) - b / torch.tensor(0.5))


def test_add_eval_scale_mismatch_raises():
    m = QuantEltwiseAdd(input_quant=None, output_quant=None)
    m.eval()
    qa = int_qt(grid((2, 3), 0.1, seed=17), 0.1, training=False)
    qb = int_qt(grid((2, 3), 0.2, seed=18), 0.2, training=False)
    with pytest.raises(RuntimeError, match=r"QuantEltwiseAdd: .*same scale.*0\.1.*0\.2"):
        m(qa, qb)
    # In training the scales may still differ (their mean is taken).
    qa_train = int_qt(qa.value, 0.1, training=True)
    assert torch.equal(m(qa_train, qb), qa.value + qb.value)


def test_add_keyword_routing():
    m = QuantEltwiseAdd(input_bit_width=4, output_bit_width=6, output_collect_stats_steps=2)
    assert torch.equal(m.input_quant.bit_width(), torch.tensor(4.0))
    assert torch.equal(m.output_quant.bit_width(), torch.tensor(6.0))
    out_scaling = m.output_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl
    assert out_scaling.collect_stats_steps == 2
    a, b = rand((2, 4), seed=19), rand((2, 4), seed=20)
    total = ref_act(a, batch_scale(a, 4), 4) + ref_act(b, batch_scale(b, 4), 4)
    assert torch.equal(m(a, b), ref_act(total, batch_scale(total, 6), 6))


def test_add_unprefixed_keyword_raises():
    with pytest.raises(TypeError, match="QuantEltwiseAdd: unexpected keyword argument bitwidth"):
        QuantEltwiseAdd(bitwidth=4)


def test_tie_input_output_quant():
    m = QuantEltwiseAdd(output_quant=None, tie_input_output_quant=True)
    assert m.output_quant is m.input_quant
    m = QuantEltwiseAdd(input_quant=None, tie_input_output_quant=True)
    assert m.input_quant is m.output_quant
    with pytest.raises(ValueError, match="QuantEltwiseAdd: tie_input_output_quant=True"):
        QuantEltwiseAdd(tie_input_output_quant=True)


def test_add_shared_input_quant():
    first = QuantEltwiseAdd()
    second = QuantEltwiseAdd(input_quant=first.input_quant)
    assert second.input_quant is first.input_quant
    assert second.output_quant is not first.output_quant


def test_add_state_dict_round_trip():
    m = QuantEltwiseAdd()
    a, b = rand((2, 5), seed=21), rand((2, 5), seed=22)
    m(a, b)
    sd = m.state_dict()
    key = "fused_activation_quant_proxy.tensor_quant.scaling_impl.value"
    assert list(sd) == ["input_quant." + key, "output_quant." + key]
    total = ref_act(a, batch_scale(a)) + ref_act(b, batch_scale(b))
    assert torch.equal(sd["input_quant." + key], running(ref_stat(a), ref_stat(b)))
    assert torch.equal(sd["output_quant." + key], ref_stat(total))
    fresh = QuantEltwiseAdd()
    fresh.load_state_dict(sd)
    m.eval()
    fresh.eval()
    c, d = rand((2, 5), seed=23), rand((2, 5), seed=24)
    assert torch.equal(fresh(c, d), m(c, d))


def test_add_bad_arguments():
    with pytest.raises(TypeError, match="QuantEltwiseAdd: input_quant must be"):
        QuantEltwiseAdd(input_quant="int8")
    with pytest.raises(TypeError, match="QuantEltwiseAdd: input must be a Tensor or a QuantTensor"):
        QuantEltwiseAdd()(rand((2,)), 3.0)


# ---- QuantCat ------------------------------------------------------------------------------------


def test_cat_training_step():
    m = QuantCat(return_quant_tensor=True)
    a, b = rand((2, 3), seed=25), rand((2, 4), seed=26, spread=2.0)
    out = m([a, b])
    joined = torch.cat([ref_act(a, batch_scale(a)), ref_act(b, batch_scale(b))], dim=1)
    assert torch.equal(out.value, ref_act(joined, batch_scale(joined)))
    assert torch.equal(out.scale, batch_scale(joined))


def test_cat_metadata_without_output_quant():
    # Training: the operands' scales may differ; the concatenation takes their mean.
    m = QuantCat(output_quant=None, return_quant_tensor=True)
    a, b, c = rand((1, 2), seed=27), rand((1, 3), seed=28, spread=2.0), rand((1, 1), seed=29)
    out = m([a, b, c], dim=1)
    sa, sb, sc = batch_scale(a), batch_scale(b), batch_scale(c)
    assert torch.equal(out.value, torch.cat([ref_act(a, sa), ref_act(b, sb), ref_act(c, sc)], 1))
    assert torch.equal(out.scale, (sa + sb + sc) / 3)
    assert torch.equal(out.bit_width, torch.tensor(8.0)) and out.signed and out.training


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_eval_along_dim(dim):
    m = QuantCat(output_quant=None, return_quant_tensor=True)
    a, b = rand((2, 3), seed=30), rand((2, 3), seed=31)
    m([a, b])
    m.eval()
    s = running(ref_stat(a), ref_stat(b)) / 128.0
    out = m([b, a], dim=dim)
    assert torch.equal(out.value, torch.cat([ref_act(b, s), ref_act(a, s)], dim=dim))
    assert torch.equal(out.scale, s) and out.training is False


def test_cat_gradients():
    m = QuantCat(output_quant=None).to(torch.float64)
    a = rand((2, 3), torch.float64, seed=32).requires_grad_()
    b = rand((2, 2), torch.float64, seed=33, spread=2.0).requires_grad_()
    g = rand((2, 5), torch.float64, seed=34)
    ga, gb = torch.autograd.grad(m([a, b]), [a, b], g)
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    ref = torch.cat([ref_act(a2, batch_scale(a2)), ref_act(b2, batch_scale(b2))], dim=1)
    ra, rb = torch.autograd.grad(ref, [a2, b2], g)
    torch.testing.assert_close(ga, ra, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(gb, rb, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.float64, torch.float16, torch.bfloat16],
    ids=["f32", "f64", "f16", "bf16"],
)
def test_cat_disabled_is_torch_cat(dtype):
    m = QuantCat(input_quant=None, output_quant=None)
    a, b = rand((2, 3), dtype, seed=35), rand((2, 4), dtype, seed=36)
    assert_same(m([a, b]), torch.cat([a, b], dim=1))
    assert_same(m((a.t(), b.t()), dim=0), torch.cat([a.t(), b.t()], dim=0))


def test_cat_single_tensor():
    m = QuantCat(output_quant=None, return_quant_tensor=True)
    a = rand((2, 3), seed=37)
    assert torch.equal(m([a]).value, ref_act(a, batch_scale(a)))


def test_cat_eval_scale_mismatch_raises():
    m = QuantCat(input_quant=None, output_quant=None)
    qa = int_qt(grid((1, 2), 0.1, seed=38), 0.1, training=False)
    qb = int_qt(grid((1, 2), 0.1, seed=39), 0.1, training=False)
    qc = int_qt(grid((1, 2), 0.4, seed=40), 0.4, training=False)
    assert torch.equal(m([qa, qb]), torch.cat([qa.value, qb.value], 1))
    message = r"QuantCat: .*tensor_list\[0\] scale 0\.1.*tensor_list\[2\] scale 0\.4"
    with pytest.raises(RuntimeError, match=message):
        m([qa, qb, qc])


def test_cat_bit_width_mismatch_raises():
    m = QuantCat(input_quant=None, output_quant=None)
    qa = int_qt(grid((1, 2), 0.1, seed=41), 0.1)
    qb = int_qt(grid((1, 2), 0.1, seed=42, bit_width=4), 0.1, bit_width=4)
    with pytest.raises(RuntimeError, match="bit widths are different"):
        m([qa, qb])


def test_cat_mixed_inputs_give_a_plain_tensor():
    m = QuantCat(input_quant=None, output_quant=None)
    qa = int_qt(grid((1, 2), 0.1, seed=43), 0.1)
    b = rand((1, 3), seed=44)
    assert torch.equal(m([qa, b]), torch.cat([qa.value, b], 1))


@pytest.mark.parametrize(
    "bad",
    [torch.zeros(2, 2), [], (), 3, int_qt(torch.zeros(2), 0.1)],
    ids=["tensor", "empty list", "empty tuple", "int", "quant tensor"],
)
def test_cat_bad_tensor_list_raises(bad):
    with pytest.raises(ValueError, match="QuantCat: tensor_list must be a non-empty list"):
        QuantCat()(bad)


def test_cat_shares_the_add_input_quant():
    add = QuantEltwiseAdd()
    cat = QuantCat(input_quant=add.input_quant, output_quant=None, return_quant_tensor=True)
    a, b = rand((2, 3), seed=45), rand((2, 3), seed=46)
    add(a, b)
    cat([b, a])
    cat.eval()
    s = running(ref_stat(a), ref_stat(b), ref_stat(b), ref_stat(a)) / 128.0
    assert torch.equal(cat([a, b]).scale, s)


def test_cat_state_dict_round_trip():
    m = QuantCat()
    a, b = rand((2, 3), seed=47), rand((2, 3), seed=48)
    m([a, b])
    fresh = QuantCat()
    fresh.load_state_dict(m.state_dict())
    m.eval()
    fresh.eval()
    assert torch.equal(fresh([b, a]), m([b, a]))


def test_cat_bad_operand_raises_before_any_statistic_is_collected():
    m = QuantCat()
    with pytest.raises(TypeError, match="QuantCat: input must be a Tensor or a QuantTensor"):
        m([rand((2, 3)), "not a tensor"])
    # The valid first operand was not quantized: nothing collected, nothing to save.
    assert list(m.state_dict()) == []
