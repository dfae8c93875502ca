"""Activation and truncation proxies: the statistics warm-up in training and eval, fused
activations, passthrough of QuantTensor metadata, caching, state_dict round trips, truncation."""

import pytest
import torch
from helpers import ref_int_quant
from torch import nn

from brevitas_cpp import config
from brevitas_cpp.inject.enum import StatsOp
from brevitas_cpp.proxy import (
    AccQuantProxyProtocol,
    ActQuantProxyFromInjector,
    ActQuantProxyProtocol,
    DynamicActQuantProxyFromInjector,
    FusedActivationQuantProxy,
    TruncQuantProxyFromInjector,
)
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8ActPerTensorFloatMinMaxInit,
    NoneActQuant,
    NoneTruncQuant,
    RoundTo8bit,
    TruncTo8bit,
    Uint8ActPerTensorFloat,
)
from brevitas_cpp.quant_tensor import IntQuantTensor

ZERO = torch.tensor(0.0)
BW8 = torch.tensor(8.0)
MOMENTUM = 0.1  # the warm-up's default running-average momentum
VALUE_KEY = "fused_activation_quant_proxy.tensor_quant.scaling_impl.value"
# Max statistic and a 2-step warm-up: references stay short.
INT8_MAX_WARMUP2 = Int8ActPerTensorFloat.let(scaling_stats_op=StatsOp.MAX, collect_stats_steps=2)


class StandInLayer(nn.Module):
    """Activation proxies only need a layer to be attached to."""


def batches(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(6, 10, generator=g) * (i + 1) for i in range(n)]


def kind(module: nn.Module) -> str:
    """Class name of a module, also once TorchScript has compiled it (BREVITAS_JIT=1)."""
    return getattr(module, "original_name", type(module).__name__)


def int8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return ref_int_quant(x, scale, ZERO, BW8, True, False)


# ---- activations -------------------------------------------------------------------------------


def test_act_proxy_attributes():
    proxy = ActQuantProxyFromInjector(StandInLayer(), INT8_MAX_WARMUP2)
    assert proxy.is_quant_enabled and proxy.is_signed is True and proxy.is_narrow_range is False
    assert proxy.rounding_mode == "ROUND"
    # The quantizer lives in the fused module, where the state_dict has it.
    assert proxy.tensor_quant is None
    assert isinstance(proxy.fused_activation_quant_proxy, FusedActivationQuantProxy)
    assert kind(proxy.fused_activation_quant_proxy.activation_impl) == "Identity"
    assert proxy.is_passthrough_act  # no act_impl
    assert type(proxy.update_state_dict_impl).__name__ == "ConvertRuntimeStatsToParameter"
    assert isinstance(proxy, ActQuantProxyProtocol)
    assert ActQuantProxyFromInjector(StandInLayer(), Uint8ActPerTensorFloat).is_signed is False
    fused = proxy.fused_activation_quant_proxy
    assert isinstance(fused, torch.jit.ScriptModule) == config.JIT_ENABLED
    assert not isinstance(proxy, torch.jit.ScriptModule)


def test_act_warmup_then_learned_scale_train_and_eval():
    proxy = ActQuantProxyFromInjector(StandInLayer(), INT8_MAX_WARMUP2)
    x0, x1, x2, x3 = batches(4)
    stat0, stat1 = x0.abs().max(), x1.abs().max()
    # Warm-up: each training batch is quantized with its own statistic.
    out0 = proxy(x0)
    assert isinstance(out0, IntQuantTensor) and out0.signed is True and out0.training is True
    assert torch.equal(out0.scale, stat0 / 128)
    assert torch.equal(out0.value, int8(x0, stat0 / 128))
    assert torch.equal(out0.bit_width, BW8) and torch.equal(out0.zero_point, ZERO)
    # Reading the scale runs in eval: the running statistic, nothing updated.
    assert torch.equal(proxy.scale(), stat0 / 128)
    assert proxy.training
    out1 = proxy(x1)
    assert torch.equal(out1.value, int8(x1, stat1 / 128))
    running = stat0 * (1 - MOMENTUM) + MOMENTUM * stat1
    assert torch.equal(proxy.scale(), running / 128)
    # The warm-up is over: the running statistic becomes the learned scale.
    out2 = proxy(x2)
    assert torch.equal(out2.scale, running / 128)
    assert torch.equal(out2.value, int8(x2, running / 128))
    proxy.eval()
    out3 = proxy(x3)
    assert out3.training is False
    assert torch.equal(out3.value, int8(x3, running / 128))


