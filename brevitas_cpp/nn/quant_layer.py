"""Layer bases the quant layers derive from (Brevitas's brevitas.nn.quant_layer).

* QuantNonLinearActLayer: input quant, then an activation fused with its quantizer (QuantReLU...).
* QuantInputOutputLayer: input and output quant around a parameter-free op (QuantEltwiseAdd...).
* QuantWeightBiasInputOutputLayer (QuantWBIOL): also weight and bias quant (QuantLinear,
  QuantConv2d...). Its forward quantizes the input, the weight, then the bias (whose scale may
  come from input scale x weight scale), runs the float op on them and quantizes the output.

Two paths compute the same values. The QuantTensor path wraps every quantized tensor in an
IntQuantTensor and lets the torch handlers derive the output's scale and bit width; it serves
QuantTensor inputs, return_quant_tensor=True, inference caches, proxy hooks and export. When
none of these is asked for (``_takes_tuple_path``: the usual QAT step), the layers run on the
proxies' (value, scale, zero_point, bit_width) tuples instead, the code TorchScript compiles:
no QuantTensor is built and no metadata is computed only to be discarded.
"""

from typing import Any, Dict, List, Optional, Type, Union

import torch
from torch import Tensor
from torch.nn import Module
from torch.nn.modules import module as _torch_module

from brevitas_cpp.proxy.script import script_error
from brevitas_cpp.quant_tensor import IntQuantTensor, QuantTensor

from .mixin import (
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
from .mixin.base import mark_internal_kwargs
from .utils import merge_bn, rename_state_dict_by_prefix

__all__ = [
    "ActQuantType",
    "BiasQuantType",
    "WeightQuantType",
    "QuantNonLinearActLayer",
    "QuantInputOutputLayer",
    "QuantWeightBiasInputOutputLayer",
    "QuantWBIOL",
]


def act_quant_dtype_device(layer: Any, kwargs: Dict[str, Any], dtype: Optional[torch.dtype],
                           device: Any) -> Dict[str, Any]:
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


def _global_module_hooks() -> bool:
    """Whether hooks were registered for every module (which the proxies' __call__ runs)."""
    return bool(_torch_module._global_forward_hooks or _torch_module._global_forward_pre_hooks
                or _torch_module._global_backward_hooks
                or _torch_module._global_backward_pre_hooks)


def _tuple_forward_ok(proxy: Any) -> bool:
    """proxy._tuple_forward_ok(), False for a shared proxy that is not one of ours."""
    ok = getattr(proxy, "_tuple_forward_ok", None)
    return ok is not None and ok()


def _takes_tuple_path(layer: Any, inp: Any) -> bool:
    """Whether nothing asks a layer's forward for QuantTensor metadata, so that it can run on
    its proxies' (value, scale, ...) tuples: a plain Tensor input (a QuantTensor brings its own
    scale), plain output (return_quant_tensor=False) and proxies that say their tuple path is
    exact (see QuantProxyFromInjector._tuple_forward_ok). The values are the same either way:
    the QuantTensor path runs the same quantizers and float op on the same values."""
    return (not layer.return_quant_tensor and isinstance(inp, Tensor)
            and not _global_module_hooks())


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
            **kwargs):
        Module.__init__(self)
        QuantLayerMixin.__init__(self, return_quant_tensor)
        QuantInputMixin.__init__(self, input_quant, **kwargs)
        QuantNonLinearActMixin.__init__(self, act_impl, passthrough_act, act_quant, **kwargs)

    @property
    def channelwise_separable(self) -> bool:
        return True

    def forward(self, input: Union[Tensor, IntQuantTensor]):
        if torch.jit.is_scripting():
            assert isinstance(input, Tensor), (
                "scripted quant layers take Tensors, not QuantTensors")
            return self._tuple_forward(input)
        if (_takes_tuple_path(self, input) and _tuple_forward_ok(self.input_quant)
                and _tuple_forward_ok(self.act_quant)):
            return self._tuple_forward(input)
        input = self.unpack_input(input)
        quant_input = self.input_quant(input)
        out = self.act_quant(quant_input)
        return self.pack_output(out)

    def _tuple_forward(self, input: Tensor) -> Tensor:
        """forward on values, for TorchScript and for eager calls that need no QuantTensor."""
        return self.act_quant._script_forward(self.input_quant._script_forward(input)[0])[0]

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        # Checkpoints of older Brevitas versions name the proxy act_quant_proxy.
        rename_state_dict_by_prefix(prefix + "act_quant_proxy", prefix + "act_quant", state_dict)
        super(QuantNonLinearActLayer, self)._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)


