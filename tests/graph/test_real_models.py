"""Automatic quantization of torchvision-structured models (torchvision itself needs a CUDA
torch from the package index, so its ResNet-18 and MobileNetV2 blocks are written out here with
torchvision's module names): replacement, the residual adds quantized by insertion, a QAT step,
torch.jit.trace save/load, and DDP-style state round trips."""

import io
import warnings

import torch
import torch.nn.functional as F
from graph_models import ResNet18
from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.graph import Quantizer, QuantizerInsertion, trace


class InvertedResidual(nn.Module):
    """MobileNetV2's block: expand, depthwise, project; ReLU6; a residual add when it fits."""

    def __init__(self, inp: int, oup: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = inp * expand
        self.use_res_connect = stride == 1 and inp == oup
        self.conv = nn.Sequential(
            nn.Conv2d(inp, hidden, 1, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, oup, 1, bias=False),
            nn.BatchNorm2d(oup),
        )

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6()),
            InvertedResidual(16, 16, 1, 4),
            InvertedResidual(16, 24, 2, 4),
            InvertedResidual(24, 24, 1, 4),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(24, 10))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def _qat_step(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    before = {k: v.clone() for k, v in model.state_dict().items() if v.is_floating_point()}
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    changed = [
        k for k, v in model.state_dict().items() if k in before and not torch.equal(v, before[k])
    ]
    assert any(k.endswith(".weight") for k in changed)


def _traced_round_trip(model, x):
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model, x)
        buffer = io.BytesIO()
        torch.jit.save(traced, buffer)
        buffer.seek(0)
        loaded = torch.jit.load(buffer)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_resnet18_is_quantized_trained_and_traced():
    torch.manual_seed(0)
    model = ResNet18()
    x = torch.randn(4, 3, 32, 32)
    graph = trace(model, x)
    # out += identity, as NNCF names it.
    adds = [n.scope for n in graph.nodes if n.op == "__iadd__"]
    assert adds[0] == "ResNet18/Sequential[layer1]/BasicBlock[0]/__iadd___0" and len(adds) == 8
    quantizer = Quantizer(
        model, bits_weights=4, bits_activations=8, overrides={"conv1": 8, "fc": 8}
    )
    quantizer.prepare_model()
    convs = [m for m in model.modules() if isinstance(m, qnn.QuantConv2d)]
    assert len(convs) == 20 and isinstance(model.fc, qnn.QuantLinear)
    assert model.layer2[0].downsample[0].quant_weight().bit_width.item() == 4
    assert model.conv1.quant_weight().bit_width.item() == 8
    insertion = QuantizerInsertion(model, x)
    for scope in adds:
        insertion.quantize_inputs(scope)
    insertion.apply()
    _qat_step(model, x, torch.randint(0, 10, (4,)))
    _traced_round_trip(model, x)


def test_mobilenet_v2_blocks_are_quantized_and_trained():
    torch.manual_seed(0)
    model = MobileNetV2Tiny()
    x = torch.randn(4, 3, 16, 16)
    Quantizer(model, bits_weights=8, bits_activations=8).prepare_model()
    depthwise = model.features[1].conv[3]
    assert isinstance(depthwise, qnn.QuantConv2d) and depthwise.groups == depthwise.in_channels
    relu6 = model.features[1].conv[2]
    assert isinstance(relu6, qnn.QuantReLU) and (relu6.act_quant.scale() * 255).item() > 5.9
    graph = trace(model, x)
    in_blocks = [n for n in graph.nodes if n.module_scope.rsplit("/", 1)[-1].startswith("Inverted")]
    adds = [n.scope for n in in_blocks if n.op == "__add__"]
    assert adds == [
        "MobileNetV2Tiny/Sequential[features]/InvertedResidual[1]/__add___0",
        "MobileNetV2Tiny/Sequential[features]/InvertedResidual[3]/__add___0",
    ]
    insertion = QuantizerInsertion(model, x)
    for scope in adds:
        insertion.quantize_inputs(scope)
    insertion.apply()
    _qat_step(model, x, torch.randint(0, 10, (4,)))
    _traced_round_trip(model, x)


def test_transformer_encoder_linears_are_quantized():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
    model = nn.Sequential(layer)
    Quantizer(model).prepare_model()
    # The feed-forward linears are replaced, and the attention as a whole (its out_proj, a
    # Linear subclass the float attention reads directly, is never replaced on its own).
    assert isinstance(layer.linear1, qnn.QuantLinear) and isinstance(layer.linear2, qnn.QuantLinear)
    assert type(layer.self_attn) is qnn.QuantMultiheadAttention
    assert type(layer.self_attn.out_proj) is qnn.QuantLinear
    x = torch.randn(2, 5, 16)
    model.train()
    out = model(x)
    out.sum().backward()
    assert layer.linear1.weight.grad is not None


def test_transformer_encoder_residual_adds_get_quantizers():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
    model = nn.Sequential(layer)
    Quantizer(model).prepare_model()
    model.train()
    x = torch.randn(2, 5, 16)
    graph = trace(model, x)
    scope = "Sequential/TransformerEncoderLayer[0]"
    adds = [n.scope for n in graph.nodes if n.module_scope == scope and n.op == "__add__"]
    assert adds == [f"{scope}/__add___0", f"{scope}/__add___1"]  # the two residual connections
    insertion = QuantizerInsertion(model, x)
    for add in adds:
        insertion.quantize_inputs(add)
    insertion.apply()
    out = model(x)
    out.square().mean().backward()
    assert layer.linear2.weight.grad is not None
    assert all(q.act_quant.is_quant_enabled for q in model.inserted_quantizers.values())


def test_transformer_fast_path_does_not_skip_the_quantized_linears():
    """In eval mode without gradients, torch's TransformerEncoderLayer runs a fused kernel on
    linear1/linear2's float weights; the quantized layer must not take it."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True)
    float_layer = nn.TransformerEncoderLayer(
        d_model=16, nhead=2, dim_feedforward=32, batch_first=True
    )
    float_layer.load_state_dict(layer.state_dict())
    encoder = nn.TransformerEncoder(layer, num_layers=1, enable_nested_tensor=False)
    Quantizer(encoder, bits_weights=2).prepare_model()
    encoder.eval(), float_layer.eval()
    x = torch.randn(2, 5, 16)
    with_grad = encoder(x)
    with torch.no_grad():
        without_grad = encoder(x)
        float_out = float_layer(x)
    # The attention's own fused kernel (its weights are float) rounds differently: close, and
    # far from the float layer, whose output the bypass would give exactly.
    torch.testing.assert_close(without_grad, with_grad.detach(), rtol=0.0, atol=1e-5)
    assert (without_grad - float_out).abs().max() > 0.05