def test_act_scale_reading_does_not_update_statistics():
    reader = ActQuantProxyFromInjector(StandInLayer(), INT8_MAX_WARMUP2)
    twin = ActQuantProxyFromInjector(StandInLayer(), INT8_MAX_WARMUP2)
    for x in batches(3):
        for _ in range(3):
            reader.scale(), reader.zero_point(), reader.bit_width()
        assert torch.equal(reader(x).value, twin(x).value)
    assert torch.equal(reader.bit_width(), BW8) and torch.equal(reader.zero_point(), ZERO)


def test_act_learned_scale_gradient():
    proxy = ActQuantProxyFromInjector(StandInLayer(), INT8_MAX_WARMUP2)
    x0, x1, x2 = batches(3)
    proxy(x0), proxy(x1)
    x = (x2 * 0.5).requires_grad_()
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(7))
    proxy(x).value.backward(g)
    value = proxy.fused_activation_quant_proxy.tensor_quant.scaling_impl.value
    v = value.detach().clone().requires_grad_()
    xr = x.detach().clone().requires_grad_()
    int8(xr, v / 128).backward(g)
    torch.testing.assert_close(value.grad, v.grad, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(x.grad, xr.grad, rtol=0, atol=0)


def test_act_fused_relu():
    quant = Uint8ActPerTensorFloat.let(act_impl=nn.ReLU, scaling_stats_op=StatsOp.MAX)
    proxy = ActQuantProxyFromInjector(StandInLayer(), quant)
    assert kind(proxy.fused_activation_quant_proxy.activation_impl) == "ReLU"
    assert not proxy.is_passthrough_act
    x = batches(1)[0]
    out = proxy(x)
    relu = torch.relu(x)
    scale = relu.max() / 255
    assert torch.equal(out.scale, scale) and out.signed is False
    assert torch.equal(out.value, ref_int_quant(relu, scale, ZERO, BW8, False, False))


def test_act_hardtanh_dropped_when_quantizer_clamps():
    quant = Int8ActPerTensorFloatMinMaxInit.let(min_val=-1.0, max_val=1.0, act_impl=nn.Hardtanh)
    proxy = ActQuantProxyFromInjector(StandInLayer(), quant)
    assert kind(proxy.fused_activation_quant_proxy.activation_impl) == "Identity"
    x = batches(1)[0]
    assert torch.equal(proxy(x).value, int8(x, torch.tensor(1.0) / 128))
    # Without a quantizer the HardTanh itself runs.
    none = ActQuantProxyFromInjector(
        StandInLayer(), NoneActQuant.let(act_impl=nn.Hardtanh, min_val=-1.0, max_val=1.0)
    )
    assert torch.equal(none(x), torch.clamp(x, -1.0, 1.0))


def test_act_quant_tensor_input_uses_its_value():
    proxy = ActQuantProxyFromInjector(StandInLayer(), INT8_MAX_WARMUP2)
    x = batches(1)[0]
    qx = IntQuantTensor(x, torch.tensor(0.3), ZERO, BW8, True, True)
    out = proxy(qx)
    assert torch.equal(out.value, int8(x, x.abs().max() / 128))


def test_passthrough_activation_keeps_input_metadata():
    quant = NoneActQuant.let(act_impl=nn.ReLU, passthrough_act=True)
    proxy = ActQuantProxyFromInjector(StandInLayer(), quant)
    assert not proxy.is_quant_enabled and proxy.is_passthrough_act
    x = batches(1)[0]
    qx = IntQuantTensor(x, torch.tensor(0.3), torch.tensor(1.0), BW8, False, True)
    proxy.eval()
    out = proxy(qx)
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, torch.relu(x))
    assert torch.equal(out.scale, qx.scale) and torch.equal(out.zero_point, qx.zero_point)
    assert torch.equal(out.bit_width, BW8) and out.signed is False and out.training is False
    plain = proxy(x)
    assert type(plain) is torch.Tensor and torch.equal(plain, torch.relu(x))
    # A non-passthrough activation drops the metadata.
    blocking = ActQuantProxyFromInjector(
        StandInLayer(), NoneActQuant.let(act_impl=nn.Sigmoid(), passthrough_act=False)
    )
    out = blocking(qx)
    assert type(out) is torch.Tensor and torch.equal(out, torch.sigmoid(x))


