"""Layer bases the quant layers derive from (Brevitas's brevitas.nn.quant_layer).

* QuantNonLinearActLayer: input quant, then an activation fused with its quantizer (QuantReLU...).
* QuantInputOutputLayer: input and output quant around a parameter-free op (QuantEltwiseAdd...).
* QuantWeightBiasInputOutputLayer (QuantWBIOL): also weight and bias quant (QuantLinear,
  QuantConv2d...). Its forward quantizes the input, the weight, then the bias (whose scale may
  come from input scale x weight scale), runs the float op on them and quantizes the output.

Each forward is written once and runs in eager mode, under torch.jit.script and under
torch.compile. The proxies hand the layer (value, scale, zero_point, bit_width) tuples
(``quantize``), and the float op runs on the values. Where a QuantTensor is wanted (eager mode
only: return_quant_tensor=True or a QuantTensor input) the proxies return IntQuantTensors, which
are such tuples too, and the float op runs on them, so that its torch handler derives the
output's scale and bit width.
"""

from typing import Any, Dict, List, Optional, Type, Union

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp.proxy.script import QuantTuple, quant_operand, script_error
from brevitas_cpp.quant_tensor import QuantTensor

from ._error_context import call_naming_layer
from .mixin import (
    AccQuantType,
    ActQuantType,
    BiasQuantType,
    QuantBiasMixin,
    QuantInputMixin,
    QuantLayerMixin,
    QuantNonLinearActMixin,
    QuantOutputMixin,
    QuantWeightMixin,
    WeightQuantType,
)
from .mixin.base import (
    NOT_CONFIGURED,
    NOT_CONFIGURED_CHECK_WARNINGS,
    QuantLayerConfigError,
    mark_internal_kwargs,
)
from .utils import merge_bn, rename_state_dict_by_prefix

__all__ = [
    "AccQuantType",  # Brevitas's module star-imports the mixins
    "ActQuantType",
    "BiasQuantType",
    "WeightQuantType",
    "QuantNonLinearActLayer",
    "QuantInputOutputLayer",
    "QuantWeightBiasInputOutputLayer",
    "QuantWBIOL",
]


def act_quant_dtype_device(
    layer: Any, kwargs: Dict[str, Any], dtype: Optional[torch.dtype], device: Any
) -> Dict[str, Any]:
    """kwargs plus the layer's device, and its dtype when narrower than float32, for the input and
    output quantizers (unless set explicitly). Their scales otherwise start as float32 on the
    default device, and a float32 scale turns a float16 activation into float32, which the float16
    weight then can not multiply. Wider dtypes keep Brevitas's float32 scales (and its numbers)."""
    extra: Dict[str, Any] = {}
    for prefix in ("input_", "output_"):
        if device is not None:
            extra[prefix + "device"] = device
        if dtype in (torch.float16, torch.bfloat16):
            extra[prefix + "dtype"] = dtype
    extra = {k: v for k, v in extra.items() if k not in kwargs}
    mark_internal_kwargs(layer, *extra)
    return {**kwargs, **extra}


class QuantNonLinearActLayer(QuantNonLinearActMixin, QuantInputMixin, QuantLayerMixin, Module):
    """Quantized activation: ``act_quant(act_impl(input_quant(x)))``. Unprefixed keywords
    configure act_quant, ``input_*`` ones input_quant."""

    def __init__(
        self,
        act_impl: Optional[Type[Module]],
        passthrough_act: bool,
        input_quant: Optional[ActQuantType],
        act_quant: Optional[ActQuantType],
        return_quant_tensor: bool,
        **kwargs,
    ):
        Module.__init__(self)
        QuantLayerMixin.__init__(self, return_quant_tensor)
        QuantInputMixin.__init__(self, input_quant, **kwargs)
        QuantNonLinearActMixin.__init__(self, act_impl, passthrough_act, act_quant, **kwargs)

    @property
    def channelwise_separable(self) -> bool:
        return True

    # input: a Tensor, or in eager mode a QuantTensor (annotated as what TorchScript accepts).
    def forward(self, input: Tensor):
        if torch.jit.is_scripting():
            return self._layer_forward(input)
        # An error names the layer (TorchScript compiles no try statement: eager mode only).
        return call_naming_layer(self, self._layer_forward, input)

    def _layer_forward(self, input: Tensor):
        as_quant_tensor = self._wants_quant_tensor(input)
        quant_input = self.input_quant.quantize(input, as_quant_tensor)
        quant_output = self.act_quant.quantize(
            quant_operand(quant_input, as_quant_tensor), as_quant_tensor
        )
        return self._layer_output(quant_output)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        # Checkpoints of older Brevitas versions name the proxy act_quant_proxy.
        rename_state_dict_by_prefix(prefix + "act_quant_proxy", prefix + "act_quant", state_dict)
        super(QuantNonLinearActLayer, self)._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


