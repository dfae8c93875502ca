// float_quant: minifloat (FP8 e4m3/e5m2, OCP and FNUZ, FP6, FP4, custom widths) fake
// quantization in one pass, Brevitas's FloatQuant with its FloatClamp:
//   u = x / scale;  I = 2^max(floor(log2|u|) - m, 1 - exponent_bias - m);  q = I * round(u / I)
//   q = clamp(q, -max_value, max_value) ([0, max_value] unsigned); beyond it, when not saturating,
//   +-inf (inf_values) or NaN;  y = q * scale.
// x's gradient: straight-through round and floor with the path through log2|u| and the clamp's
// mask, as Brevitas's autograd gives it; scale's: reduced to its shape.
#pragma once

#include "ops/common/rounding.h"

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <array>
#include <tuple>

namespace brevitas_cpp::ops {

at::Tensor float_quant(const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
                       int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed,
                       bool saturating, bool inf_values, bool nan_values, c10::string_view rounding_mode);

// Gradients (x, scale) selected by output_mask; unselected ones are undefined.
std::tuple<at::Tensor, at::Tensor> _float_quant_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
    int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed, bool saturating,
    bool inf_values, bool nan_values, c10::string_view rounding_mode, std::array<bool, 2> output_mask);

// Bounds of the format's widths (inclusive): the grid must be exact in float32.
inline constexpr int64_t kMinExponentBits = 1, kMaxExponentBits = 8;
inline constexpr int64_t kMinMantissaBits = 1, kMaxMantissaBits = 23;

namespace detail {
// The format's checks (no tensor values): widths, bias, max_value, the non-saturating mode and
// the rounding mode; x, scale and their dtypes, shapes and devices as every scaled op.
MinifloatFormat check_float_quant_args(const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
                                       int64_t mantissa_bit_width, int64_t exponent_bias, double max_value,
                                       bool is_signed, bool saturating, bool inf_values, bool nan_values,
                                       c10::string_view rounding_mode, const char* op);
}  // namespace detail

}  // namespace brevitas_cpp::ops