class QuantInputOutputLayer(QuantOutputMixin, QuantInputMixin, QuantLayerMixin):
    """Input and output quantizers. With tie_input_output_quant one proxy serves both (only
    one of input_quant/output_quant may then be enabled)."""

    def __init__(
            self,
            input_quant: Optional[ActQuantType],
            output_quant: Optional[ActQuantType],
            tie_input_output_quant: bool,
            return_quant_tensor: bool,
            **kwargs):
        QuantLayerMixin.__init__(self, return_quant_tensor)
        QuantInputMixin.__init__(self, input_quant, **kwargs)
        QuantOutputMixin.__init__(self, output_quant, **kwargs)
        # Checked after construction: keywords alone can enable a quantizer.
        if tie_input_output_quant:
            if self.input_quant.is_quant_enabled and self.output_quant.is_quant_enabled:
                raise ValueError(
                    f"{type(self).__name__}: tie_input_output_quant=True needs exactly one of "
                    f"input_quant and output_quant enabled, but both are")
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
            **kwargs):
        # device/dtype: those the subclass built its float layer with, for the activation
        # quantizers too (the weight and bias quantizers follow the parameters).
        kwargs = act_quant_dtype_device(self, kwargs, dtype, device)
        QuantInputOutputLayer.__init__(
            self,
            input_quant,
            output_quant,
            tie_input_output_quant=False,
            return_quant_tensor=return_quant_tensor,
            **kwargs)
        QuantWeightMixin.__init__(self, weight_quant, **kwargs)
        QuantBiasMixin.__init__(self, bias_quant, **kwargs)
        # Set by model-loading code: accept a checkpoint bias for a layer built without one.
        self._quant_load_model_mode = False

    def inner_forward_impl(self, x: Union[Tensor, QuantTensor], quant_weight: Union[Tensor,
                                                                                   QuantTensor],
                           quant_bias: Optional[Union[Tensor, QuantTensor]]):
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
        if (self.bias is not None and bias_quant.is_quant_enabled
                and bias_quant.requires_input_scale):
            # Between scripted layers inputs are plain Tensors: the input scale can only come
            # from the layer's own input quantizer.
            if not self.input_quant.is_quant_enabled:
                raise script_error(
                    self, f"bias_quant={bias_quant.quant_injector.__name__} takes its scale from "
                    f"the input scale, and the layer has no input quantizer", "Quantize the "
                    f"layer's input (input_quant=...), or use a bias quantizer with its own scale "
                    f"(e.g. Int8BiasPerTensorFloatInternalScaling).")
            if not self.weight_quant.is_quant_enabled:
                raise script_error(
                    self, f"bias_quant={bias_quant.quant_injector.__name__} takes its scale from "
                    f"the weight scale, and the weight is not quantized", "Quantize the weight, "
                    f"or use a bias quantizer with its own scale.")
        return super().__prepare_scriptable__()

    def _script_inner_forward_impl(self, x: Tensor, quant_weight: Tensor,
                                   quant_bias: Optional[Tensor],
                                   output_size: Optional[List[int]]) -> Tensor:
        """The float op on Tensors, for the TorchScript path (output_size: transposed convs)."""
        raise NotImplementedError(f"{type(self).__name__} does not define "
                                  f"_script_inner_forward_impl")

    def _script_forward_impl(self, x: Tensor, output_size: Optional[List[int]] = None) -> Tensor:
        """forward_impl on values: the proxies exchange (value, scale, zero_point, bit_width)
        tuples, and the bias takes input scale x weight scale from the layer's own input
        quantizer when it needs it (checked by __prepare_scriptable__). TorchScript's path, and
        eager forward_impl's when nothing needs QuantTensor metadata (_takes_tuple_path)."""
        quant_input, input_scale, _, _ = self.input_quant._script_forward(x)
        quant_weight, weight_scale, _, _ = self.weight_quant._script_forward(self.weight)
        bias = self.bias
        if bias is None:
            quant_bias: Optional[Tensor] = None
        else:
            quant_bias = self.bias_quant._script_forward(
                bias, quant_input, input_scale, weight_scale)[0]
        if torch.jit.is_scripting():
            output = self._script_inner_forward_impl(quant_input, quant_weight, quant_bias,
                                                     output_size)
        else:
            # The float op the QuantTensor path runs (its handlers call it on the values); the
            # _script_ variant reads attributes set only when scripting.
            output = self.inner_forward_impl(quant_input, quant_weight, quant_bias)
        return self.output_quant._script_forward(output)[0]

    def _takes_tuple_path(self, inp: Union[Tensor, QuantTensor]) -> bool:
        if not (_takes_tuple_path(self, inp) and _tuple_forward_ok(self.input_quant)
                and _tuple_forward_ok(self.weight_quant)
                and _tuple_forward_ok(self.output_quant)):
            return False
        return self.bias is None or _tuple_forward_ok(self.bias_quant)

    def forward_impl(self, inp: Union[Tensor, QuantTensor]) -> Union[Tensor, QuantTensor]:
        if self._takes_tuple_path(inp):
            return self._script_forward_impl(inp)
        inp = self.unpack_input(inp)
        quant_input = self.input_quant(inp)
        quant_weight = self.quant_weight(quant_input)

        produces_quant_tensor = isinstance(quant_input, QuantTensor) and isinstance(
            quant_weight, QuantTensor)
        if self.return_quant_tensor and not (produces_quant_tensor or
                                             self.output_quant.is_quant_enabled):
            raise RuntimeError(
                f"{type(self).__name__}: return_quant_tensor=True, but there is no quantized "
                f"output to return: quantize the output (output_quant=...), or both the input "
                f"(input_quant=... or a QuantTensor input) and the weight")

        if self.bias is not None:
            quant_bias = self.bias_quant(self.bias, quant_input, quant_weight)
        else:
            quant_bias = None
        output_tensor = self.inner_forward_impl(quant_input, quant_weight, quant_bias)
        quant_output = self.output_quant(output_tensor)
        return self.pack_output(quant_output)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        bias_key = prefix + "bias"
        # A checkpoint with a bias for a layer without one comes from bias correction: add a
        # zero bias so it loads (only when model-loading code asks for it).
        if bias_key in state_dict and self.bias is None and self._quant_load_model_mode:
            self.register_parameter(
                "bias",
                torch.nn.Parameter(
                    torch.zeros(
                        self.out_channels, device=self.weight.device, dtype=self.weight.dtype)))
        super(QuantWeightBiasInputOutputLayer, self)._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)


QuantWBIOL = QuantWeightBiasInputOutputLayer