class QuantInputOutputLayer(QuantOutputMixin, QuantInputMixin, QuantLayerMixin):
    """Input and output quantizers. With tie_input_output_quant one proxy serves both (only
    one of input_quant/output_quant may then be enabled)."""

    def __init__(
        self,
        input_quant: Optional[ActQuantType],
        output_quant: Optional[ActQuantType],
        tie_input_output_quant: bool,
        return_quant_tensor: bool,
        **kwargs,
    ):
        QuantLayerMixin.__init__(self, return_quant_tensor)
        QuantInputMixin.__init__(self, input_quant, **kwargs)
        QuantOutputMixin.__init__(self, output_quant, **kwargs)
        # Checked after construction: keywords alone can enable a quantizer.
        if tie_input_output_quant:
            if self.input_quant.is_quant_enabled and self.output_quant.is_quant_enabled:
                raise ValueError(
                    f"{type(self).__name__}: tie_input_output_quant=True needs exactly one of "
                    f"input_quant and output_quant enabled, but both are"
                )
            if self.input_quant.is_quant_enabled:
                self.output_quant = self.input_quant
            elif self.output_quant.is_quant_enabled:
                self.input_quant = self.output_quant


class QuantWeightBiasInputOutputLayer(QuantBiasMixin, QuantWeightMixin, QuantInputOutputLayer):
    """Base of the weight layers. Subclasses also derive from their float layer and define
    ``inner_forward_impl(x, quant_weight, quant_bias)`` (the float op) and
    ``output_channel_dim``."""

    def __init__(
        self,
        weight_quant: Optional[WeightQuantType],
        bias_quant: Optional[BiasQuantType],
        input_quant: Optional[ActQuantType],
        output_quant: Optional[ActQuantType],
        return_quant_tensor: bool,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
        **kwargs,
    ):
        # device/dtype: those the subclass built its float layer with, for the activation
        # quantizers too (the weight and bias quantizers follow the parameters).
        kwargs = act_quant_dtype_device(self, kwargs, dtype, device)
        QuantInputOutputLayer.__init__(
            self,
            input_quant,
            output_quant,
            tie_input_output_quant=False,
            return_quant_tensor=return_quant_tensor,
            **kwargs,
        )
        QuantWeightMixin.__init__(self, weight_quant, **kwargs)
        QuantBiasMixin.__init__(self, bias_quant, **kwargs)
        # Set by model-loading code: accept a checkpoint bias for a layer built without one.
        self._quant_load_model_mode = False

    def inner_forward_impl(
        self,
        x: Union[Tensor, QuantTensor],
        quant_weight: Union[Tensor, QuantTensor],
        quant_bias: Optional[Union[Tensor, QuantTensor]],
    ):
        raise NotImplementedError(f"{type(self).__name__} does not define inner_forward_impl")

    @property
    def per_elem_ops(self):
        raise NotImplementedError(f"{type(self).__name__} does not define per_elem_ops")

    def merge_bn_in(self, bn: Module) -> None:
        """Fold the eval-mode batch norm that follows this layer into its weight and bias, and
        rebuild the weight and bias quantizers from the folded values."""
        merge_bn(self, bn, output_channel_dim=self.output_channel_dim)

    def __prepare_scriptable__(self) -> "QuantWeightBiasInputOutputLayer":
        bias_quant = self.bias_quant
        if (
            self.bias is not None
            and bias_quant.is_quant_enabled
            and bias_quant.requires_input_scale
        ):
            # Between scripted layers inputs are plain Tensors: the input scale can only come
            # from the layer's own input quantizer.
            if not self.input_quant.is_quant_enabled:
                raise script_error(
                    self,
                    f"bias_quant={bias_quant.quant_injector.__name__} takes its scale from "
                    f"the input scale, and the layer has no input quantizer",
                    "Quantize the "
                    "layer's input (input_quant=...), or use a bias quantizer with its own scale "
                    "(e.g. Int8BiasPerTensorFloatInternalScaling).",
                )
            if not self.weight_quant.is_quant_enabled:
                raise script_error(
                    self,
                    f"bias_quant={bias_quant.quant_injector.__name__} takes its scale from "
                    f"the weight scale, and the weight is not quantized",
                    "Quantize the weight, or use a bias quantizer with its own scale.",
                )
        return super().__prepare_scriptable__()

    # input: a Tensor, or in eager mode a QuantTensor (annotated as what TorchScript accepts).
    def forward(self, input: Tensor):
        return self.forward_impl(input)

    def _float_op(
        self,
        x: Tensor,
        quant_weight: Tensor,
        quant_bias: Optional[Tensor],
        output_size: Optional[List[int]],
    ) -> Tensor:
        """inner_forward_impl; transposed convolutions also take output_size."""
        return self.inner_forward_impl(x, quant_weight, quant_bias)

    # Annotated as what TorchScript accepts: in eager mode inp and the output may be QuantTensors.
    def forward_impl(self, inp: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        """Quantize the input, the weight and the bias (whose scale may be input scale x weight
        scale), run the float op on them and quantize its output. With QuantTensor operands
        (eager mode, when a QuantTensor is wanted) the float op's torch handler also derives the
        accumulator's scale and bit width, which an unquantized output keeps. In eager mode an
        error names the layer (brevitas_cpp.nn._error_context)."""
        if torch.jit.is_scripting():
            return self._layer_forward(inp, output_size)
        return call_naming_layer(self, self._layer_forward, inp, output_size)

    def _layer_forward(self, inp: Tensor, output_size: Optional[List[int]]) -> Tensor:
        as_quant_tensor = self._wants_quant_tensor(inp)
        quant_input = self.input_quant.quantize(inp, as_quant_tensor)
        quant_weight = self.weight_quant.quantize(self.weight, quant_input, as_quant_tensor)
        if as_quant_tensor:  # eager mode only
            self._check_quant_output(quant_input, quant_weight)
        bias = self.bias
        if bias is None:
            quant_bias: Optional[Tensor] = None
        else:
            quant_bias = quant_operand(
                self.bias_quant.quantize(bias, quant_input, quant_weight, as_quant_tensor),
                as_quant_tensor,
            )
        output = self._float_op(
            quant_operand(quant_input, as_quant_tensor),
            quant_operand(quant_weight, as_quant_tensor),
            quant_bias,
            output_size,
        )
        return self._layer_output(self.output_quant.quantize(output, as_quant_tensor))

    def _layer_output(self, quant_output: QuantTuple) -> Tensor:
        if torch.jit.is_scripting():
            return quant_output[0]
        if self.return_quant_tensor and not isinstance(quant_output, QuantTensor):
            # The torch handler gave no QuantTensor (e.g. per-group scales): Brevitas asserts.
            raise QuantLayerConfigError(
                f"{NOT_CONFIGURED_CHECK_WARNINGS}: {self._no_quant_output_text()}"
            )
        return QuantInputOutputLayer._layer_output(self, quant_output)

    @torch.jit.unused
    def _check_quant_output(self, quant_input: QuantTuple, quant_weight: QuantTuple) -> None:
        """Brevitas's check before the bias and the float op: return_quant_tensor=True needs
        an output quantizer, or a quantized input and weight (whose accumulator the torch
        handler describes)."""
        if (
            self.return_quant_tensor
            and not self.output_quant.is_quant_enabled
            and not (isinstance(quant_input, QuantTensor) and isinstance(quant_weight, QuantTensor))
        ):
            raise QuantLayerConfigError(f"{NOT_CONFIGURED}: {self._no_quant_output_text()}")

    @torch.jit.unused
    def _no_quant_output_text(self) -> str:
        # Per-group scales vary along the reduced dim: the accumulator has no scale of its own.
        grouped = [
            name
            for name in ("input_quant", "weight_quant")
            if getattr(getattr(self, name), "is_groupwise", False)
        ]
        why = (
            f" ({' and '.join(grouped)}: per-group scales, which give the accumulator no scale)"
            if grouped
            else ""
        )
        return (
            f"{type(self).__name__}: return_quant_tensor=True, but there is no quantized output "
            f"to return{why}: quantize the output (output_quant=...), or both the input "
            f"(input_quant=... or a QuantTensor input) and the weight"
        )

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        bias_key = prefix + "bias"
        # A checkpoint with a bias for a layer without one comes from bias correction: add a
        # zero bias so it loads (only when model-loading code asks for it).
        if bias_key in state_dict and self.bias is None and self._quant_load_model_mode:
            self.register_parameter(
                "bias",
                torch.nn.Parameter(
                    torch.zeros(
                        self.out_channels, device=self.weight.device, dtype=self.weight.dtype
                    )
                ),
            )
        super(QuantWeightBiasInputOutputLayer, self)._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


QuantWBIOL = QuantWeightBiasInputOutputLayer
