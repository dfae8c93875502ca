#include "ops/abs_percentile_int_quant.h"
#include "ops/common/param_layout.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace brevitas_cpp::meta {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> abs_percentile_int_quant_meta(
    const at::Tensor& x, const std::optional<at::Tensor>&, const at::Tensor& bit_width, int64_t k, bool, bool,
    std::optional<double> scaling_min_val, c10::string_view rounding_mode, bool, bool) {
  ops::detail::check_abs_percentile_int_quant_args(x, bit_width, k, scaling_min_val, rounding_mode,
                                                   "abs_percentile_int_quant");
  return {empty_output_like(x), at::empty({}, x.options()), at::empty({}, x.options()),
          at::empty({}, x.options().dtype(at::kLong))};
}

at::Tensor abs_percentile_int_quant_backward_meta(const std::optional<at::Tensor>& grad,
                                                  const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
                                                  const at::Tensor& scale, const at::Tensor& index,
                                                  const at::Tensor& bit_width, bool, bool,
                                                  c10::string_view rounding_mode, bool, bool) {
  ops::detail::check_abs_percentile_int_quant_backward_args(grad, grad_scale, x, scale, index, bit_width,
                                                            rounding_mode);
  return grad.has_value() ? empty_output_like(x) : at::empty_like(x);  // zeros_like without grad
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("abs_percentile_int_quant", TORCH_FN(abs_percentile_int_quant_meta));
  m.impl("_abs_percentile_int_quant_backward", TORCH_FN(abs_percentile_int_quant_backward_meta));
}

}  // namespace brevitas_cpp::meta
