"""Proxies of per-group quantizers (MX and groupwise; Brevitas's brevitas.proxy.groupwise_*).

The quantizer works on the tensor viewed as its groups (padded along group_dim to whole groups):
its value, scale and zero point have that grouped layout. ``forward`` wraps them in a
GroupwiseIntQuantTensor or GroupwiseFloatQuantTensor; ``quant_tuple``, what the layers compute
with, gives them back in the tensor's own shape (merged, scale expanded over each group, padding
dropped), so a layer's float op runs on the weight or input it expects.
"""

from typing import Any, Optional, Tuple, Union

from torch import Tensor, nn

from brevitas_cpp.function.shape import ungroup
from brevitas_cpp.proxy.float_parameter_quant import WeightFloatQuantProxyFromInjector
from brevitas_cpp.proxy.float_runtime_quant import ActFloatQuantProxyFromInjector
from brevitas_cpp.proxy.parameter_quant import WeightQuantProxyFromInjector
from brevitas_cpp.proxy.runtime_quant import ActQuantProxyFromInjector
from brevitas_cpp.proxy.script import QuantTuple
from brevitas_cpp.proxy.utils import _CachedIOGroupwiseFloat, _CachedIOGroupwiseInt
from brevitas_cpp.quant_tensor import (
    GroupwiseFloatQuantTensor,
    GroupwiseIntQuantTensor,
    GroupwiseQuantTensor,
    QuantTensor,
)
from brevitas_cpp.quant_tensor.groupwise_quant_tensor import regroup_like

__all__ = [
    "GroupwiseActFloatQuantProxyFromInjector",
    "GroupwiseActQuantProxyFromInjector",
    "GroupwiseWeightFloatQuantProxyFromInjector",
    "GroupwiseWeightQuantProxyFromInjector",
]


class _GroupwiseProxy:
    """The group layout of a per-group proxy, read once from its quantizer (plain attributes,
    which the scripted quant_tuple reads), its cache, and the ungrouping of the quantizer's
    output. Listed before the proxy class it extends."""

    CACHE_CLASS: type = _CachedIOGroupwiseInt

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        super().__init__(quant_layer, quant_injector)
        quant_injector = self.quant_injector
        for name in ("group_size", "group_dim"):
            if name not in quant_injector or getattr(quant_injector, name) is None:
                raise RuntimeError(
                    f"{type(self).__name__}: quantizer {quant_injector.__name__} has no "
                    f"{name}; a per-group proxy needs group_size and group_dim (e.g. "
                    f"scaling_per_output_type=GROUP with group_size=32)"
                )
        self.groupwise_size: int = int(quant_injector.group_size)
        self.groupwise_dim: int = int(quant_injector.group_dim)
        # The size of group_dim once ungrouped: a weight's (it may be handed in grouped, e.g.
        # by a statistic's search); -1: the input's, for activations.
        self.ungrouped_size: int = self._ungrouped_size()
        self.cache_class = self.CACHE_CLASS

    def _ungrouped_size(self) -> int:
        return -1

    def quant_tuple(self, x: Tensor) -> QuantTuple:
        """The layout_quant_tuple in x's own shape: what layers compute with."""
        return self._ungrouped_tuple(x, self.layout_quant_tuple(x))

    @property
    def group_size(self) -> int:
        return self.groupwise_size

    @property
    def group_dim(self) -> int:
        return self.groupwise_dim

    def apply_input_view(self, x: Tensor) -> Tensor:
        """x viewed as its groups, with the (groups, group_size) dims merged (Brevitas's)."""
        x = self.input_view_impl(x)
        start = self.groupwise_dim if self.groupwise_dim >= 0 else self.groupwise_dim - 1
        return x.flatten(start, start + 1)

    def _ungrouped_tuple(self, x: Tensor, grouped: QuantTuple) -> QuantTuple:
        value, scale, zero_point, bit_width = grouped
        if scale is None or zero_point is None:
            return value, None, None, None
        size = self.ungrouped_size if self.ungrouped_size >= 0 else x.shape[self.groupwise_dim]
        group_dim, group_size = self.groupwise_dim, self.groupwise_size
        value = ungroup(value, group_dim, group_size, size)
        scale = ungroup(scale, group_dim, group_size, size)
        if zero_point.dim() == grouped[0].dim():
            zero_point = ungroup(zero_point, group_dim, group_size, size)
        return value, scale, zero_point, bit_width


