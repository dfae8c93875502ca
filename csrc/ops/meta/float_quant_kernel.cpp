#include "ops/common/param_layout.h"
#include "ops/float_quant.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace brevitas_cpp::meta {
namespace {

at::Tensor float_quant_meta(const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
                            int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed,
                            bool saturating, bool inf_values, bool nan_values, c10::string_view rounding_mode) {
  ops::detail::check_float_quant_args(x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value,
                                      is_signed, saturating, inf_values, nan_values, rounding_mode, "float_quant");
  return empty_output_like(x);
}

std::tuple<at::Tensor, at::Tensor> float_quant_backward_meta(
    const at::Tensor& /*grad*/, const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
    int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed, bool saturating,
    bool inf_values, bool nan_values, c10::string_view rounding_mode, std::array<bool, 2> output_mask) {
  ops::detail::check_float_quant_args(x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value,
                                      is_signed, saturating, inf_values, nan_values, rounding_mode,
                                      "_float_quant_backward");
  return {output_mask[0] ? empty_output_like(x) : at::Tensor(),
          output_mask[1] ? at::empty_symint(scale.sym_sizes(), scale.options()) : at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("float_quant", TORCH_FN(float_quant_meta));
  m.impl("_float_quant_backward", TORCH_FN(float_quant_backward_meta));
}

}  // namespace brevitas_cpp::meta
