"""The activations Brevitas 0.12 has no layers for (brevitas_cpp.nn.quant_activation_more:
QuantGELU, QuantSiLU, QuantHardswish, QuantHardsigmoid, QuantLeakyReLU) against their formulas
written out in plain torch: the float activation, then the layer's output as
clamp(round(act(x) / scale), qmin, qmax) * scale with the scale of the returned QuantTensor;
gradients to the input, TorchScript against eager, bad keywords, and graph.Quantizer replacing
the float modules."""

import inspect
import math
from typing import Callable, Dict, NamedTuple, Tuple

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import brevitas_cpp.nn as qnn
from brevitas_cpp.graph import Quantizer
from brevitas_cpp.quant import Int8ActPerTensorFloat, Uint8ActPerTensorFloat
from brevitas_cpp.quant_tensor import IntQuantTensor

Act = Callable[[Tensor], Tensor]


# ---- the float activations, written out --------------------------------------------------------


def gelu_exact(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_tanh(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def silu(x: Tensor) -> Tensor:
    return x * torch.sigmoid(x)


def hardswish(x: Tensor) -> Tensor:
    return x * torch.clamp(x + 3.0, 0.0, 6.0) / 6.0


def hardsigmoid(x: Tensor) -> Tensor:
    return torch.clamp(x + 3.0, 0.0, 6.0) / 6.0


def leaky_relu(slope: float) -> Act:
    return lambda x: torch.where(x >= 0, x, slope * x)


class Case(NamedTuple):
    cls: type
    kwargs: Dict[str, object]  # the layer's own keywords
    formula: Act  # written out above
    torch_fn: Act  # what the layer's act_impl computes
    signed: bool
    default_quant: type
    float_module: Callable[[], nn.Module]  # what graph.Quantizer replaces


CASES = {
    "gelu": Case(
        qnn.QuantGELU, {}, gelu_exact, F.gelu, True, Int8ActPerTensorFloat, lambda: nn.GELU()
    ),
    "gelu-tanh": Case(
        qnn.QuantGELU,
        {"approximate": "tanh"},
        gelu_tanh,
        lambda x: F.gelu(x, approximate="tanh"),
        True,
        Int8ActPerTensorFloat,
        lambda: nn.GELU(approximate="tanh"),
    ),
    "silu": Case(
        qnn.QuantSiLU, {}, silu, F.silu, True, Int8ActPerTensorFloat, lambda: nn.SiLU(inplace=True)
    ),
    "hardswish": Case(
        qnn.QuantHardswish,
        {},
        hardswish,
        F.hardswish,
        True,
        Int8ActPerTensorFloat,
        lambda: nn.Hardswish(inplace=True),
    ),
    "hardsigmoid": Case(
        qnn.QuantHardsigmoid,
        {},
        hardsigmoid,
        F.hardsigmoid,
        False,
        Uint8ActPerTensorFloat,
        lambda: nn.Hardsigmoid(),
    ),
    "leaky_relu": Case(
        qnn.QuantLeakyReLU,
        {},
        leaky_relu(0.01),
        F.leaky_relu,
        True,
        Int8ActPerTensorFloat,
        lambda: nn.LeakyReLU(),
    ),
    "leaky_relu-0.2": Case(
        qnn.QuantLeakyReLU,
        {"negative_slope": 0.2},
        leaky_relu(0.2),
        lambda x: F.leaky_relu(x, 0.2),
        True,
        Int8ActPerTensorFloat,
        lambda: nn.LeakyReLU(0.2, inplace=True),
    ),
}
NAMES = list(CASES)


def inputs(seed: int, n: int = 96) -> Tensor:
    """Values over the activations' interesting range: a ramp through the Hardswish/Hardsigmoid
    kinks at +-3 and a seeded random draw."""
    ramp = torch.linspace(-5.0, 5.0, 65)
    draw = torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 2.5
    return torch.cat([ramp, draw]).view(1, -1)


def int_range(bit_width: int, signed: bool) -> Tuple[int, int]:
    if signed:
        return -(2 ** (bit_width - 1)), 2 ** (bit_width - 1) - 1
    return 0, 2**bit_width - 1


def quantized(y: Tensor, scale: Tensor, bit_width: int, signed: bool) -> Tensor:
    qmin, qmax = int_range(bit_width, signed)
    return torch.clamp(torch.round(y / scale), qmin, qmax) * scale


# ---- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_float_activation_is_the_formula(name):
    case = CASES[name]
    for dtype in (torch.float32, torch.float64):
        x = inputs(0).to(dtype)
        torch.testing.assert_close(case.formula(x), case.torch_fn(x))
    # With quantization off the layer is exactly the float activation.
    x = inputs(1)
    layer = case.cls(act_quant=None, **case.kwargs)
    assert type(layer(x)) is Tensor
    assert torch.equal(layer(x), case.torch_fn(x))


@pytest.mark.parametrize("name", NAMES)
def test_defaults(name):
    case = CASES[name]
    params = inspect.signature(case.cls).parameters
    assert params["act_quant"].default is case.default_quant
    assert params["input_quant"].default is None
    assert params["return_quant_tensor"].default is False
    layer = case.cls(**case.kwargs)
    assert layer.act_quant.is_quant_enabled and layer.act_quant.is_signed == case.signed
    assert not layer.input_quant.is_quant_enabled
    assert torch.equal(layer.act_quant.bit_width(), torch.tensor(8.0))


@pytest.mark.parametrize("bit_width", [8, 4])
@pytest.mark.parametrize("name", NAMES)
def test_output_is_the_quantized_activation(name, bit_width):
    case = CASES[name]
    # Two statistics steps, then the learned scale; eval mode last.
    layer = case.cls(
        return_quant_tensor=True, bit_width=bit_width, collect_stats_steps=2, **case.kwargs
    )
    for step in range(4):
        if step == 3:
            layer.eval()
        x = inputs(step)
        out = layer(x)
        assert isinstance(out, IntQuantTensor)
        assert bool(out.signed) is case.signed
        assert out.bit_width.item() == bit_width and out.zero_point.item() == 0.0
        assert out.scale.numel() == 1 and out.scale.item() > 0.0
        expected = quantized(case.torch_fn(x), out.scale, bit_width, case.signed)
        assert torch.equal(out.value, expected), step


@pytest.mark.parametrize("name", NAMES)
def test_gradients_flow_to_the_input(name):
    case = CASES[name]
    layer = case.cls(collect_stats_steps=1, **case.kwargs)
    layer(inputs(0))  # statistics step: the learned scale starts from it
    layer.eval()
    x = inputs(1).requires_grad_(True)
    layer(x).sum().backward()
    assert torch.isfinite(x.grad).all()
    # Inside the quantizer's range the rounding passes the gradient straight through, so the
    # input's gradient is the float activation's derivative.
    x_ref = x.detach().clone().requires_grad_(True)
    y = case.torch_fn(x_ref)
    (derivative,) = torch.autograd.grad(y.sum(), x_ref)
    qmin, qmax = int_range(8, case.signed)
    t = y.detach() / layer.act_quant.scale()
    inside = (t > qmin + 1) & (t < qmax - 1)
    assert inside.sum() > 50
    torch.testing.assert_close(x.grad[inside], derivative[inside])
    assert (x.grad[inside & (derivative != 0)] != 0).all()


@pytest.mark.parametrize("name", NAMES)
def test_scripted_equals_eager(name):
    case = CASES[name]

    def build() -> nn.Module:
        return case.cls(collect_stats_steps=2, **case.kwargs).train()

    eager, scripted = build(), torch.jit.script(build())
    for step in range(4):
        if step == 3:
            eager.eval()
            scripted.eval()
        x = inputs(step)
        x_eager, x_scripted = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        y_eager, y_scripted = eager(x_eager), scripted(x_scripted)
        assert torch.equal(y_scripted, y_eager), step
        weights = torch.linspace(-1.0, 1.0, x.numel()).view_as(x)
        (y_eager * weights).sum().backward()
        (y_scripted * weights).sum().backward()
        assert torch.equal(x_scripted.grad, x_eager.grad), step


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"approximate": "Tanh"}, r"approximate must be one of \('none', 'tanh'\).*'Tanh'"),
        ({"approximate": None}, r"approximate must be one of \('none', 'tanh'\)"),
    ],
)
def test_bad_approximate(kwargs, match):
    with pytest.raises(ValueError, match=match):
        qnn.QuantGELU(**kwargs)