class _GroupwiseWeightProxy(_GroupwiseProxy):
    def _ungrouped_size(self) -> int:
        return int(self.tracked_parameter_list[0].shape[self.groupwise_dim])

    def scale_(self) -> Optional[Tensor]:
        """The grouped scale (1 in place of the group size)."""
        return self.retrieve_attribute("scale_")

    def zero_point_(self) -> Optional[Tensor]:
        return self.retrieve_attribute("zero_point_")


class GroupwiseWeightQuantProxyFromInjector(_GroupwiseWeightProxy, WeightQuantProxyFromInjector):
    """Integer weights with a scale per group of input channels; forward returns a
    GroupwiseIntQuantTensor."""

    def quantizer_output(self, x: Tensor) -> Tuple[Any, ...]:
        return self.layout_quant_tuple(x)

    def create_quant_tensor(self, qt_args: Tuple[Any, ...]) -> GroupwiseIntQuantTensor:
        value, scale, zero_point, bit_width = qt_args
        return GroupwiseIntQuantTensor(
            value,
            scale,
            zero_point,
            self.groupwise_size,
            self.groupwise_dim,
            bit_width,
            self.is_signed,
            self.training,
            tuple(self.tracked_parameter_list[0].shape),
        )


class GroupwiseWeightFloatQuantProxyFromInjector(
    _GroupwiseWeightProxy, WeightFloatQuantProxyFromInjector
):
    """Minifloat weights with a scale per group of input channels (MX FP8); forward returns a
    GroupwiseFloatQuantTensor."""

    CACHE_CLASS = _CachedIOGroupwiseFloat

    def create_quant_tensor(self, qt_args: Tuple[Any, ...]) -> GroupwiseFloatQuantTensor:
        value, scale, zero_point, *fmt = qt_args
        return GroupwiseFloatQuantTensor(
            value,
            scale,
            zero_point,
            self.groupwise_size,
            self.groupwise_dim,
            *fmt,
            self.is_signed,
            self.training,
            tuple(self.tracked_parameter_list[0].shape),
        )


class GroupwiseActQuantProxyFromInjector(_GroupwiseProxy, ActQuantProxyFromInjector):
    """Integer activations with a scale per group along group_dim, computed from each input
    (MX INT8); forward returns a GroupwiseIntQuantTensor."""

    def quantizer_output(self, x: Tensor) -> Tuple[Any, ...]:
        return self.layout_quant_tuple(x)

    def create_quant_tensor(
        self, qt_args: Union[Tensor, Tuple[Any, ...]], x: Union[Tensor, QuantTensor]
    ) -> QuantTensor:
        if isinstance(qt_args, tuple):
            value, scale, zero_point, bit_width = qt_args
            return GroupwiseIntQuantTensor(
                value,
                scale,
                zero_point,
                self.groupwise_size,
                self.groupwise_dim,
                bit_width,
                self.is_signed,
                self.training,
                tuple(x.shape),
            )
        # A passthrough activation keeps the input's quantization.
        if isinstance(x, GroupwiseQuantTensor):
            return regroup_like(x, qt_args, self.training)
        return super().create_quant_tensor(qt_args, x)


class GroupwiseActFloatQuantProxyFromInjector(_GroupwiseProxy, ActFloatQuantProxyFromInjector):
    """Minifloat activations with a scale per group along group_dim, computed from each input
    (MX FP8); forward returns a GroupwiseFloatQuantTensor."""

    CACHE_CLASS = _CachedIOGroupwiseFloat

    def create_quant_tensor(
        self, qt_args: Union[Tensor, Tuple[Any, ...]], x: Union[Tensor, QuantTensor]
    ) -> QuantTensor:
        if isinstance(qt_args, tuple):
            value, scale, zero_point, *fmt = qt_args
            return GroupwiseFloatQuantTensor(
                value,
                scale,
                zero_point,
                self.groupwise_size,
                self.groupwise_dim,
                *fmt,
                self.is_signed,
                self.training,
                tuple(x.shape),
            )
        if isinstance(x, GroupwiseQuantTensor):
            return regroup_like(x, qt_args, self.training)
        return super().create_quant_tensor(qt_args, x)
