"""torch.jit.script of each quant layer that takes and returns Tensors (return_quant_tensor=False):
the scripted layer trains from a fresh state exactly as an eager copy built with the same seed
(outputs, input gradient and every parameter gradient equal bit for bit at every step, statistics
warm-up included), then agrees in eval mode, and survives torch.jit.save/load. The settings the
TorchScript path does not cover are refused when scripting, with the layer and the setting named.
Runs in both BREVITAS_JIT modes (core blocks as plain or script modules)."""

import io
from typing import Callable, Dict, List, Optional, Tuple

import pytest
import torch
from torch import Tensor, nn

import brevitas_cpp.nn as qnn
from brevitas_cpp.quant import Int8ActPerTensorFloat, Int8WeightPerChannelFloat, Int32Bias

STEPS = 4  # two warm-up steps, the switch to the learned scale, one learned-scale step
WARMUP = {"collect_stats_steps": 2}
INPUT_WARMUP = {"input_collect_stats_steps": 2}


class _Add(nn.Module):
    """Feeds QuantEltwiseAdd two tensors made from one, as a model would."""

    def __init__(self) -> None:
        super().__init__()
        self.add = qnn.QuantEltwiseAdd(**INPUT_WARMUP)

    def forward(self, x: Tensor) -> Tensor:
        return self.add(x, 0.5 * x)


class _Cat(nn.Module):
    """Feeds QuantCat a list of tensors made from one."""

    def __init__(self) -> None:
        super().__init__()
        self.cat = qnn.QuantCat(**INPUT_WARMUP)

    def forward(self, x: Tensor) -> Tensor:
        return self.cat([x, 0.5 * x], dim=1)


