"""Proxies of per-group quantizers (MX and groupwise), what the four of them share: the group
layout read from the quantizer, and ``quant_tuple``, which gives the quantizer's output back in
the tensor's own shape.

The quantizer works on the tensor viewed as its groups (padded along group_dim to whole groups):
its value, scale and zero point have that grouped layout. ``forward`` wraps them in a
GroupwiseIntQuantTensor or GroupwiseFloatQuantTensor; ``quant_tuple``, what the layers compute
with, merges them back (scale expanded over each group, padding dropped), so a layer's float op
runs on the weight or input it expects. The proxies themselves live in Brevitas's modules
(groupwise_int_parameter_quant, groupwise_float_parameter_quant, groupwise_int_runtime_quant,
groupwise_float_runtime_quant).
"""

from typing import Any, Optional, Sequence, Tuple, Union

from torch import Tensor, nn

from brevitas_cpp.function.shape import ungroup
from brevitas_cpp.proxy.script import QuantTuple
from brevitas_cpp.proxy.utils import _CachedIOGroupwiseInt
from brevitas_cpp.quant_tensor import GroupwiseIntQuantTensor, GroupwiseQuantTensor, QuantTensor
from brevitas_cpp.quant_tensor.groupwise_quant_tensor import regroup_like

__all__: list = []


class _GroupwiseProxy:
    """The group layout of a per-group proxy, read once from its quantizer (plain attributes,
    which the scripted quant_tuple reads), its cache, and the ungrouping of the quantizer's
    output. Listed before the proxy class it extends."""

    CACHE_CLASS: type = _CachedIOGroupwiseInt
    QUANT_TENSOR_CLASS: type = GroupwiseIntQuantTensor

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

    def _grouped_quant_tensor(
        self, qt_args: Tuple[Any, ...], shape: Sequence[int]
    ) -> GroupwiseQuantTensor:
        """QUANT_TENSOR_CLASS of the quantizer's grouped output (value, scale, zero_point, then
        the format: bit_width, or a minifloat's widths, bias, saturation and codes) for a
        tensor of the given shape."""
        value, scale, zero_point, *fmt = qt_args
        return self.QUANT_TENSOR_CLASS(
            value,
            scale,
            zero_point,
            self.groupwise_size,
            self.groupwise_dim,
            *fmt,
            self.is_signed,
            self.training,
            tuple(shape),
        )

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

    def create_quant_tensor(self, qt_args: Tuple[Any, ...]) -> GroupwiseQuantTensor:
        return self._grouped_quant_tensor(qt_args, self.tracked_parameter_list[0].shape)


class _GroupwiseActProxy(_GroupwiseProxy):
    def create_quant_tensor(
        self, qt_args: Union[Tensor, Tuple[Any, ...]], x: Union[Tensor, QuantTensor]
    ) -> QuantTensor:
        if isinstance(qt_args, tuple):
            return self._grouped_quant_tensor(qt_args, x.shape)
        # A passthrough activation keeps the input's quantization.
        if isinstance(x, GroupwiseQuantTensor):
            return regroup_like(x, qt_args, self.training)
        return super().create_quant_tensor(qt_args, x)
