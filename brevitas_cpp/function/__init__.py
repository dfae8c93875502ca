"""The Brevitas function API: straight-through estimators (C++ ops), TorchScript helpers
for integer ranges and clamps, and view-shape helpers."""

from brevitas_cpp.function.ops import (
    binary_sign,
    dpu_round,
    identity,
    max_int,
    min_int,
    round_to_zero,
    tensor_clamp,
    tensor_clamp_,
)
from brevitas_cpp.function.ops_ste import (
    abs_binary_sign_grad,
    binary_sign_ste,
    ceil_ste,
    dpu_round_ste,
    floor_ste,
    round_ste,
    round_to_zero_ste,
    scalar_clamp_min_ste,
    scalar_clamp_ste,
    scalar_signed_clamp_min_ste,
    tensor_clamp_ste,
    ternary_sign_ste,
)
from brevitas_cpp.function.quant import (
    binary_quant,
    clamped_binary_quant,
    int_quant,
    quantization_int8,
    ternary_quant,
)
from brevitas_cpp.function.shape import (
    over_batch_over_output_channels,
    over_batch_over_tensor,
    over_output_channels,
    over_output_features,
    over_tensor,
)

__all__ = [
    "abs_binary_sign_grad",
    "binary_quant",
    "binary_sign",
    "binary_sign_ste",
    "ceil_ste",
    "clamped_binary_quant",
    "dpu_round",
    "dpu_round_ste",
    "floor_ste",
    "identity",
    "int_quant",
    "max_int",
    "min_int",
    "over_batch_over_output_channels",
    "over_batch_over_tensor",
    "over_output_channels",
    "over_output_features",
    "over_tensor",
    "quantization_int8",
    "round_ste",
    "round_to_zero",
    "round_to_zero_ste",
    "scalar_clamp_min_ste",
    "scalar_clamp_ste",
    "scalar_signed_clamp_min_ste",
    "tensor_clamp",
    "tensor_clamp_",
    "tensor_clamp_ste",
    "ternary_quant",
    "ternary_sign_ste",
]
