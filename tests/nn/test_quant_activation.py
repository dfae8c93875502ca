"""Quantized activation layers (brevitas_cpp.nn.quant_activation) against their formulas written
out in plain torch: forward bit for bit during and after statistics collection, gradients to the
input and to the learned scale, QuantTensor inputs and outputs, keyword routing, disabled
quantization (exactly the float activation), shared proxies, state_dict round trips, train/eval,
dtypes, bad arguments and scripting under BREVITAS_JIT=1."""

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_same, brevitas_format, rand, ref_int_quant

from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.nn.quant_activation import (
    QuantHardTanh,
    QuantIdentity,
    QuantReLU,
    QuantSigmoid,
    QuantTanh,
)
from brevitas_cpp.proxy import ActQuantProxyFromInjector
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8ActPerTensorFloatMinMaxInit,
    Uint8ActPerTensorFloat,
    Uint8ActPerTensorFloatMaxInit,
)
from brevitas_cpp.quant_tensor import IntQuantTensor

ZERO = torch.tensor(0.0)
MOMENTUM = 0.1  # Brevitas's default scaling_stats_momentum
FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DTYPE_IDS = ["f32", "f64", "f16", "bf16"]

# layer class -> (float activation, signed output, default act_quant)
LAYERS = {
    "relu": (QuantReLU, F.relu, False, Uint8ActPerTensorFloat),
    "sigmoid": (QuantSigmoid, torch.sigmoid, False, Uint8ActPerTensorFloat),
    "tanh": (QuantTanh, torch.tanh, True, Int8ActPerTensorFloat),
    "identity": (QuantIdentity, lambda x: x, True, Int8ActPerTensorFloat),
}


# ---- references ---------------------------------------------------------------------------------


def int_threshold(bit_width: int, signed: bool) -> float:
    """What a per-tensor scale divides the statistic by: 2^(b-1) signed, 2^b - 1 unsigned."""
    return float(2 ** (bit_width - 1)) if signed else float(2**bit_width - 1)


def ref_stat(y: torch.Tensor) -> torch.Tensor:
    """The 99.999th percentile of |y| (Brevitas's rank: floor(q/100 * n + 0.5), 1-indexed), clamped
    to scaling_min_val 1e-10."""
    k = int(math.floor(0.01 * 99.999 * y.numel() + 0.5))
    stat = torch.kthvalue(y.abs().reshape(-1), k).values
    # Brevitas adds 0 * (the float32 learned scale) to the statistic, so a float16 or bfloat16
    # statistic continues in float32.
    stat = stat.to(torch.promote_types(stat.dtype, torch.float32))
    return stat.clamp_min(1e-10)


def ref_collecting(y: torch.Tensor, bit_width: int = 8, signed: bool = False) -> torch.Tensor:
    """A statistics-collecting training step: scale from this batch, then the int quantizer."""
    scale = ref_stat(y) / int_threshold(bit_width, signed)
    return ref_int_quant(y, scale, ZERO.to(y.dtype), torch.tensor(float(bit_width)), signed, False)


def ref_fixed(
    y: torch.Tensor, scale: torch.Tensor, bit_width: int = 8, signed: bool = False
) -> torch.Tensor:
    return ref_int_quant(y, scale, ZERO.to(y.dtype), torch.tensor(float(bit_width)), signed, False)


def scaling_impl(layer):
    return layer.act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl


def kind(module) -> str:
    """A submodule's class name (under BREVITAS_JIT=1 submodules of a scripted module are
    RecursiveScriptModules that keep it as original_name)."""
    if isinstance(module, torch.jit.RecursiveScriptModule):
        return module.original_name
    return type(module).__name__


def grad_of(fn, *leaves, g):
    """fn's output and the gradients of sum(out * g) to fresh copies of leaves."""
    copies = [t.detach().clone().requires_grad_() for t in leaves]
    out = fn(*copies)
    grads = torch.autograd.grad(out, copies, g)
    return out.detach(), grads


