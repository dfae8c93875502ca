"""functional_quantization_mode (Brevitas's brevitas.graph.quantize name): a model's calls of
F.scaled_dot_product_attention routed to one child module while the mode is on, checked against
hand-built models that call the module themselves."""

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from brevitas_cpp import config
from brevitas_cpp.graph.quantize import functional_quantization_mode
from brevitas_cpp.nn import QuantScaledDotProductAttention, ScaledDotProductAttention

SDPA_NAME = str(F.scaled_dot_product_attention)


class TwoAttentionLayers(nn.Module):
    """Two self-attention layers, each calling F.scaled_dot_product_attention; with sdpa given,
    the hand-built equivalent that calls that module instead (the mode's routing, written out)."""

    def __init__(self, sdpa=None):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.ModuleList(nn.Linear(8, 24) for _ in range(2))
        if sdpa is not None:
            self.sdpa = sdpa

    def forward(self, x):
        for qkv in self.qkv:
            q, k, v = qkv(x).view(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
            attend = self.sdpa if "sdpa" in self._modules else F.scaled_dot_product_attention
            x = x + attend(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 5, 8)
        return x


def route_attention(model: nn.Module, enabled: bool = True) -> functional_quantization_mode:
    """The mode of Brevitas's LLM flow: F.scaled_dot_product_attention to a child module."""
    return functional_quantization_mode(
        model, {F.scaled_dot_product_attention: ScaledDotProductAttention}, enabled=enabled
    )


def _input():
    return torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))


def test_the_mode_adds_one_child_named_after_the_function_and_routes_every_call_to_it():
    model, x = TwoAttentionLayers(), _input()
    expected = model(x)
    with route_attention(model):
        child = getattr(model, SDPA_NAME)
        calls = []
        child.register_forward_hook(lambda *_: calls.append(1))
        got = model(x)
    assert isinstance(child, ScaledDotProductAttention)
    assert SDPA_NAME in dict(model.named_children())
    assert len(calls) == 2
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_a_replaced_child_quantizes_every_call_like_the_hand_built_model():
    x = _input()
    model = TwoAttentionLayers()
    mode = route_attention(model)
    torch.manual_seed(2)
    setattr(model, SDPA_NAME, QuantScaledDotProductAttention())  # what a replacement factory does
    torch.manual_seed(2)
    reference = TwoAttentionLayers(QuantScaledDotProductAttention())
    for step in range(3):  # statistics steps, then learned scales
        with mode:
            got = model(x)
        expected = reference(x)
        torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=f"step {step}")
    quant = getattr(model, SDPA_NAME)
    assert not torch.equal(got, TwoAttentionLayers()(x))  # quantized, not the float function
    assert quant.training


def test_disabled_the_mode_adds_the_child_and_routes_nothing():
    model, x = TwoAttentionLayers(), _input()
    expected = model(x)
    with route_attention(model, enabled=False):
        setattr(model, SDPA_NAME, QuantScaledDotProductAttention())
        got = model(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_an_existing_child_is_kept():
    model = TwoAttentionLayers()
    quant = QuantScaledDotProductAttention()
    model.add_module(SDPA_NAME, quant)
    with route_attention(model):
        model(_input())
    assert getattr(model, SDPA_NAME) is quant


def test_a_mode_that_routed_nothing_raises_on_exit_naming_the_function():
    model = nn.Linear(8, 8)
    with pytest.raises(RuntimeError, match="no call of .*scaled_dot_product_attention"):
        with route_attention(model):
            model(torch.randn(2, 8))


def test_an_error_inside_the_mode_is_not_replaced_by_the_exit_check():
    model = nn.Linear(8, 8)
    with pytest.raises(ValueError, match="the body's own"):
        with route_attention(model):
            raise ValueError("the body's own error")


@pytest.mark.parametrize(
    "quant_map, match",
    [
        ({}, "quant_map must map functions"),
        ([(F.scaled_dot_product_attention, ScaledDotProductAttention)], "quant_map must map"),
        ({"sdpa": ScaledDotProductAttention}, "is not a function"),
        (
            {F.scaled_dot_product_attention: ScaledDotProductAttention()},
            "must be an nn.Module class",
        ),
        ({F.scaled_dot_product_attention: dict}, "must be an nn.Module class"),
    ],
)
def test_a_bad_map_raises_naming_it(quant_map, match):
    with pytest.raises((TypeError, ValueError), match=match):
        functional_quantization_mode(nn.Linear(2, 2), quant_map)


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
def test_transformers_gpt2_attention_calls_are_routed():
    from zoo_models import torchvision_models

    if importlib.util.find_spec("torchvision") is not None:
        torchvision_models()  # transformers imports torchvision, which may not load (zoo_models)
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=16, n_positions=8)
    model = GPT2Model(config).eval()
    ids = torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(0))
    with route_attention(model):
        calls = []
        getattr(model, SDPA_NAME).register_forward_hook(lambda *_: calls.append(1))
        model(input_ids=ids)
    assert len(calls) == config.n_layer


def test_a_compiled_model_under_the_mode_equals_eager_mode():
    # Brevitas looks up getattr(model, str(func)) for every call: dynamo can not trace an
    # attribute name holding dots ("<method 'size' of 'torch._C.TensorBase' objects>").
    model, x = TwoAttentionLayers(), _input()
    mode = route_attention(model)
    setattr(model, SDPA_NAME, QuantScaledDotProductAttention())
    with mode:
        model(x)  # one statistics step
    model.eval()
    with torch.no_grad(), mode:
        expected = model(x)
        # TorchScript blocks (BREVITAS_JIT=1) break the graph: one graph with eager blocks only.
        compiled = torch.compile(model, backend="aot_eager", fullgraph=not config.JIT_ENABLED)
        got = compiled(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_the_quantizer_replaces_the_child_and_the_mode_routes_to_the_replacement():
    from brevitas_cpp.graph import Quantizer

    x = _input()
    model = TwoAttentionLayers()
    mode = route_attention(model)
    model = Quantizer(model, bits_activations=4).prepare_model()
    quant = getattr(model, SDPA_NAME)
    assert isinstance(quant, QuantScaledDotProductAttention)
    # Brevitas's defaults at the activation bit width; the score and output quantizers stay off.
    for name in ("q_scaled_quant", "k_transposed_quant", "v_quant", "attn_output_weights_quant"):
        assert getattr(quant, name).act_quant.bit_width().item() == 4
    assert not quant.softmax_input_quant.act_quant.is_quant_enabled
    assert not quant.sdpa_output_quant.act_quant.is_quant_enabled
    torch.manual_seed(3)
    reference = TwoAttentionLayers(
        QuantScaledDotProductAttention(
            q_scaled_bit_width=4,
            k_transposed_bit_width=4,
            v_bit_width=4,
            attn_output_weights_bit_width=4,
        )
    )
    reference.qkv = model.qkv
    for _ in range(2):
        with mode:
            got = model(x)
        torch.testing.assert_close(got, reference(x), rtol=0, atol=0)
