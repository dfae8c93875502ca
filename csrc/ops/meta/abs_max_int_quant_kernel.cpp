#include "ops/abs_max_int_quant.h"
#include "ops/common/param_layout.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace brevitas_cpp::meta {
namespace {

std::tuple<at::Tensor, at::Tensor> abs_max_int_quant_meta(const at::Tensor& w, const at::Tensor& bit_width,
                                                          std::optional<int64_t> channel_dim, bool, bool,
                                                          std::optional<double> scaling_min_val,
                                                          c10::string_view rounding_mode, bool) {
  const int64_t dim = ops::detail::check_abs_max_int_quant_args(w, bit_width, channel_dim, scaling_min_val,
                                                                rounding_mode, "abs_max_int_quant");
  return {empty_output_like(w), at::empty_symint(ops::detail::abs_max_scale_shape(w, dim), w.options())};
}

at::Tensor abs_max_int_quant_backward_meta(const at::Tensor& grad, const std::optional<at::Tensor>& grad_scale,
                                           const at::Tensor& w, const at::Tensor& scale, const at::Tensor& bit_width,
                                           std::optional<int64_t> channel_dim, bool, bool,
                                           std::optional<double> scaling_min_val, c10::string_view rounding_mode,
                                           bool) {
  ops::detail::check_abs_max_int_quant_backward_args(grad, grad_scale, w, scale, bit_width, channel_dim,
                                                     scaling_min_val, rounding_mode);
  return empty_output_like(w);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("abs_max_int_quant", TORCH_FN(abs_max_int_quant_meta));
  m.impl("_abs_max_int_quant_backward", TORCH_FN(abs_max_int_quant_backward_meta));
}

}  // namespace brevitas_cpp::meta