# ---- construction -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(LAYERS))
def test_defaults_as_brevitas(name):
    cls, _, signed, default_quant = LAYERS[name]
    params = inspect.signature(cls.__init__).parameters
    assert params["act_quant"].default is default_quant
    assert params["return_quant_tensor"].default is False
    if cls is not QuantIdentity:
        assert params["input_quant"].default is None
    m = cls()
    assert isinstance(m.act_quant, ActQuantProxyFromInjector)
    assert m.act_quant.is_quant_enabled and m.act_quant.is_signed == signed
    assert not m.input_quant.is_quant_enabled
    assert m.return_quant_tensor is False
    assert torch.equal(m.act_quant.bit_width(), torch.tensor(8.0))
    if JIT_ENABLED:
        assert isinstance(
            m.act_quant.fused_activation_quant_proxy.tensor_quant, torch.jit.ScriptModule
        )
    assert not isinstance(m, torch.jit.ScriptModule)  # the layers themselves stay eager


def test_hardtanh_defaults_and_folded_activation():
    assert (
        inspect.signature(QuantHardTanh.__init__).parameters["act_quant"].default
        is Int8ActPerTensorFloatMinMaxInit
    )
    m = QuantHardTanh(min_val=-0.5, max_val=0.5)
    # The quantizer's clamp is the HardTanh: no separate float activation runs.
    assert kind(m.act_quant.fused_activation_quant_proxy.activation_impl) == "Identity"
    assert m.act_quant.is_signed
    if JIT_ENABLED:
        assert isinstance(
            m.act_quant.fused_activation_quant_proxy.tensor_quant, torch.jit.ScriptModule
        )
    # Scale initialised to max(|min_val|, |max_val|) / 2^7.
    assert torch.equal(m.act_quant.scale(), torch.tensor(0.5) / 128.0)


@pytest.mark.parametrize(
    "name, act_name",
    [("relu", "ReLU"), ("sigmoid", "Sigmoid"), ("tanh", "Tanh"), ("identity", "Identity")],
)
def test_activation_runs_before_the_quantizer(name, act_name):
    m = LAYERS[name][0]()
    assert kind(m.act_quant.fused_activation_quant_proxy.activation_impl) == act_name


# ---- forward and backward during statistics collection -------------------------------------------


@pytest.mark.parametrize("name", list(LAYERS))
def test_first_training_step_scale_from_batch(name):
    cls, act, signed, _ = LAYERS[name]
    m = cls(return_quant_tensor=True)
    x = rand((4, 3, 5), seed=1, spread=2.0)
    out = m(x)
    y = act(x)
    expected_scale = ref_stat(y) / int_threshold(8, signed)
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, ref_collecting(y, signed=signed))
    assert torch.equal(out.scale, expected_scale)
    assert torch.equal(out.zero_point, torch.tensor(0.0))
    assert torch.equal(out.bit_width, torch.tensor(8.0))
    assert out.signed == signed and out.training is True


