"""Helpers shared by the proxies: the cache of a quantized tensor's metadata kept at inference
(Brevitas's ``_CachedIO``, ``_CachedIOFloat`` for minifloat tensors and ``_CachedIOGroupwise*``
for per-group ones) and
``ConvertRuntimeStatsToParameter``, the state_dict hook of activation quantizers whose scale is
learned from runtime statistics.
"""

from typing import Any, Optional, Sequence

import torch

__all__ = ["ConvertRuntimeStatsToParameter"]


class _CachedIO:
    """What a proxy remembers of the last quantized tensor it produced in eval: the metadata
    (scale, zero point, bit width, sign) and, unless metadata_only, the tensor itself."""

    def __init__(self, quant_tensor: Any, metadata_only: bool) -> None:
        self.shape = quant_tensor.value.shape
        if metadata_only:
            self.value = None
            self.quant_tensor = quant_tensor.set(value=None)
        else:
            self.quant_tensor = quant_tensor
            self.value = quant_tensor.value
        self.scale = quant_tensor.scale

    @property
    def zero_point(self) -> torch.Tensor:
        return self.quant_tensor.zero_point

    @property
    def bit_width(self) -> torch.Tensor:
        return self.quant_tensor.bit_width

    @property
    def signed(self) -> bool:
        return self.quant_tensor.signed


class _MinifloatMetadata:
    """The minifloat format of a cache's quant_tensor."""

    @property
    def exponent_bit_width(self) -> torch.Tensor:
        return self.quant_tensor.exponent_bit_width

    @property
    def mantissa_bit_width(self) -> torch.Tensor:
        return self.quant_tensor.mantissa_bit_width

    @property
    def exponent_bias(self) -> torch.Tensor:
        return self.quant_tensor.exponent_bias

    @property
    def saturating(self) -> bool:
        return self.quant_tensor.saturating

    @property
    def inf_values(self) -> Optional[Sequence[str]]:
        return self.quant_tensor.inf_values

    @property
    def nan_values(self) -> Optional[Sequence[str]]:
        return self.quant_tensor.nan_values


class _CachedIOFloat(_MinifloatMetadata, _CachedIO):
    """_CachedIO for a FloatQuantTensor: the minifloat metadata (scale, zero point, exponent and
    mantissa widths, bias, saturation, inf/NaN codes, sign) and, unless metadata_only, the
    tensor itself."""

    @property
    def bit_width(self) -> torch.Tensor:
        raise AttributeError(
            "a minifloat cache has no bit_width: read exponent_bit_width and mantissa_bit_width"
        )


class _CachedIOGroupwise:
    """What a per-group proxy remembers in eval: the grouped scale and zero point (scale_,
    zero_point_), their ungrouped views, and unless metadata_only the tensor itself."""

    def __init__(self, quant_tensor: Any, metadata_only: bool) -> None:
        self.shape = quant_tensor.value.shape
        self.scale = quant_tensor.scale
        self.scale_ = quant_tensor.scale_
        self.zero_point_ = quant_tensor.zero_point_
        self._zero_point = quant_tensor.zero_point
        if metadata_only:
            self.value = None
            self.quant_tensor = quant_tensor.set(value_=None)
        else:
            self.quant_tensor = quant_tensor
            self.value = quant_tensor.value

    @property
    def zero_point(self) -> torch.Tensor:
        return self._zero_point

    @property
    def group_size(self) -> int:
        return self.quant_tensor.group_size

    @property
    def group_dim(self) -> int:
        return self.quant_tensor.group_dim

    @property
    def signed(self) -> bool:
        return self.quant_tensor.signed


class _CachedIOGroupwiseInt(_CachedIOGroupwise):
    @property
    def bit_width(self) -> torch.Tensor:
        return self.quant_tensor.bit_width


class _CachedIOGroupwiseFloat(_MinifloatMetadata, _CachedIOGroupwise):
    pass


class ConvertRuntimeStatsToParameter:
    """state_dict hook for activation scales learned from runtime statistics: a checkpoint that
    holds only the collected statistic (taken while the scale was not a parameter yet) gets the
    parameter initialised from it, and the statistics are dropped.

    Key layout as in Brevitas's activation proxies; brevitas_cpp.proxy calls it as
    ``hook(prefix, state_dict)`` before loading.
    """

    def __init__(self, restrict_scaling_impl: torch.nn.Module) -> None:
        self.restrict_scaling_impl = restrict_scaling_impl
        self.scaling_impl_postfix = "fused_activation_quant_proxy.tensor_quant.scaling_impl"
        self.runtime_stats_postfix = self.scaling_impl_postfix + ".runtime_stats"
        self.running_stats_postfix = self.runtime_stats_postfix + ".running_stats"
        self.scaling_parameter_postfix = self.scaling_impl_postfix + ".value"

    def __call__(self, prefix: str, state_dict: dict) -> None:
        stats_key = prefix + self.running_stats_postfix
        parameter_key = prefix + self.scaling_parameter_postfix
        if stats_key in state_dict and parameter_key not in state_dict:
            # Statistics are in the float domain; the parameter lives in the restricted one.
            init = state_dict[stats_key].abs()
            state_dict[parameter_key] = self.restrict_scaling_impl.restrict_init_tensor(init)
        for key in [k for k in state_dict if k.startswith(prefix + self.runtime_stats_postfix)]:
            del state_dict[key]
