"""Views that lay a tensor out for statistics: flat, per output channel, per batch item, per
batch item and channel, or per output feature, after an optional permutation; and the views of a
weight or an activation as groups of a dimension (per-group scales)."""

from typing import Optional, Tuple

from torch import Tensor

from brevitas_cpp import jit
from brevitas_cpp.core.function_wrapper.misc import Identity
from brevitas_cpp.function.shape import (
    group_view,
    over_batch_over_output_channels,
    over_batch_over_tensor,
    over_output_channels,
    over_output_features,
    over_tensor,
)


class PermuteDims(jit.ScriptModule):
    """x.permute(dims), made contiguous so the following reshape is a view of new memory."""

    def __init__(self, permute_dims: Tuple[int, ...]) -> None:
        super().__init__()
        self.permute_dims = list(permute_dims)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return x.permute(self.permute_dims).contiguous()


def _permute_impl(permute_dims: Optional[Tuple[int, ...]]):
    return PermuteDims(permute_dims) if permute_dims is not None else Identity()


class OverTensorView(jit.ScriptModule):
    """[N, C, ...] -> [N * C * ...]."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return x.reshape(over_tensor(x))


class OverOutputChannelView(jit.ScriptModule):
    """[C_out, ...] -> [C_out, rest] (after the optional permutation)."""

    def __init__(self, permute_dims: Optional[Tuple[int, ...]] = None) -> None:
        super().__init__()
        self.permute_impl = _permute_impl(permute_dims)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        y = self.permute_impl(x)
        return y.reshape(over_output_channels(y))


class OverBatchOverTensorView(jit.ScriptModule):
    """[N, ...] -> [N, rest]."""

    def __init__(self, permute_dims: Optional[Tuple[int, ...]] = None) -> None:
        super().__init__()
        self.permute_impl = _permute_impl(permute_dims)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        y = self.permute_impl(x)
        return y.reshape(over_batch_over_tensor(y))


class OverBatchOverOutputChannelView(jit.ScriptModule):
    """[N, C, ...] -> [N, C, rest]."""

    def __init__(self, permute_dims: Optional[Tuple[int, ...]] = None) -> None:
        super().__init__()
        self.permute_impl = _permute_impl(permute_dims)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        y = self.permute_impl(x)
        return y.reshape(over_batch_over_output_channels(y))


class OverOutputFeaturesView(jit.ScriptModule):
    """[..., F] -> [rest, F]."""

    def __init__(self, permute_dims: Optional[Tuple[int, ...]] = None) -> None:
        super().__init__()
        self.permute_impl = _permute_impl(permute_dims)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        y = self.permute_impl(x)
        return y.reshape(over_output_features(y))


class OverSubChannelBlockView(jit.ScriptModule):
    """A weight as groups of group_size along group_dim (padded with zeros to a multiple):
    [..., C, ...] -> expanded_groupwise_shape = [..., ceil(C / group_size), group_size, ...].
    A tensor already of that rank (a zero point being quantized) is returned as it is."""

    __constants__ = ["group_size", "group_dim", "expanded_rank"]

    def __init__(
        self, expanded_groupwise_shape: Tuple[int, ...], group_size: int, group_dim: int
    ) -> None:
        super().__init__()
        self.expanded_groupwise_shape = list(expanded_groupwise_shape)
        self.expanded_rank = len(self.expanded_groupwise_shape)
        self.group_size = group_size
        self.group_dim = group_dim

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == self.expanded_rank:
            return x
        return group_view(x, self.group_dim, self.group_size)


class DynamicOverSubChannelBlockView(jit.ScriptModule):
    """An activation of any shape as groups of group_size along group_dim (padded with zeros to
    a multiple); a negative group_dim counts from the end."""

    __constants__ = ["group_size", "group_dim"]

    def __init__(self, group_size: int, group_dim: int) -> None:
        super().__init__()
        self.group_size = group_size
        self.group_dim = group_dim

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return group_view(x, self.group_dim, self.group_size)


class StatsInputViewShapeImpl:
    """Namespace of the views, under the names Brevitas's quantizers use."""

    def __init__(self) -> None:
        super().__init__()

    OVER_TENSOR = OverTensorView
    OVER_OUTPUT_CHANNELS = OverOutputChannelView
    OVER_BATCH_OVER_TENSOR = OverBatchOverTensorView
    OVER_BATCH_OVER_OUTPUT_CHANNELS = OverBatchOverOutputChannelView
    OVER_OUTPUT_FEATURES = OverOutputFeaturesView
    OVER_SUBCHANNEL_BLOCK = OverSubChannelBlockView
    DYNAMIC_OVER_SUBCHANNEL_BLOCK = DynamicOverSubChannelBlockView