def test_relu_statistic_is_a_percentile_not_the_max():
    # 150000 elements: rank floor(0.99999 * 150000 + 0.5) = 149999, the second largest |x|.
    x = rand((150000,), seed=2)
    x[7] = 100.0  # an outlier the percentile ignores
    out = QuantReLU(return_quant_tensor=True)(x)
    second = torch.topk(F.relu(x), 2).values[1]
    assert torch.equal(out.scale, second / 255.0)
    assert torch.equal(out.value, ref_collecting(F.relu(x)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
def test_relu_forward_dtypes(dtype):
    x = rand((3, 8), dtype, seed=3)
    out = QuantReLU(return_quant_tensor=True)(x)
    assert out.value.dtype == dtype
    assert_same(out.value, ref_collecting(F.relu(x)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_relu_input_gradient_through_the_batch_statistic(dtype):
    # The scale is a function of the batch: the input gets gradient through it too.
    m = QuantReLU().to(dtype)
    x = rand((5, 6), dtype, seed=4)
    g = rand((5, 6), dtype, seed=5)
    out, (gx,) = grad_of(m, x, g=g)
    ref_out, (ref_gx,) = grad_of(lambda t: ref_collecting(F.relu(t)), x, g=g)
    assert torch.equal(out, ref_out)
    # The fused op sums the scale's gradient in another order: float rounding only.
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(gx, ref_gx, **tol)


def test_eval_uses_the_running_statistic():
    m = QuantReLU(return_quant_tensor=True)
    m.eval()
    x0 = rand((2, 9), seed=6)
    # Nothing collected yet: the buffer's initial 1.0.
    assert torch.equal(m(x0).scale, torch.tensor(1.0) / 255.0)
    m.train()
    x1, x2 = rand((2, 9), seed=7), rand((2, 9), seed=8, spread=3.0)
    m(x1)
    m(x2)
    running = ref_stat(F.relu(x1)).clone()
    running.mul_(1 - MOMENTUM).add_(MOMENTUM * ref_stat(F.relu(x2)))
    m.eval()
    x3 = rand((2, 9), seed=9)
    out = m(x3)
    assert torch.equal(out.scale, running / 255.0)
    assert torch.equal(out.value, ref_fixed(F.relu(x3), running / 255.0))
    assert out.training is False
    # Eval does not update the statistic.
    assert torch.equal(m(x2).scale, running / 255.0)


# ---- after collection: learned scale -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_learned_scale_after_collection_and_its_gradient(dtype):
    m = QuantReLU(collect_stats_steps=1).to(dtype)
    x0 = rand((3, 7), dtype, seed=10)
    m(x0)  # the single collection step
    x1 = rand((3, 7), dtype, seed=11, spread=2.0)
    g = rand((3, 7), dtype, seed=12)
    value = scaling_impl(m).value
    out = m(x1)
    # Collection over: the parameter starts from the collected statistic.
    assert torch.equal(value.detach(), ref_stat(F.relu(x0)))
    gx_value = torch.autograd.grad(out, value, g)[0]

    ref_out, (ref_gvalue,) = grad_of(
        lambda v: ref_fixed(F.relu(x1), v / 255.0), ref_stat(F.relu(x0)), g=g
    )
    assert torch.equal(out.detach(), ref_out)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(gx_value, ref_gvalue, **tol)


# ---- HardTanh ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "min_val, max_val, bit_width", [(-0.5, 0.5, 8), (-1.0, 0.5, 8), (-2.0, 3.0, 4)]
)
def test_hardtanh_forward_and_gradients(min_val, max_val, bit_width):
    m = QuantHardTanh(min_val=min_val, max_val=max_val, bit_width=bit_width)
    init = torch.tensor(max(abs(min_val), abs(max_val)))
    value = scaling_impl(m).value
    assert torch.equal(value.detach(), init)
    x = rand((4, 6), seed=15, spread=2.0)
    g = rand((4, 6), seed=16)
    threshold = int_threshold(bit_width, True)
    xl = x.clone().requires_grad_()
    out = m(xl)
    gx, gv = torch.autograd.grad(out, [xl, value], g)
    ref_out, (ref_gx, ref_gv) = grad_of(
        lambda t, v: ref_fixed(t, v / threshold, bit_width, signed=True), x, init, g=g
    )
    assert torch.equal(out.detach(), ref_out)
    # Quantizer clamp, not STE: no gradient to clamped inputs.
    assert torch.equal(gx, ref_gx)
    torch.testing.assert_close(gv, ref_gv, rtol=1e-5, atol=1e-6)
    m.eval()
    assert torch.equal(m(x), ref_out)  # a learned scale: same in eval


def test_hardtanh_without_quantizer_is_nn_hardtanh():
    m = QuantHardTanh(act_quant=None, min_val=-0.5, max_val=0.25)
    x = rand((3, 8), seed=17)
    assert_same(m(x), F.hardtanh(x, -0.5, 0.25))


def test_hardtanh_without_quantizer_needs_bounds():
    with pytest.raises(TypeError, match=r"QuantHardTanh: with act_quant=None .*min_val"):
        QuantHardTanh(act_quant=None)


def test_hardtanh_with_quantizer_needs_max_val():
    with pytest.raises(Exception, match="max_val"):
        QuantHardTanh()


# ---- disabled quantization -----------------------------------------------------------------------


DISABLED = {
    "relu": (lambda: QuantReLU(act_quant=None), F.relu),
    "sigmoid": (lambda: QuantSigmoid(act_quant=None), torch.sigmoid),
    "tanh": (lambda: QuantTanh(act_quant=None), torch.tanh),
    "hardtanh": (lambda: QuantHardTanh(act_quant=None, min_val=-1.0, max_val=1.0), F.hardtanh),
    "identity": (lambda: QuantIdentity(act_quant=None), lambda x: x),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", list(DISABLED))
def test_disabled_quantization_is_the_float_activation(name, dtype):
    make, act = DISABLED[name]
    m = make()
    assert not m.act_quant.is_quant_enabled
    x = rand((3, 5), dtype, seed=18, spread=2.0)
    g = rand((3, 5), dtype, seed=19)
    out, (gx,) = grad_of(m, x, g=g)
    ref_out, (ref_gx,) = grad_of(act, x, g=g)
    assert_same(out, ref_out)
    assert_same(gx, ref_gx)


def test_disabled_identity_returns_its_input():
    x = rand((2, 3))
    assert QuantIdentity(act_quant=None)(x) is x


# ---- QuantTensor inputs and outputs --------------------------------------------------------------


def quant_input(training=True):
    value = torch.tensor([[-0.5, -0.25, 0.0, 0.25, 0.75]])
    return IntQuantTensor(
        value, torch.tensor(0.25), torch.tensor(0.0), torch.tensor(4.0), True, training
    )


def test_output_is_a_plain_tensor_by_default():
    out = QuantReLU()(rand((2, 3)))
    assert type(out) is torch.Tensor


def test_quant_tensor_input_is_requantized_from_its_value():
    qx = quant_input()
    out = QuantReLU(return_quant_tensor=True)(qx)
    ref = QuantReLU(return_quant_tensor=True)(qx.value)
    assert torch.equal(out.value, ref.value) and torch.equal(out.scale, ref.scale)


def test_passthrough_activation_keeps_the_input_quantization():
    # ReLU of a quantized tensor is on the same grid: with act_quant=None the metadata is kept.
    m = QuantReLU(act_quant=None, return_quant_tensor=True)
    m.eval()
    qx = quant_input(training=True)
    out = m(qx)
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, F.relu(qx.value))
    assert torch.equal(out.scale, qx.scale) and torch.equal(out.bit_width, qx.bit_width)
    assert out.signed is True
    assert out.training is False  # the proxy's mode


def test_non_passthrough_activation_drops_the_quantization():
    qx = quant_input()
    out = QuantSigmoid(act_quant=None)(qx)
    assert type(out) is torch.Tensor and torch.equal(out, torch.sigmoid(qx.value))
    with pytest.raises(RuntimeError, match="QuantSigmoid: return_quant_tensor=True"):
        QuantSigmoid(act_quant=None, return_quant_tensor=True)(qx)


def test_return_quant_tensor_without_quantization_raises():
    with pytest.raises(RuntimeError, match="QuantReLU: return_quant_tensor=True"):
        QuantReLU(act_quant=None, return_quant_tensor=True)(rand((2, 3)))


# ---- keyword routing -----------------------------------------------------------------------------


def test_plain_keywords_configure_act_quant():
    m = QuantReLU(act_quant=Uint8ActPerTensorFloatMaxInit, max_val=6.0, bit_width=4)
    assert torch.equal(m.act_quant.bit_width(), torch.tensor(4.0))
    assert torch.equal(m.act_quant.scale(), torch.tensor(6.0) / 15.0)
    x = rand((3, 4), seed=20, spread=4.0)
    assert torch.equal(m(x), ref_fixed(F.relu(x), torch.tensor(6.0) / 15.0, 4))


def test_prefixed_keywords_configure_input_quant():
    m = QuantReLU(input_quant=Int8ActPerTensorFloat, input_bit_width=4, return_quant_tensor=True)
    assert torch.equal(m.input_quant.bit_width(), torch.tensor(4.0))
    assert torch.equal(m.act_quant.bit_width(), torch.tensor(8.0))
    x = rand((3, 4), seed=21)
    # input quant (signed 4 bit, scale from the batch), then ReLU, then unsigned 8 bit.
    xq = ref_collecting(x, bit_width=4, signed=True)
    assert torch.equal(m(x).value, ref_collecting(F.relu(xq)))


def test_collect_stats_steps_keyword():
    m = QuantIdentity(collect_stats_steps=2)
    assert scaling_impl(m).collect_stats_steps == 2


def test_unknown_keyword_raises():
    with pytest.raises(TypeError, match="QuantReLU"):
        QuantReLU(bitwidth=4)


@pytest.mark.parametrize("bad", ["int8", 8, object()], ids=["str", "int", "object"])
def test_bad_act_quant_raises(bad):
    with pytest.raises(TypeError, match=r"QuantTanh: act_quant must be"):
        QuantTanh(act_quant=bad)


def test_bad_return_quant_tensor_raises():
    with pytest.raises(TypeError, match="QuantReLU: return_quant_tensor must be a bool"):
        QuantReLU(return_quant_tensor="yes")


def test_bad_forward_input_raises():
    with pytest.raises(TypeError, match="QuantIdentity: input must be a Tensor or a QuantTensor"):
        QuantIdentity()([1.0, 2.0])


# ---- sharing -------------------------------------------------------------------------------------


def test_shared_proxy_collects_from_both_layers():
    first = QuantReLU(return_quant_tensor=True)
    second = QuantReLU(act_quant=first.act_quant, return_quant_tensor=True)
    assert second.act_quant is first.act_quant
    assert first.act_quant.tracked_module_list == [first, second]
    x1, x2 = rand((2, 5), seed=22), rand((2, 5), seed=23, spread=2.0)
    first(x1)
    second(x2)
    running = ref_stat(F.relu(x1)).clone()
    running.mul_(1 - MOMENTUM).add_(MOMENTUM * ref_stat(F.relu(x2)))
    first.eval()
    second.eval()
    x3 = rand((2, 5), seed=24)
    assert torch.equal(first(x3).scale, running / 255.0)
    assert torch.equal(second(x3).value, first(x3).value)


def test_keyword_with_a_shared_proxy_raises():
    first = QuantReLU()
    with pytest.raises(TypeError, match="QuantReLU: keyword argument bitwidth=4 can not be"):
        QuantReLU(act_quant=first.act_quant, bitwidth=4)


# ---- state_dict ----------------------------------------------------------------------------------

VALUE_KEY = "act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.value"


def test_state_dict_before_and_during_collection():
    m = QuantReLU()
    # Nothing collected yet: no scale to save (Brevitas leaves it out).
    assert list(m.state_dict()) == []
    x1, x2 = rand((2, 6), seed=25), rand((2, 6), seed=26)
    m(x1)
    m(x2)
    running = ref_stat(F.relu(x1)).clone()
    running.mul_(1 - MOMENTUM).add_(MOMENTUM * ref_stat(F.relu(x2)))
    sd = m.state_dict()
    assert list(sd) == [VALUE_KEY]
    assert torch.equal(sd[VALUE_KEY], running)

    # A Brevitas checkpoint's scale is final: collection is over, training uses it as the
    # learned parameter.
    fresh = QuantReLU()
    fresh.load_state_dict(brevitas_format(sd))
    x3 = rand((2, 6), seed=27)
    assert torch.equal(fresh(x3), ref_fixed(F.relu(x3), running / 255.0))
    fresh.eval()
    m.eval()
    assert torch.equal(fresh(x3), m(x3))
    # Ours records the collection's progress: it goes on, the third batch into the average.
    resumed = QuantReLU()
    resumed.load_state_dict(sd)
    m.train()
    assert torch.equal(resumed(x3), m(x3))
    assert torch.equal(resumed.state_dict()[VALUE_KEY], m.state_dict()[VALUE_KEY])


def test_state_dict_round_trip_of_a_learned_scale():
    m = QuantHardTanh(min_val=-1.0, max_val=1.0)
    with torch.no_grad():
        scaling_impl(m).value.fill_(0.75)
    sd = m.state_dict()
    assert list(sd) == [VALUE_KEY]
    fresh = QuantHardTanh(min_val=-1.0, max_val=1.0)
    fresh.load_state_dict(sd)
    x = rand((3, 3), seed=28)
    assert torch.equal(fresh(x), ref_fixed(x, torch.tensor(0.75) / 128.0, signed=True))


def test_loads_checkpoint_with_brevitas_legacy_proxy_name():
    m = QuantHardTanh(min_val=-1.0, max_val=1.0)
    legacy = {
        "act_quant_proxy.fused_activation_quant_proxy.tensor_quant.scaling_impl.value": torch.tensor(
            0.5
        )
    }
    m.load_state_dict(legacy)
    assert torch.equal(scaling_impl(m).value.detach(), torch.tensor(0.5))
