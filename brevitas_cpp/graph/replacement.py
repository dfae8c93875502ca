"""The default replacement factory: float module type -> a function building its quant layer.

Each function gets the float module and its LayerSettings, builds the brevitas_cpp.nn layer with
the same hyper-parameters, device and dtype, and gives it the float module's own Parameter
objects (so the weights are exactly the float ones, and an optimizer holding them keeps
working); the layer's quantizers are rebuilt over them. Exact types only: a subclass of a torch
layer may compute something else.

Activations: ReLU, ReLU6, Hardtanh, Sigmoid, Tanh, GELU (keeping ``approximate``), SiLU,
Hardswish, Hardsigmoid and LeakyReLU (keeping ``negative_slope``). Their quant layers never
work in place, so an ``inplace=True`` float module becomes the same out-of-place layer.

transformers' Conv1D (GPT-2's linear layers, weight stored transposed):
QuantTransformersConv1D, whose state_dict keeps Conv1D's layout (transformers_conv1d is the
builder, for a factory entry of another class with that layout). transformers' and timm's own
activation classes whose function is one of the above: transformers' GELUActivation (exact GELU),
GELUTanh (alias PytorchGELUTanh), NewGELUActivation, FastGELUActivation and
AccurateGELUActivation (each GELU's tanh approximation, written out) and SiLUActivation; timm's
Sigmoid, Tanh, GELU, GELUTanh, Swish, HardSwish and HardSigmoid (and the SwishMe, HardSwishMe and
HardSigmoidMe of timm.layers.activations_me). Those with no quant counterpart (QuickGELU, Mish,
HardMish, ClippedGELU...) are left alone. Neither package is a dependency nor imported here: their
classes are taken from modules already imported (a model holding them has imported them), so
building the factory costs nothing where they are absent or unused.

Left in float by default: BatchNorm (in QAT it keeps normalising with batch statistics; fold it
first with brevitas_cpp.graph.merge_bn), MaxPool (it keeps its input's
quantization) and the average poolings (their requantization needs QuantTensor inputs, which the
replaced layers do not return by default).

Recurrent and attention layers (nn.RNN, nn.LSTM, nn.MultiheadAttention) hold their quantizers
under several names (io_, gate_acc_, in_proj_, ...): every weight quantizer gets the weight bit
width and every activation quantizer the layer enables by default the activation bit width; the
override's keywords with those prefixes are passed on, and the quantizer's weight_*/bias_*
defaults go to each weight (in_proj_weight_* and out_proj_weight_* for attention). Their float
weights are loaded exactly from the float module's state_dict; an RNN or LSTM keeps one weight
per gate, and attention separate q/k/v projections by default (they serve cross-attention too;
``packed_in_proj=True`` in an override packs them), so those Parameters are new objects, which
Quantizer(optimizer=...) puts in the optimizer group of the float module's; attention adopts its
out_proj (and a packed in_proj) Parameters themselves. An override may also set the layers' own
options (``cat_output_cell_states``, the ``shared_*`` flags, ``packed_in_proj``; CIFG is refused).
brevitas_cpp.nn.ScaledDotProductAttention (the child functional_quantization_mode adds for
F.scaled_dot_product_attention) becomes a QuantScaledDotProductAttention whose default
quantizers (q_scaled_, k_transposed_, v_, attn_output_weights_) get the activation bit width.
"""

import sys
from typing import Any, Callable, Dict, Tuple

from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.graph.overrides import KeepInFloat, LayerSettings
from brevitas_cpp.quant import Uint8ActPerTensorFloatMaxInit

__all__ = ["ReplacementFactory", "default_replacement_factory", "transformers_conv1d"]

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


def _gelu(module: nn.GELU, settings: LayerSettings) -> nn.Module:
    return qnn.QuantGELU(**{"approximate": module.approximate, **settings.act_layer_kwargs()})


def _gelu_of(approximate: str) -> Callable[[nn.Module, LayerSettings], nn.Module]:
    """The builder for a GELU class whose approximation is fixed by the class itself."""

    def build(module: nn.Module, settings: LayerSettings) -> nn.Module:
        return qnn.QuantGELU(**{"approximate": approximate, **settings.act_layer_kwargs()})

    return build


def _leaky_relu(module: nn.LeakyReLU, settings: LayerSettings) -> nn.Module:
    slope = {"negative_slope": module.negative_slope}
    return qnn.QuantLeakyReLU(**{**slope, **settings.act_layer_kwargs()})


def _defaults_for_weights(settings: LayerSettings, weight_prefixes: Tuple[str, ...]) -> Dict:
    """The quantizer's weight_*/bias_* defaults, under each weight's prefix."""
    out: Dict[str, Any] = {}
    for key, value in settings.weight_defaults.items():
        if key.startswith(("weight_", "bias_")):
            for prefix in weight_prefixes:
                out[prefix + key] = value
    return out