class _Embed(nn.Module):
    """QuantEmbedding on indices derived from a float input, plus the input (so that the input
    gets a gradient too)."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = qnn.QuantEmbedding(10, 4)

    def forward(self, x: Tensor) -> Tensor:
        indices = (x.detach().abs() * 3).long().clamp(max=9)
        return self.embedding(indices).sum(-1) + x


def _int32_bias(**kwargs) -> Dict[str, object]:
    # Int32Bias takes input scale x weight scale: the layer quantizes its own input.
    return dict(bias_quant=Int32Bias, input_quant=Int8ActPerTensorFloat, **INPUT_WARMUP, **kwargs)


# name: (constructor, input shape)
LAYERS: Dict[str, Tuple[Callable[[], nn.Module], Tuple[int, ...]]] = {
    "QuantLinear": (lambda: qnn.QuantLinear(6, 5, **_int32_bias()), (3, 6)),
    "QuantLinear-no-bias-output-quant": (
        lambda: qnn.QuantLinear(
            6, 5, bias=False, output_quant=Int8ActPerTensorFloat, output_collect_stats_steps=2
        ),
        (3, 6),
    ),
    "QuantConv1d": (lambda: qnn.QuantConv1d(3, 4, 3, **_int32_bias()), (2, 3, 9)),
    "QuantConv2d-same-strided": (
        lambda: qnn.QuantConv2d(3, 4, 3, stride=2, padding="same", **_int32_bias()),
        (2, 3, 9, 8),
    ),
    "QuantConv2d-per-channel-grouped": (
        lambda: qnn.QuantConv2d(4, 4, 3, groups=2, weight_quant=Int8WeightPerChannelFloat),
        (2, 4, 6, 6),
    ),
    "QuantConv3d": (lambda: qnn.QuantConv3d(3, 4, 2, bias=False), (2, 3, 4, 4, 4)),
    "QuantConvTranspose1d": (
        lambda: qnn.QuantConvTranspose1d(3, 4, 3, stride=2, **_int32_bias()),
        (2, 3, 5),
    ),
    "QuantConvTranspose2d": (
        lambda: qnn.QuantConvTranspose2d(3, 4, 3, stride=2, output_padding=1, **_int32_bias()),
        (2, 3, 4, 5),
    ),
    "QuantConvTranspose3d": (lambda: qnn.QuantConvTranspose3d(3, 2, 2), (1, 3, 3, 3, 3)),
    "QuantIdentity": (lambda: qnn.QuantIdentity(**WARMUP), (3, 7)),
    "QuantReLU": (lambda: qnn.QuantReLU(**WARMUP), (3, 7)),
    "QuantReLU-float": (lambda: qnn.QuantReLU(act_quant=None), (3, 7)),
    "QuantSigmoid-input-quant": (
        lambda: qnn.QuantSigmoid(input_quant=Int8ActPerTensorFloat, **WARMUP, **INPUT_WARMUP),
        (3, 7),
    ),
    "QuantTanh": (lambda: qnn.QuantTanh(**WARMUP), (3, 7)),
    "QuantHardTanh": (lambda: qnn.QuantHardTanh(min_val=-0.5, max_val=0.5), (3, 7)),
    "QuantHardTanh-float": (
        lambda: qnn.QuantHardTanh(act_quant=None, min_val=-0.5, max_val=0.5),
        (3, 7),
    ),
    "QuantEltwiseAdd": (_Add, (3, 7)),
    "QuantCat": (_Cat, (3, 7)),
    "QuantScaleBias": (lambda: qnn.QuantScaleBias(3, True, **_int32_bias()), (2, 3, 4, 4)),
    "BatchNorm1dToQuantScaleBias": (lambda: qnn.BatchNorm1dToQuantScaleBias(3), (2, 3, 5)),
    "BatchNorm2dToQuantScaleBias": (lambda: qnn.BatchNorm2dToQuantScaleBias(3), (2, 3, 4, 4)),
    "TruncAvgPool2d-float": (
        lambda: qnn.TruncAvgPool2d(2, trunc_quant=None, return_quant_tensor=False),
        (2, 3, 4, 4),
    ),
    "TruncAdaptiveAvgPool2d-float": (
        lambda: qnn.TruncAdaptiveAvgPool2d(2, trunc_quant=None, return_quant_tensor=False),
        (2, 3, 5, 5),
    ),
    "QuantUpsample-nearest": (
        lambda: qnn.QuantUpsample(scale_factor=2, return_quant_tensor=False),
        (2, 3, 3, 3),
    ),
    "QuantUpsamplingNearest2d": (
        lambda: qnn.QuantUpsamplingNearest2d(scale_factor=2, return_quant_tensor=False),
        (2, 3, 3, 3),
    ),
    "QuantEmbedding": (_Embed, (3, 5)),
}


def _build(constructor: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return constructor().train()


def _run(model: nn.Module, x: Tensor) -> Tuple[Tensor, Tensor, List[Optional[Tensor]]]:
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    y = model(x)
    (y * torch.linspace(-1.0, 1.0, y.numel()).view_as(y)).sum().backward()
    return y.detach(), x.grad, [p.grad for p in model.parameters()]


def _assert_same(expected, actual) -> None:
    (y, x_grad, grads), (y_s, x_grad_s, grads_s) = expected, actual
    assert torch.equal(y_s, y)
    assert torch.equal(x_grad_s, x_grad)
    assert len(grads_s) == len(grads)
    for g, g_s in zip(grads, grads_s):
        assert (g is None) == (g_s is None)
        assert g is None or torch.equal(g_s, g)


def _assert_scripted_matches(eager: nn.Module, scripted: nn.Module, shape: Tuple[int, ...]) -> None:
    def sgd(model: nn.Module) -> Callable[[], None]:
        params = list(model.parameters())  # none for float activations and pooling
        return torch.optim.SGD(params, lr=0.05).step if params else (lambda: None)

    eager_step, scripted_step = sgd(eager), sgd(scripted)
    for step in range(STEPS):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(step))
        _assert_same(_run(eager, x), _run(scripted, x))
        eager_step()
        scripted_step()
    eager.eval()
    scripted.eval()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(STEPS))
    _assert_same(_run(eager, x), _run(scripted, x))


@pytest.mark.parametrize("name", list(LAYERS))
def test_scripted_layer_trains_and_evaluates_like_the_eager_one(name):
    constructor, shape = LAYERS[name]
    _assert_scripted_matches(_build(constructor), torch.jit.script(_build(constructor)), shape)


@pytest.mark.parametrize(
    "name",
    [
        "QuantConv2d-same-strided",
        "QuantConvTranspose2d",
        "QuantSigmoid-input-quant",
        "QuantCat",
        "QuantScaleBias",
        "QuantEmbedding",
    ],
)
def test_saved_scripted_layer_trains_like_the_eager_one(name):
    constructor, shape = LAYERS[name]
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(_build(constructor)), buffer)
    buffer.seek(0)
    _assert_scripted_matches(_build(constructor), torch.jit.load(buffer), shape)


def test_transposed_conv_output_size_scripts():
    def build():
        return _build(lambda: qnn.QuantConvTranspose2d(3, 4, 3, stride=2))

    class WithOutputSize(nn.Module):
        def __init__(self, layer: nn.Module) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: Tensor) -> Tensor:
            return self.layer(x, output_size=[10, 10])

    eager, scripted = WithOutputSize(build()), torch.jit.script(WithOutputSize(build()))
    x = torch.randn(2, 3, 4, 4)
    expected = _run(eager, x)
    assert expected[0].shape[-2:] == (10, 10)
    _assert_same(expected, _run(scripted, x))


def _shared_proxy_model() -> nn.Module:
    first = qnn.QuantReLU()
    return nn.Sequential(first, qnn.QuantReLU(act_quant=first.act_quant))


# constructor, what the error names
REFUSED = {
    "return_quant_tensor": (
        lambda: qnn.QuantLinear(3, 4, return_quant_tensor=True),
        ["QuantLinear", "return_quant_tensor=True"],
    ),
    "bias-needs-input-scale": (
        lambda: qnn.QuantConv2d(3, 4, 3, bias_quant=Int32Bias),
        ["QuantConv2d", "Int32Bias", "input_quant="],
    ),
    "truncation": (
        lambda: qnn.TruncAvgPool2d(2, return_quant_tensor=False),
        ["TruncAvgPool2d", "trunc_quant"],
    ),
    "bilinear-upsampling": (
        lambda: qnn.QuantUpsamplingBilinear2d(scale_factor=2, return_quant_tensor=False),
        ["QuantUpsamplingBilinear2d", "mode='bilinear'"],
    ),
    "default-upsample-returns-quant-tensor": (
        lambda: qnn.QuantUpsample(scale_factor=2),
        ["QuantUpsample", "return_quant_tensor=True"],
    ),
    "embedding-return_quant_tensor": (
        lambda: qnn.QuantEmbedding(3, 4, return_quant_tensor=True),
        ["QuantEmbedding", "return_quant_tensor=True"],
    ),
    "tied-input-output-quant": (
        lambda: qnn.QuantEltwiseAdd(output_quant=None, tie_input_output_quant=True),
        ["QuantEltwiseAdd", "tie_input_output_quant=True"],
    ),
    "shared-proxy": (_shared_proxy_model, ["ActQuantProxyFromInjector", "shared by 2 layers"]),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_unsupported_settings_are_refused_when_scripting(name):
    constructor, names = REFUSED[name]
    model = constructor()
    with pytest.raises(RuntimeError, match="torch.jit.script of") as info:
        torch.jit.script(model)
    for what in names:
        assert what in str(info.value)