def test_none_act_quant_without_activation_returns_input():
    proxy = ActQuantProxyFromInjector(StandInLayer(), NoneActQuant)
    assert proxy.fused_activation_quant_proxy is None and not proxy.is_quant_enabled
    x = batches(1)[0]
    assert proxy(x) is x
    qx = IntQuantTensor(x, torch.tensor(0.3), ZERO, BW8, True, True)
    assert proxy(qx) is qx
    assert proxy.scale() is None and proxy.zero_point() is None and proxy.bit_width() is None


def test_disabled_act_quant_runs_activation_only():
    quant = Uint8ActPerTensorFloat.let(act_impl=nn.ReLU)
    proxy = ActQuantProxyFromInjector(StandInLayer(), quant)
    proxy.disable_quant = True
    assert not proxy.is_quant_enabled
    x = batches(1)[0]
    out = proxy(x)
    assert type(out) is torch.Tensor and torch.equal(out, torch.relu(x))
    assert proxy.scale() is None


def test_skip_create_quant_tensor():
    proxy = ActQuantProxyFromInjector(StandInLayer(), INT8_MAX_WARMUP2)
    proxy.skip_create_quant_tensor = True
    x = batches(1)[0]
    out = proxy(x)
    assert type(out) is torch.Tensor and torch.equal(out, int8(x, x.abs().max() / 128))


def test_act_inference_cache():
    proxy = ActQuantProxyFromInjector(StandInLayer(), INT8_MAX_WARMUP2)
    x0, x1 = batches(2)
    proxy(x0)
    proxy.eval()
    proxy.cache_inference_quant_act = True
    proxy(x1)
    assert proxy._cached_act is not None and proxy._cached_act.value is None  # metadata only
    assert torch.equal(proxy.scale(), x0.abs().max() / 128)
    assert torch.equal(proxy.bit_width(), BW8)


def test_act_state_dict_round_trip():
    proxy = ActQuantProxyFromInjector(StandInLayer(), INT8_MAX_WARMUP2)
    assert list(proxy.state_dict()) == []  # nothing collected yet
    x0, x1, x2 = batches(3)
    proxy(x0)
    # During the warm-up the running statistic is saved as the value.
    saved = proxy.state_dict()
    assert list(saved) == [VALUE_KEY] and torch.equal(saved[VALUE_KEY], x0.abs().max())
    proxy(x1), proxy(x2)
    saved = proxy.state_dict()
    fresh = ActQuantProxyFromInjector(StandInLayer(), INT8_MAX_WARMUP2)
    fresh.load_state_dict(saved, strict=True)
    # A loaded value is final: training uses it right away.
    scale = saved[VALUE_KEY] / 128
    out = fresh(x0)
    assert torch.equal(out.scale, scale) and torch.equal(out.value, int8(x0, scale))
    proxy.eval(), fresh.eval()
    assert torch.equal(proxy(x2).value, fresh(x2).value)


def test_legacy_runtime_stats_checkpoint_becomes_the_scale():
    from brevitas_cpp.proxy import utils as proxy_utils
    from brevitas_cpp.quant.solver.act import ConvertRuntimeStatsToParameter

    assert proxy_utils.ConvertRuntimeStatsToParameter is ConvertRuntimeStatsToParameter
    holder = nn.Module()
    holder.act = ActQuantProxyFromInjector(holder, INT8_MAX_WARMUP2)
    stats = "act.fused_activation_quant_proxy.tensor_quant.scaling_impl.runtime_stats."
    result = holder.load_state_dict(
        {stats + "running_stats": torch.tensor(-2.56), stats + "counter": torch.tensor(5)},
        strict=True,
    )
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert torch.equal(holder.act.scale(), torch.tensor(2.56) / 128)


def test_dynamic_act_proxy_has_no_static_scale():
    proxy = DynamicActQuantProxyFromInjector(StandInLayer(), INT8_MAX_WARMUP2)
    # Brevitas's phrase leads (code matching it keeps working), then ours.
    with pytest.raises(
        RuntimeError,
        match=r"^Scale for Dynamic Act Quant is input-dependant: "
        r"DynamicActQuantProxyFromInjector: the scale depends on the input",
    ):
        proxy.scale()
    with pytest.raises(
        RuntimeError,
        match=r"^Zero point for Dynamic Act Quant is input-dependant: .*zero point depends on",
    ):
        proxy.zero_point()


# ---- truncation --------------------------------------------------------------------------------

S_IN = torch.tensor(2.0**-10)


