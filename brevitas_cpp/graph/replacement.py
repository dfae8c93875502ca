"""The default replacement factory: float module type -> a function building its quant layer.

Each function gets the float module and its LayerSettings, builds the brevitas_cpp.nn layer with
the same hyper-parameters, device and dtype, and gives it the float module's own Parameter
objects (so the weights are exactly the float ones, and an optimizer holding them keeps
working); the layer's quantizers are rebuilt over them. Exact types only: a subclass of a torch
layer may compute something else.

Left in float by default: BatchNorm (in QAT it keeps normalising with batch statistics; fold it
first with brevitas_cpp.graph.merge_bn), MaxPool (it keeps its input's
quantization) and the average poolings (their requantization needs QuantTensor inputs, which the
replaced layers do not return by default).
"""

from typing import Callable, Dict

from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.graph.overrides import LayerSettings
from brevitas_cpp.quant import Uint8ActPerTensorFloatMaxInit

__all__ = ["ReplacementFactory", "default_replacement_factory"]

ReplacementFactory = Dict[type, Callable[[nn.Module, LayerSettings], nn.Module]]


def _placement(module: nn.Module) -> Dict[str, object]:
    weight = module.weight
    return {"device": weight.device, "dtype": weight.dtype}


def _adopt_parameters(quant: nn.Module, module: nn.Module) -> nn.Module:
    """Give the quant layer the float module's weight and bias, when it has one (assigning one
    re-initialises the quantizer that tracks it)."""
    for name in ("weight", "bias"):
        if getattr(module, name, None) is not None:
            setattr(quant, name, getattr(module, name))
    return quant


def _conv(quant_class: type) -> Callable[[nn.Module, LayerSettings], nn.Module]:
    """The builder of a convolution or transposed convolution's quant layer."""

    def build(module: nn.Module, settings: LayerSettings) -> nn.Module:
        transposed = {"output_padding": module.output_padding} if module.transposed else {}
        quant = quant_class(
            module.in_channels,
            module.out_channels,
            module.kernel_size,
            stride=module.stride,
            padding=module.padding,
            dilation=module.dilation,
            groups=module.groups,
            padding_mode=module.padding_mode,
            bias=module.bias is not None,
            **transposed,
            **_placement(module),
            **settings.weight_layer_kwargs(),
        )
        return _adopt_parameters(quant, module)

    return build


def _linear(module: nn.Linear, settings: LayerSettings) -> nn.Module:
    quant = qnn.QuantLinear(
        module.in_features,
        module.out_features,
        bias=module.bias is not None,
        **_placement(module),
        **settings.weight_layer_kwargs(),
    )
    return _adopt_parameters(quant, module)


def _embedding(module: nn.Embedding, settings: LayerSettings) -> nn.Module:
    kwargs = settings.weight_layer_kwargs()
    quant = qnn.QuantEmbedding(
        module.num_embeddings,
        module.embedding_dim,
        padding_idx=module.padding_idx,
        max_norm=module.max_norm,
        norm_type=module.norm_type,
        scale_grad_by_freq=module.scale_grad_by_freq,
        sparse=module.sparse,
        **_placement(module),
        **{k: v for k, v in kwargs.items() if not k.startswith(("bias_", "input_", "output_"))},
    )
    return _adopt_parameters(quant, module)


def _activation(quant_class: type) -> Callable[[nn.Module, LayerSettings], nn.Module]:
    """The builder of an activation without hyper-parameters of its own."""

    def build(module: nn.Module, settings: LayerSettings) -> nn.Module:
        return quant_class(**settings.act_layer_kwargs())

    return build


def _relu6(module: nn.Module, settings: LayerSettings) -> nn.Module:
    # Brevitas's mapping: an unsigned quantizer whose learned range starts at 6.
    kwargs = {"act_quant": Uint8ActPerTensorFloatMaxInit, "max_val": 6.0}
    return qnn.QuantReLU(**{**kwargs, **settings.act_layer_kwargs()})


def _hardtanh(module: nn.Hardtanh, settings: LayerSettings) -> nn.Module:
    bounds = {"min_val": module.min_val, "max_val": module.max_val}
    return qnn.QuantHardTanh(**{**bounds, **settings.act_layer_kwargs()})


def default_replacement_factory() -> ReplacementFactory:
    """A new dict (callers may change it): the float types brevitas_cpp.nn has layers for."""
    return {
        nn.Conv1d: _conv(qnn.QuantConv1d),
        nn.Conv2d: _conv(qnn.QuantConv2d),
        nn.Conv3d: _conv(qnn.QuantConv3d),
        nn.ConvTranspose1d: _conv(qnn.QuantConvTranspose1d),
        nn.ConvTranspose2d: _conv(qnn.QuantConvTranspose2d),
        nn.ConvTranspose3d: _conv(qnn.QuantConvTranspose3d),
        nn.Linear: _linear,
        nn.Embedding: _embedding,
        nn.ReLU: _activation(qnn.QuantReLU),
        nn.ReLU6: _relu6,
        nn.Hardtanh: _hardtanh,
        nn.Sigmoid: _activation(qnn.QuantSigmoid),
        nn.Tanh: _activation(qnn.QuantTanh),
    }
