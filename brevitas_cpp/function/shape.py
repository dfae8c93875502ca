"""Shapes s such that x.view(s) flattens x along chosen dimensions (Brevitas's helpers), and the
per-channel view and accumulator-scale rules of the weight layers."""

from typing import List, Optional, Tuple

import torch
from torch import Tensor


def over_tensor(x: Tensor) -> int:
    """Flat: -1."""
    return -1


def over_output_channels(x: Tensor) -> Tuple[int, int]:
    """Output channels (dim 0) by everything else."""
    return x.shape[0], -1


def over_batch_over_tensor(x: Tensor) -> Tuple[int, int]:
    """Batch (dim 0) by everything else."""
    return x.shape[0], -1


def over_batch_over_output_channels(x: Tensor) -> Tuple[int, int, int]:
    """Batch (dim 0) by channels (dim 1) by everything else."""
    return x.shape[0], x.shape[1], -1


def over_output_features(x: Tensor) -> Tuple[int, int]:
    """Everything but the last dim, by the last dim (features)."""
    return -1, x.shape[-1]


# ---- per-channel views and the accumulator scale -------------------------------------------------
# One home for these rules: the bias quantizer, the QuantTensor handlers of the weight layers and
# batch-norm folding all use them. Written in plain TorchScript (scripted proxies call them).


def channel_view_shape(ndim: int, channel_dim: int) -> List[int]:
    """[1, ..., -1, ..., 1] of length ndim, -1 at channel_dim: views a per-channel vector so
    that it broadcasts along channel_dim of a tensor of that rank."""
    shape = [1] * ndim
    shape[channel_dim] = -1
    return shape


def is_broadcastable(shape: List[int], other: List[int]) -> bool:
    """Whether two shapes broadcast together (each trailing pair of dims equal, or one is 1)."""
    for i in range(1, min(len(shape), len(other)) + 1):
        a = shape[len(shape) - i]
        b = other[len(other) - i]
        if a != 1 and b != 1 and a != b:
            return False
    return True


def accumulator_channel_dim(is_linear: bool) -> int:
    """The channel dim of a weight layer's output (its accumulator): the last for linear layers
    (features), 1 for convolutions and the rest."""
    return -1 if is_linear else 1


def _varying_dims(t: Tensor) -> int:
    """How many dims of t have more than one element."""
    count = 0
    for size in t.shape:
        if size > 1:
            count += 1
    return count


def accumulator_scale(
    input_scale: Tensor, weight_scale: Tensor, ndim: int, channel_dim: int
) -> Optional[Tensor]:
    """The scale of a weight layer's accumulator, input scale x weight scale, both viewed along
    the output's channel dim (an output of rank ndim); None when the two do not broadcast (e.g.
    a per-input-channel input scale, or a per-group one, which varies along more than one dim)."""
    if _varying_dims(weight_scale) > 1 or _varying_dims(input_scale) > 1:
        return None
    shape = channel_view_shape(ndim, channel_dim)
    weight_view = weight_scale.view(shape)
    input_view = input_scale.view(shape)
    if not is_broadcastable(list(weight_view.shape), list(input_view.shape)):
        return None
    return weight_view * input_view


# ---- groups of a dimension (per-group scales: MX and groupwise quantizers) ----------------------
# A tensor is grouped along group_dim by padding that dim with zeros to a multiple of group_size,
# then splitting it into (n_groups, group_size); the scale has 1 in place of group_size.


def padding_to_multiple(x: Tensor, dim: int, multiple: int) -> Tensor:
    """x padded with zeros at the end of dim so that its size there is a multiple of multiple."""
    if dim < 0:
        dim = x.dim() + dim
    remainder = x.shape[dim] % multiple
    if remainder == 0:
        return x
    pad: List[int] = [0] * (2 * x.dim())
    # F.pad lists (before, after) pairs from the last dim backwards.
    pad[2 * (x.dim() - 1 - dim) + 1] = multiple - remainder
    return torch.nn.functional.pad(x, pad, mode="constant", value=0.0)


def grouped_shape(shape: List[int], group_dim: int, group_size: int) -> List[int]:
    """shape with group_dim split into (ceil(size / group_size), group_size). A negative
    group_dim counts from the end, so the group_size dim comes right after it there too."""
    out = list(shape)
    dim = group_dim if group_dim >= 0 else len(out) + group_dim
    out[dim] = (out[dim] + group_size - 1) // group_size
    out.insert(dim + 1, group_size)
    return out


def group_view(x: Tensor, group_dim: int, group_size: int) -> Tensor:
    """x padded along group_dim to a multiple of group_size and viewed as its groups."""
    y = padding_to_multiple(x, group_dim, group_size)
    return y.view(grouped_shape(list(x.shape), group_dim, group_size))


def ungroup(grouped: Tensor, group_dim: int, group_size: int, size: int) -> Tensor:
    """The inverse of group_view: merges the (groups, group_size) dims at group_dim (counted in
    the ungrouped tensor) and drops the padding beyond size. Metadata with 1 in place of
    group_size (a scale) is expanded over the group first, so it takes the value's shape."""
    dim = group_dim if group_dim >= 0 else grouped.dim() - 1 + group_dim
    if grouped.shape[dim + 1] != group_size:
        expanded = list(grouped.shape)
        expanded[dim + 1] = group_size
        grouped = grouped.expand(expanded)
    merged = grouped.flatten(dim, dim + 1)
    if merged.shape[dim] == size:
        return merged
    return merged.narrow(dim, 0, size)
