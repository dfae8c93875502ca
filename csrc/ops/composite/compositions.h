// The ops as compositions of ATen ops: the kernels of devices without a dedicated kernel
// (registered for CompositeExplicitAutograd; CPU, CUDA and Meta have their own). Each is the
// composition the fused kernels replace, so on the CPU it gives the CPU kernel's forward and
// x's gradient bit for bit (tests/ops/test_composite_kernels.py calls it there directly).
//
// Like the CUDA kernels they read no tensor value on the host: an invalid scale, zero point or
// bit width gives NaN where the CPU kernel raises.
#pragma once

#include "ops/common/rounding.h"

#include <ATen/ATen.h>

namespace brevitas_cpp::composite {

// round_mode(u) with the rounding of each mode (rounding.h), as ATen ops.
at::Tensor round_as(const at::Tensor& u, RoundingMode mode);

// Brevitas's binary sign: +1 for x >= 0 (including -0), -1 otherwise, NaN kept.
at::Tensor binary_sign(const at::Tensor& x);

// torch.sign with NaN kept.
at::Tensor sign_keep_nan(const at::Tensor& x);

// `t` laid out as the op's output for x (empty_output_like): the Meta kernels promise that
// layout, and the composition of ATen ops may pick another.
at::Tensor as_output_like(const at::Tensor& t, const at::Tensor& x);

// NaN where `valid` is false: the value checks of the CPU kernels, without a host read.
at::Tensor nan_where_invalid(const at::Tensor& y, const at::Tensor& valid);

// The double v in x's dtype, as a 0-dim tensor on x's device, converted as the CPU kernels
// convert it (static_cast: through float for float16/bfloat16; inf where it overflows).
at::Tensor scalar_in_dtype_of(double v, const at::Tensor& x);

// scale > 0 and finite, elementwise.
at::Tensor positive_finite(const at::Tensor& scale);

// scale normal (at least its dtype's smallest normal), positive and finite, elementwise
// (scalar_math::is_normal_scale).
at::Tensor normal_scale(const at::Tensor& scale);

// scale, NaN where normal_scale is false (scalar_math::normal_scale_or_nan): a backward computed
// with it gives NaN wherever it reads such a scale, as on CUDA.
at::Tensor normal_scale_or_nan(const at::Tensor& scale);

// IntScaling's threshold in bit_width's dtype, then `dtype`: 2^(b-1) - 1 signed narrow (the
// composition's -(1 - 2^(b-1)), the same value: rounding is symmetric in sign), 2^(b-1)
// signed, 2^b - 1 - narrow unsigned.
at::Tensor int_threshold(const at::Tensor& bit_width, bool is_signed, bool narrow_range, at::ScalarType dtype);

}  // namespace brevitas_cpp::composite
