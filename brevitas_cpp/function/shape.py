"""Shapes s such that x.view(s) flattens x along chosen dimensions (Brevitas's helpers), and the
per-channel view and accumulator-scale rules of the weight layers."""

from typing import List, Optional, Tuple

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


def accumulator_scale(
    input_scale: Tensor, weight_scale: Tensor, ndim: int, channel_dim: int
) -> Optional[Tensor]:
    """The scale of a weight layer's accumulator, input scale x weight scale, both viewed along
    the output's channel dim (an output of rank ndim); None when the two do not broadcast (e.g.
    a per-input-channel input scale)."""
    shape = channel_view_shape(ndim, channel_dim)
    weight_view = weight_scale.view(shape)
    input_view = input_scale.view(shape)
    if not is_broadcastable(list(weight_view.shape), list(input_view.shape)):
        return None
    return weight_view * input_view
