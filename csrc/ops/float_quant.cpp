#include "ops/float_quant.h"

#include "ops/binary_quant.h"
#include "ops/common/checks.h"
#include "ops/common/op_handle.h"

#include <ATen/Dispatch.h>
#include <c10/util/overflows.h>
#include <torch/library.h>

#include <cmath>

namespace brevitas_cpp::ops {

at::Tensor float_quant(const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
                       int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed,
                       bool saturating, bool inf_values, bool nan_values, c10::string_view rounding_mode) {
  static auto op = op_handle<decltype(float_quant)>("brevitas_cpp::float_quant");
  return op.call(x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value, is_signed, saturating,
                 inf_values, nan_values, rounding_mode);
}

std::tuple<at::Tensor, at::Tensor> _float_quant_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
    int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed, bool saturating,
    bool inf_values, bool nan_values, c10::string_view rounding_mode, std::array<bool, 2> output_mask) {
  static auto op = op_handle<decltype(_float_quant_backward)>("brevitas_cpp::_float_quant_backward");
  return op.call(grad, x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value, is_signed,
                 saturating, inf_values, nan_values, rounding_mode, output_mask);
}

namespace detail {
MinifloatFormat check_float_quant_args(const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
                                       int64_t mantissa_bit_width, int64_t exponent_bias, double max_value,
                                       bool is_signed, bool saturating, bool inf_values, bool nan_values,
                                       c10::string_view rounding_mode, const char* op) {
  check_scaled_quant_args(x, scale, op);
  TORCH_CHECK(exponent_bit_width >= kMinExponentBits && exponent_bit_width <= kMaxExponentBits, "brevitas_cpp::", op,
              ": exponent_bit_width must be in [", kMinExponentBits, ", ", kMaxExponentBits, "], got ",
              exponent_bit_width);
  TORCH_CHECK(mantissa_bit_width >= kMinMantissaBits && mantissa_bit_width <= kMaxMantissaBits, "brevitas_cpp::", op,
              ": mantissa_bit_width must be in [", kMinMantissaBits, ", ", kMaxMantissaBits,
              "] (a grid exact in float32), got ", mantissa_bit_width);
  TORCH_CHECK(std::abs(exponent_bias) <= 1000, "brevitas_cpp::", op, ": exponent_bias must be in [-1000, 1000], got ",
              exponent_bias);
  // The largest value the format encodes: (2 - 2^-m) * 2^(2^e - 1 - bias).
  const double format_max = std::ldexp(2.0 - std::ldexp(1.0, -static_cast<int>(mantissa_bit_width)),
                                       static_cast<int>((int64_t{1} << exponent_bit_width) - 1 - exponent_bias));
  TORCH_CHECK(std::isfinite(max_value) && max_value > 0.0 && max_value <= format_max, "brevitas_cpp::", op,
              ": max_value must be positive, finite and at most the format's largest value ", format_max, " (e",
              exponent_bit_width, "m", mantissa_bit_width, ", bias ", exponent_bias, "), got ", max_value);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "check_float_quant_args", [&] {
    const bool overflows = c10::overflows<scalar_t, double>(max_value);
    TORCH_CHECK(!overflows, "brevitas_cpp::", op, ": max_value (", max_value, ") cannot be represented in x's dtype ",
                x.scalar_type());
  });
  TORCH_CHECK(saturating || inf_values || nan_values, "brevitas_cpp::", op,
              ": a non-saturating format (saturating=False) needs inf_values or nan_values: what values "
              "beyond max_value become");
  MinifloatFormat f;
  f.mantissa_bits = static_cast<int>(mantissa_bit_width);
  f.min_exponent = static_cast<int>(1 - exponent_bias - mantissa_bit_width);
  f.max_value = max_value;
  f.is_signed = is_signed;
  f.saturating = saturating;
  f.inf_values = inf_values;
  f.rounding = parse_rounding_mode(rounding_mode, op);
  return f;
}
}  // namespace detail

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def(
      "float_quant(Tensor x, Tensor scale, int exponent_bit_width, int mantissa_bit_width, int exponent_bias, "
      "float max_value, bool signed=True, bool saturating=True, bool inf_values=False, bool nan_values=False, "
      "str rounding_mode=\"round\") -> Tensor");
  m.def(
      "_float_quant_backward(Tensor grad, Tensor x, Tensor scale, int exponent_bit_width, int mantissa_bit_width, "
      "int exponent_bias, float max_value, bool signed, bool saturating, bool inf_values, bool nan_values, "
      "str rounding_mode, bool[2] output_mask) -> (Tensor, Tensor)");
}

}  // namespace brevitas_cpp::ops
