"""The minifloat quantizers (brevitas_cpp.quant.experimental) in layers: every stock class builds
where it belongs, saturates at its format's published largest value, puts values on its grid,
answers the proxies' format queries, and trains, scripts and compiles like the integer ones.

References: the formats' largest values from the OCP 8-bit floating point specification (E4M3
448, E5M2 57344) and FNUZ (E4M3 240, E5M2 57344), 480 for E4M3 with nothing reserved; the grid
enumerated from the bit fields (helpers.format_values / nearest). Brevitas's own numbers for
these quantizers are in tests/quant/golden (test_golden_float.py)."""

import inspect

import pytest
import torch
from helpers import format_values, nearest

import brevitas_cpp.quant.experimental.float as fp8
import brevitas_cpp.quant.experimental.float_quant_fnuz as fnuz
import brevitas_cpp.quant.experimental.float_quant_ocp as ocp
from brevitas_cpp.inject.injector import ExtendedInjector
from brevitas_cpp.nn import QuantIdentity, QuantLinear
from brevitas_cpp.quant_tensor import FloatQuantTensor

MODULES = (fp8, ocp, fnuz)


def stock_quantizers():
    """Every ready-made quantizer (a class with a format) of the three modules."""
    found = []
    for module in MODULES:
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or not issubclass(cls, ExtendedInjector):
                continue
            if "exponent_bit_width" in cls and "Mixin" not in name:
                found.append(cls)
    return found


STOCK = stock_quantizers()
PER_CHANNEL_2D = dict(per_channel_broadcastable_shape=(1, 4, 1, 1))


def is_act(q) -> bool:
    return "Act" in q.__name__


def layer_for(q):
    if not is_act(q):
        return QuantLinear(16, 8, bias=False, weight_quant=q)
    kwargs = PER_CHANNEL_2D if "PerChannel" in q.__name__ else {}
    return QuantIdentity(q, return_quant_tensor=True, **kwargs)


def quantize(layer, x):
    """(the proxy's FloatQuantTensor, the float tensor it quantized)."""
    if isinstance(layer, QuantLinear):
        return layer.quant_weight(), layer.weight.detach()
    return layer(x), x


def test_every_brevitas_class_is_here():
    # Brevitas 0.12.1's three modules hold 18 + 27 + 27 classes; in the OCP and FNUZ ones a mixin
    # and 10 generic bases leave the format to the user.
    assert len(STOCK) == 18 + 16 + 16


@pytest.mark.parametrize("q", STOCK, ids=lambda q: q.__name__)
def test_stock_quantizer_puts_values_on_its_grid(q):
    torch.manual_seed(0)
    layer = layer_for(q)
    x = torch.randn(2, 4, 5, 5) * 3.0 if "PerChannel" in q.__name__ else torch.randn(4, 16) * 3.0
    out, quantized = quantize(layer, x)
    assert isinstance(out, FloatQuantTensor)
    e, m, bias = int(out.exponent_bit_width), int(out.mantissa_bit_width), int(out.exponent_bias)
    assert (e, m) in ((4, 3), (5, 2))
    largest = {
        (4, 3, 7): 448.0 if out.nan_values is not None else 480.0,
        (4, 3, 8): 240.0,
        (5, 2, 15): 57344.0 if out.nan_values is not None else 114688.0,
        (5, 2, 16): 57344.0,
    }[(e, m, bias)]
    grid = format_values(e, m, bias, largest)
    # Brevitas's formula: the nearest format value to x / scale (in float32), times scale.
    scale = out.scale.detach()
    scaled = (quantized / scale).flatten().tolist()
    on_grid = torch.tensor([nearest(v, grid) for v in scaled]).view_as(quantized)
    assert torch.equal(out.value.detach(), on_grid * scale)
    assert out.signed and out.saturating and float(out.zero_point) == 0.0