# The layers' own options an override may set (their quantizer keywords go by prefix).
_RNN_OPTIONS = ("gate_acc_quant", "shared_input_hidden_weights")
_LSTM_OPTIONS = (
    "coupled_input_forget_gates",
    "cat_output_cell_states",
    "shared_input_hidden_weights",
    "shared_intra_layer_weight_quant",
    "shared_intra_layer_gate_acc_quant",
    "shared_cell_state_quant",
)
_MHA_OPTIONS = ("packed_in_proj",)


def _both_bit_widths(settings: LayerSettings, layer: str) -> None:
    # A recurrent or attention layer's weights and activations are quantized together here.
    if settings.bits_weights is None and settings.bits_activations is None:
        raise KeepInFloat()
    if settings.bits_weights is None or settings.bits_activations is None:
        raise ValueError(
            f"a null bits_weights or bits_activations alone is not supported for {layer} (its "
            f"weights and activations are quantized together); keep the whole module in float "
            f"with a null override, or give both bit widths"
        )


def _recurrent_kwargs(
    settings: LayerSettings,
    quant_class: type,
    act_prefixes: Tuple[str, ...],
    options: Tuple[str, ...],
) -> Dict[str, Any]:
    _both_bit_widths(settings, quant_class.__name__)
    bits = {"weight_bit_width": settings.bits_weights}
    bits.update({prefix + "bit_width": settings.bits_activations for prefix in act_prefixes})
    return {
        **bits,
        **_defaults_for_weights(settings, ("",)),
        **settings.prefixed_layer_kwargs(quant_class._prefixes, options),
    }


def _check_recurrent(module: nn.RNNBase) -> None:
    if module.dropout:
        raise ValueError(
            f"dropout={module.dropout} between stacked layers is not supported by the quantized "
            f"recurrent layers; leave it in float (ignored_scopes) or set dropout=0"
        )
    if getattr(module, "proj_size", 0):
        raise ValueError(
            f"proj_size={module.proj_size} (an LSTM with projections) is not supported by "
            f"QuantLSTM; leave it in float (ignored_scopes)"
        )


def _recurrent_common(module: nn.RNNBase) -> Dict[str, Any]:
    weight = module.weight_ih_l0
    return {
        "num_layers": module.num_layers,
        "bias": module.bias,
        "batch_first": module.batch_first,
        "bidirectional": module.bidirectional,
        "device": weight.device,
        "dtype": weight.dtype,
    }


def _rnn(module: nn.RNN, settings: LayerSettings) -> nn.Module:
    _check_recurrent(module)
    kwargs = _recurrent_kwargs(settings, qnn.QuantRNN, ("io_", "gate_acc_quant_"), _RNN_OPTIONS)
    quant = qnn.QuantRNN(
        module.input_size,
        module.hidden_size,
        nonlinearity=module.nonlinearity,
        **_recurrent_common(module),
        **kwargs,
    )
    quant.load_state_dict(module.state_dict())
    return quant


def _lstm(module: nn.LSTM, settings: LayerSettings) -> nn.Module:
    _check_recurrent(module)
    acts = ("io_", "gate_acc_", "sigmoid_", "tanh_", "cell_state_")
    kwargs = _recurrent_kwargs(settings, qnn.QuantLSTM, acts, _LSTM_OPTIONS)
    if kwargs.get("coupled_input_forget_gates"):
        raise ValueError(
            "coupled_input_forget_gates=True drops the forget gate, so the float LSTM's "
            "weights have no QuantLSTM to load into; build that layer by hand"
        )
    quant = qnn.QuantLSTM(
        module.input_size, module.hidden_size, **_recurrent_common(module), **kwargs
    )
    quant.load_state_dict(module.state_dict())
    return quant


# The attention's quantizers enabled by default, which get the activation bit width.
_MHA_ACT_PREFIXES = (
    "in_proj_input_",
    "attn_output_weights_",
    "q_scaled_",
    "k_transposed_",
    "v_",
    "out_proj_input_",
)


# QuantScaledDotProductAttention's quantizers enabled by default (softmax_input_ and
# sdpa_output_ are off, as in Brevitas), which get the activation bit width.
_SDPA_ACT_PREFIXES = ("q_scaled_", "k_transposed_", "v_", "attn_output_weights_")


def _scaled_dot_product_attention(
    module: qnn.ScaledDotProductAttention, settings: LayerSettings
) -> nn.Module:
    """F.scaled_dot_product_attention as a module (functional_quantization_mode's child): its
    matmul operands and attention weights quantized at the activation bit width."""
    if settings.bits_activations is None:
        raise KeepInFloat()
    bits = {p + "bit_width": settings.bits_activations for p in _SDPA_ACT_PREFIXES}
    bits.update(settings.prefixed_layer_kwargs(qnn.QuantScaledDotProductAttention._prefixes))
    return qnn.QuantScaledDotProductAttention(
        module.pre_process_q, module.pre_process_k, module.pre_process_v, **bits
    )