@pytest.mark.parametrize("slope", [float("nan"), float("inf"), -float("inf"), "0.1", True])
def test_bad_negative_slope(slope):
    with pytest.raises(ValueError, match="negative_slope must be a finite real number"):
        qnn.QuantLeakyReLU(negative_slope=slope)


@pytest.mark.parametrize("name", ["silu", "hardswish", "hardsigmoid", "leaky_relu"])
def test_inplace_is_not_a_keyword(name):
    case = CASES[name]
    with pytest.raises(TypeError, match="inplace"):
        case.cls(inplace=True, **case.kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_quantizer_replaces_the_float_activation(name):
    case = CASES[name]
    float_act = case.float_module()
    model = nn.Sequential(nn.Flatten(), float_act)
    Quantizer(model, bits_activations=6).prepare_model()
    layer = model[1]
    assert type(layer) is case.cls
    assert layer.act_quant.is_signed == case.signed
    assert layer.act_quant.bit_width().item() == 6
    act = layer.act_quant.fused_activation_quant_proxy.activation_impl
    for hyper in ("approximate", "negative_slope"):
        if hasattr(float_act, hyper):
            assert getattr(act, hyper) == getattr(float_act, hyper)
    assert not getattr(act, "inplace", False)
    # An inplace=True float module becomes the out-of-place layer: the input is kept.
    x = inputs(0)
    before = x.clone()
    out = model(x)
    assert torch.equal(x, before)
    assert torch.isfinite(out).all() and out.shape == x.shape
