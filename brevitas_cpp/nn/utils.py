"""Helpers of the quant layers: folding a batch norm into a weight layer, state_dict key
renaming, and broadcast shapes over a channel dim."""

from typing import Any, Dict, Iterable, Tuple

import torch
from torch import Tensor
from torch.nn import Parameter

from brevitas_cpp.function.shape import channel_view_shape
from brevitas_cpp.proxy.weight_bias_quant import (
    BiasQuantProxyFromInjectorBase,
    WeightQuantProxyFromInjectorBase,
)

__all__ = [
    "compute_channel_view_shape",
    "mul_add_from_bn",
    "merge_bn",
    "rename_state_dict_by_prefix",
    "rename_state_dict_by_postfix",
    "check_tensors_same_ptr",
]


def compute_channel_view_shape(tensor: Tensor, channel_dim: int) -> Tuple[int, ...]:
    """A shape of tensor's rank with -1 at channel_dim and 1 elsewhere, to broadcast a
    per-channel vector against tensor (Brevitas's name for channel_view_shape)."""
    return tuple(channel_view_shape(tensor.dim(), channel_dim))


def mul_add_from_bn(
    bn_mean: Tensor, bn_var: Tensor, bn_eps: float, bn_weight: Tensor, bn_bias: Tensor
) -> Tuple[Tensor, Tensor]:
    """The per-channel (mul, add) with bn(x) == x * mul + add in eval mode; same operation
    order as Brevitas, so folded weights match it bit for bit."""
    denom = torch.sqrt(bn_var + bn_eps)
    mul_factor = bn_weight / denom
    add_factor = -bn_mean * mul_factor + bn_bias
    return mul_factor, add_factor


def _bn_affine(bn: Any, layer_name: str) -> Tuple[Tensor, Tensor]:
    mean, var = getattr(bn, "running_mean", None), getattr(bn, "running_var", None)
    if mean is None or var is None:
        raise ValueError(
            f"{layer_name}.merge_bn_in: the batch norm {type(bn).__name__} has no running "
            f"statistics (track_running_stats=False); only a batch norm with running_mean and "
            f"running_var can be folded"
        )
    weight = bn.weight.detach().clone() if bn.weight is not None else torch.ones_like(mean)
    bias = bn.bias.detach().clone() if bn.bias is not None else torch.zeros_like(mean)
    return mul_add_from_bn(bn_mean=mean, bn_var=var, bn_eps=bn.eps, bn_weight=weight, bn_bias=bias)


def _scale_output_channels(
    weight: Tensor, mul_factor: Tensor, output_channel_dim: int, groups: int, layer_name: str
) -> None:
    """weight *= mul_factor along the output channels, in place."""
    channels = weight.shape[output_channel_dim]
    # A grouped transposed conv's weight is [C_in, C_out / groups, ...]: input channels of group
    # g feed output channels g * C_out / groups onwards.
    grouped = output_channel_dim == 1 and groups > 1
    out_channels = channels * groups if grouped else channels
    if mul_factor.numel() != out_channels:
        raise ValueError(
            f"{layer_name}.merge_bn_in: the batch norm has {mul_factor.numel()} channels but "
            f"the layer has {out_channels} output channels"
        )
    if grouped:
        per_group = weight.view(groups, weight.shape[0] // groups, *weight.shape[1:])
        per_group.mul_(mul_factor.view(groups, 1, channels, *[1] * (weight.dim() - 2)))
    else:
        weight.mul_(mul_factor.view(compute_channel_view_shape(weight, output_channel_dim)))


def merge_bn(layer: Any, bn: Any, output_channel_dim: int = 0) -> None:
    """Fold the eval-mode batch norm ``bn`` that follows ``layer`` into layer's weight and bias
    (adding a bias if it has none), then rebuild the layer's parameter quantizers so their
    statistics see the folded values."""
    layer_name = type(layer).__name__
    mul_factor, add_factor = _bn_affine(bn, layer_name)
    with torch.no_grad():
        _scale_output_channels(
            layer.weight.data,
            mul_factor.to(layer.weight.dtype),
            output_channel_dim,
            getattr(layer, "groups", 1),
            layer_name,
        )
        if layer.bias is not None:
            bias = layer.bias.data
            bias.mul_(mul_factor.to(bias.dtype).view(-1))
            bias.add_(add_factor.to(bias.dtype).view(-1))
        else:
            layer.bias = Parameter(
                add_factor.to(device=layer.weight.device, dtype=layer.weight.dtype)
            )
    weight_quant = getattr(layer, "weight_quant", None)
    if isinstance(weight_quant, WeightQuantProxyFromInjectorBase):
        weight_quant.init_tensor_quant()
    bias_quant = getattr(layer, "bias_quant", None)
    if isinstance(bias_quant, BiasQuantProxyFromInjectorBase):
        bias_quant.init_tensor_quant()


def rename_state_dict_by_prefix(
    old_prefix: str, new_prefix: str, state_dict: Dict[str, Any]
) -> None:
    """Rename, in place, the keys that start with old_prefix."""
    for key in [k for k in state_dict if k.startswith(old_prefix)]:
        state_dict[new_prefix + key[len(old_prefix) :]] = state_dict.pop(key)


def rename_state_dict_by_postfix(
    old_postfix: str, new_postfix: str, state_dict: Dict[str, Any]
) -> None:
    """Rename, in place, the keys that end with old_postfix."""
    for key in [k for k in state_dict if k.endswith(old_postfix)]:
        state_dict[key[: len(key) - len(old_postfix)] + new_postfix] = state_dict.pop(key)


def check_tensors_same_ptr(tensor_list: Iterable[Any]) -> bool:
    """Whether every tensor (or QuantTensor value) shares one storage pointer."""
    pointers = []
    for t in tensor_list:
        if hasattr(t, "data_ptr"):
            pointers.append(t.data_ptr())
        elif hasattr(t, "value") and hasattr(t.value, "data_ptr"):
            pointers.append(t.value.data_ptr())
        else:
            return False
    return all(p == pointers[0] for p in pointers)