@pytest.mark.parametrize(
    "q, largest",
    [
        (fp8.Fp8e4m3Weight, 480.0),
        (fp8.Fp8e5m2Weight, 114688.0),
        (ocp.Fp8e4m3OCPWeight, 448.0),
        (ocp.Fp8e5m2OCPWeight, 57344.0),
        (fnuz.Fp8e4m3FNUZWeight, 240.0),
        (fnuz.Fp8e5m2FNUZWeight, 57344.0),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_unscaled_quantizers_saturate_at_the_largest_value(q, largest):
    layer = QuantLinear(2, 1, bias=False, weight_quant=q)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1e9, -1e9]]))
    out = layer.quant_weight()
    assert float(out.scale) == 1.0
    assert out.value.tolist() == [[largest, -largest]]


@pytest.mark.parametrize(
    "q, ocp_e4m3, ocp_e5m2, fnuz_e4m3, fnuz_e5m2",
    [
        (ocp.Fp8e4m3OCPWeightPerTensorFloat, True, False, False, False),
        (ocp.Fp8e5m2OCPActPerTensorFloat, False, True, False, False),
        (fnuz.Fp8e4m3FNUZWeightPerTensorFloat, False, False, True, False),
        (fnuz.Fp8e5m2FNUZActPerTensorFloat, False, False, False, True),
        (fp8.Fp8e4m3WeightPerTensorFloat, False, False, False, False),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_proxy_format_queries(q, ocp_e4m3, ocp_e5m2, fnuz_e4m3, fnuz_e5m2):
    layer = QuantLinear(16, 8, weight_quant=q) if not is_act(q) else QuantIdentity(q)
    proxy = layer.act_quant if is_act(q) else layer.weight_quant
    assert (proxy.is_ocp_e4m3, proxy.is_ocp_e5m2) == (ocp_e4m3, ocp_e5m2)
    assert (proxy.is_fnuz_e4m3, proxy.is_fnuz_e5m2) == (fnuz_e4m3, fnuz_e5m2)
    assert proxy.is_ocp == (ocp_e4m3 or ocp_e5m2) and proxy.is_fnuz == (fnuz_e4m3 or fnuz_e5m2)
    if not is_act(q):
        assert float(proxy.bit_width()) == 8.0


def fp8_linear() -> QuantLinear:
    torch.manual_seed(0)
    return QuantLinear(
        16,
        4,
        weight_quant=ocp.Fp8e4m3OCPWeightPerChannelFloat,
        input_quant=ocp.Fp8e4m3OCPActPerTensorFloat.let(collect_stats_steps=3),
    )


def test_fp8_layer_trains_and_keeps_its_state():
    layer = fp8_linear()
    data = torch.randn(64, 16)
    target = data @ torch.randn(16, 4)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(layer(data), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    # After the statistics phase the input scale is learned, and it round-trips.
    state = layer.state_dict()
    assert "input_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.value" in state
    clone = fp8_linear()
    clone.load_state_dict(state)
    layer.eval(), clone.eval()
    assert torch.equal(clone(data), layer(data))


def test_fp8_layer_scripts_and_compiles_to_the_same_numbers():
    layer = fp8_linear()
    x = torch.randn(8, 16)
    for _ in range(4):  # past the statistics phase
        layer(x)
    expected = layer(x)
    assert torch.equal(torch.jit.script(layer)(x), expected)
    assert torch.equal(torch.compile(layer, backend="aot_eager")(x), expected)


def test_float_checkpoint_loads_strictly():
    float_layer = torch.nn.Linear(16, 4)
    layer = QuantLinear(16, 4, weight_quant=fp8.Fp8e4m3WeightPerTensorFloat)
    layer.load_state_dict(float_layer.state_dict())
    expected_scale = float_layer.weight.detach().abs().max() / 480.0
    assert torch.equal(layer.quant_weight().scale, expected_scale)


def test_qcdq_export_refuses_minifloat_layers_by_name():
    from brevitas_cpp.export import ExportError, export_onnx_qcdq

    layer = QuantLinear(4, 2, weight_quant=fp8.Fp8e4m3WeightPerTensorFloat).eval()
    with pytest.raises(ExportError, match="Fp8e4m3WeightPerTensorFloat .*FloatQuant"):
        export_onnx_qcdq(layer, torch.randn(1, 4))