def accumulator(signed: bool = True, seed: int = 0) -> IntQuantTensor:
    g = torch.Generator().manual_seed(seed)
    low, high = (-(2**15), 2**15) if signed else (0, 2**16)
    ints = torch.randint(low, high, (4, 50), generator=g).float()
    # Exact halves and tie cases for the rounding after the shift.
    ints[0, :4] = (
        torch.tensor([128.0, 384.0, -128.0, -384.0])
        if signed
        else torch.tensor([128.0, 384.0, 640.0, 0.0])
    )
    return IntQuantTensor(ints * S_IN, S_IN, ZERO, torch.tensor(16.0), signed, True)


def trunc_ref(x: IntQuantTensor, rnd, lo: float, hi: float) -> torch.Tensor:
    shift = torch.tensor(2.0 ** (16 - 8))
    y_int = torch.round(x.value / x.scale + x.zero_point)
    y = torch.clamp(rnd(y_int / shift), lo, hi)
    return (y - x.zero_point / shift) * (x.scale * shift)


@pytest.mark.parametrize(
    "quant, rnd", [(TruncTo8bit, torch.floor), (RoundTo8bit, torch.round)], ids=["floor", "round"]
)
@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
def test_trunc_keeps_most_significant_bits(quant, rnd, signed):
    proxy = TruncQuantProxyFromInjector(StandInLayer(), quant)
    x = accumulator(signed)
    out = proxy(x)
    lo, hi = (-128.0, 127.0) if signed else (0.0, 255.0)
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, trunc_ref(x, rnd, lo, hi))
    assert torch.equal(out.scale, S_IN * 256) and torch.equal(out.bit_width, BW8)
    assert torch.equal(out.zero_point, ZERO) and out.signed is signed


def test_trunc_proxy_attributes_and_cache():
    proxy = TruncQuantProxyFromInjector(StandInLayer(), TruncTo8bit)
    assert proxy.is_quant_enabled and proxy.is_signed is None and proxy.is_narrow_range is False
    assert proxy.rounding_mode.upper() == "FLOOR"
    assert isinstance(proxy, AccQuantProxyProtocol)
    assert isinstance(proxy.tensor_quant, torch.jit.ScriptModule) == config.JIT_ENABLED
    x = accumulator()
    proxy(x)
    assert proxy.scale() is None  # only eval outputs are remembered
    proxy.eval()
    out = proxy(x)
    assert out.training is False
    assert torch.equal(proxy.scale(), S_IN * 256) and torch.equal(proxy.bit_width(), BW8)
    assert torch.equal(proxy.zero_point(), ZERO)


def test_trunc_gradient_is_straight_through_to_the_value():
    proxy = TruncQuantProxyFromInjector(StandInLayer(), RoundTo8bit)
    x = accumulator()
    value = x.value.clone().requires_grad_()
    g = torch.randn(value.shape, generator=torch.Generator().manual_seed(1))
    proxy(x.set(value=value)).value.backward(g)
    v = value.detach().clone().requires_grad_()
    shift = torch.tensor(256.0)
    u = v / S_IN + 0.0
    r = u + (torch.round(u) - u).detach()
    y = r / shift
    y = y + (torch.round(y) - y).detach()
    y = torch.where(y > 127.0, torch.tensor(127.0), y)
    y = torch.where(y < -128.0, torch.tensor(-128.0), y)
    ((y - 0.0) * (S_IN * shift)).backward(g)
    torch.testing.assert_close(value.grad, v.grad, rtol=0, atol=0)


def test_trunc_needs_a_quant_tensor():
    proxy = TruncQuantProxyFromInjector(StandInLayer(), TruncTo8bit)
    with pytest.raises(
        TypeError,
        match=r"TruncQuantProxyFromInjector of StandInLayer: .*expected "
        r"an IntQuantTensor, got Tensor",
    ):
        proxy(torch.randn(3))


def test_none_and_disabled_trunc_pass_through():
    x = accumulator()
    none = TruncQuantProxyFromInjector(StandInLayer(), NoneTruncQuant)
    assert not none.is_quant_enabled and none(x) is x
    proxy = TruncQuantProxyFromInjector(StandInLayer(), TruncTo8bit)
    proxy.disable_quant = True
    assert proxy(x) is x


def test_trunc_skip_create_quant_tensor():
    proxy = TruncQuantProxyFromInjector(StandInLayer(), TruncTo8bit)
    proxy.skip_create_quant_tensor = True
    x = accumulator()
    out = proxy(x)
    assert type(out) is torch.Tensor and torch.equal(out, trunc_ref(x, torch.floor, -128.0, 127.0))
