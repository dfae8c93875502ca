"""Helpers shared by the proxies: the cache of a quantized tensor's metadata kept at inference
(Brevitas's ``_CachedIO``) and ``ConvertRuntimeStatsToParameter``, the
state_dict hook of activation quantizers (defined with the activation solver, re-exported here).
"""

from typing import Any

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


def __getattr__(name: str) -> Any:
    # Resolved on first use: the solvers may import the proxies to name their proxy_class, so
    # importing a solver module here at import time could close an import cycle.
    if name == "ConvertRuntimeStatsToParameter":
        from brevitas_cpp.inject.solver.act import ConvertRuntimeStatsToParameter
        return ConvertRuntimeStatsToParameter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