def _multihead_attention(module: nn.MultiheadAttention, settings: LayerSettings) -> nn.Module:
    _both_bit_widths(settings, "QuantMultiheadAttention")
    weights = ("in_proj_", "out_proj_")
    bits = {p + "weight_bit_width": settings.bits_weights for p in weights}
    bits.update({p + "bit_width": settings.bits_activations for p in _MHA_ACT_PREFIXES})
    # Separate q/k/v projections by default: they serve cross-attention too (a decoder's
    # multihead_attn(x, memory, memory)), which the packed one does not; packed_in_proj=True
    # in an override packs them for a self-attention-only module.
    keywords = {"packed_in_proj": False}
    keywords.update(
        settings.prefixed_layer_kwargs(qnn.QuantMultiheadAttention._prefixes, _MHA_OPTIONS)
    )
    quant = qnn.QuantMultiheadAttention(
        module.embed_dim,
        module.num_heads,
        dropout=module.dropout,
        bias=module.in_proj_bias is not None,
        add_bias_kv=module.bias_k is not None,
        add_zero_attn=module.add_zero_attn,
        kdim=module.kdim,
        vdim=module.vdim,
        batch_first=module.batch_first,
        device=module.out_proj.weight.device,
        dtype=module.out_proj.weight.dtype,
        **bits,
        **_defaults_for_weights(settings, weights),
        **keywords,
    )
    quant.load_state_dict(module.state_dict())
    # Laid out as the float module's (out_proj, and in_proj when packed): its Parameters.
    if quant.in_proj is not None:
        quant.in_proj.weight = module.in_proj_weight
        if module.in_proj_bias is not None:
            quant.in_proj.bias = module.in_proj_bias
    _adopt_parameters(quant.out_proj, module.out_proj)
    return quant


def transformers_conv1d(module: nn.Module, settings: LayerSettings) -> nn.Module:
    """The builder for transformers' Conv1D (weight (nx, nf), y = x @ W + b): a
    QuantTransformersConv1D with the float bias Parameter and a transposed copy of the weight (a
    new Parameter, which Quantizer(optimizer=...) puts in the float weight's group)."""
    nx, nf = module.weight.shape
    quant = qnn.QuantTransformersConv1D(
        nf,
        nx,
        bias=module.bias is not None,
        **_placement(module),
        **settings.weight_layer_kwargs(),
    )
    quant.weight = nn.Parameter(module.weight.detach().t().clone(), module.weight.requires_grad)
    if module.bias is not None:
        quant.bias = module.bias
    return quant


# (defining module, class name, builder) of transformers' and timm's layers. Each class was read
# in transformers 5.24.0 and timm 1.0.31: its forward is the quant layer's float function.
_GELU_TANH = _gelu_of("tanh")
_THIRD_PARTY: Tuple[Tuple[str, str, Callable[[nn.Module, LayerSettings], nn.Module]], ...] = (
    ("transformers.pytorch_utils", "Conv1D", transformers_conv1d),
    # F.gelu, or with use_gelu_python its erf formula: the exact GELU either way.
    ("transformers.activations", "GELUActivation", _gelu_of("none")),
    ("transformers.activations", "GELUTanh", _GELU_TANH),
    ("transformers.activations", "NewGELUActivation", _GELU_TANH),
    ("transformers.activations", "FastGELUActivation", _GELU_TANH),
    ("transformers.activations", "AccurateGELUActivation", _GELU_TANH),
    ("transformers.activations", "SiLUActivation", _activation(qnn.QuantSiLU)),
    ("timm.layers.activations", "Sigmoid", _activation(qnn.QuantSigmoid)),
    ("timm.layers.activations", "Tanh", _activation(qnn.QuantTanh)),
    ("timm.layers.activations", "GELU", _gelu_of("none")),
    ("timm.layers.activations", "GELUTanh", _GELU_TANH),
    ("timm.layers.activations", "Swish", _activation(qnn.QuantSiLU)),
    ("timm.layers.activations", "HardSwish", _activation(qnn.QuantHardswish)),
    ("timm.layers.activations", "HardSigmoid", _activation(qnn.QuantHardsigmoid)),
    ("timm.layers.activations_me", "SwishMe", _activation(qnn.QuantSiLU)),
    ("timm.layers.activations_me", "HardSwishMe", _activation(qnn.QuantHardswish)),
    ("timm.layers.activations_me", "HardSigmoidMe", _activation(qnn.QuantHardsigmoid)),
)


def _third_party_types() -> ReplacementFactory:
    """transformers' and timm's layers of _THIRD_PARTY whose module is already imported: looked
    up in sys.modules, never imported (importing transformers takes seconds)."""
    found: ReplacementFactory = {}
    for module_name, class_name, build in _THIRD_PARTY:
        cls = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(cls, type):
            found[cls] = build
    return found


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
        nn.GELU: _gelu,
        nn.SiLU: _activation(qnn.QuantSiLU),
        nn.Hardswish: _activation(qnn.QuantHardswish),
        nn.Hardsigmoid: _activation(qnn.QuantHardsigmoid),
        nn.LeakyReLU: _leaky_relu,
        nn.RNN: _rnn,
        nn.LSTM: _lstm,
        nn.MultiheadAttention: _multihead_attention,
        qnn.ScaledDotProductAttention: _scaled_dot_product_attention,
        **_third_party_types(),
    }
