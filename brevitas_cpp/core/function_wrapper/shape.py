"""Views that lay a tensor out for statistics: flat, per output channel, per batch item, per
batch item and channel, or per output feature, after an optional permutation."""

from typing import Optional, Tuple

from torch import Tensor

from brevitas_cpp import jit
from brevitas_cpp.core.function_wrapper.misc import Identity
from brevitas_cpp.function.shape import (
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


class StatsInputViewShapeImpl:
    """Namespace of the views, under the names Brevitas's quantizers use."""

    def __init__(self) -> None:
        super().__init__()

    OVER_TENSOR = OverTensorView
    OVER_OUTPUT_CHANNELS = OverOutputChannelView
    OVER_BATCH_OVER_TENSOR = OverBatchOverTensorView
    OVER_BATCH_OVER_OUTPUT_CHANNELS = OverBatchOverOutputChannelView
    OVER_OUTPUT_FEATURES = OverOutputFeaturesView
