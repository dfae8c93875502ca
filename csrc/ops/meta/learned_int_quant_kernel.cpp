#include "ops/common/param_layout.h"
#include "ops/learned_int_quant.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace brevitas_cpp::meta {
namespace {

// y as int_quant's; scale as the kernels make it: aten div of the clamp's output (laid out like
// value) or of value itself by threshold, run on meta tensors for its shape and strides.
std::tuple<at::Tensor, at::Tensor> learned_int_quant_meta(const at::Tensor& x, const at::Tensor& value,
                                                          const at::Tensor& threshold, const at::Tensor& zero_point,
                                                          const at::Tensor& bit_width, bool, bool,
                                                          std::optional<double> min_val, c10::string_view rounding_mode,
                                                          bool, bool) {
  ops::detail::check_learned_int_quant_args(x, value, threshold, zero_point, bit_width, min_val, rounding_mode);
  const at::Tensor clamped = min_val.has_value() ? empty_output_like(value) : value;
  return {empty_output_like(x), at::div(clamped, threshold)};
}

// grad_x as int_quant's (relu_int_quant's); grad_value as the kernels make it: int_quant's scale
// gradient (contiguous, scale's shape), plus grad_scale, divided by threshold.
std::tuple<at::Tensor, at::Tensor> learned_int_quant_backward_meta(
    const std::optional<at::Tensor>& grad_y, const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
    const at::Tensor& scale, const at::Tensor& threshold, const at::Tensor& zero_point, const at::Tensor& bit_width,
    bool, bool, c10::string_view rounding_mode, bool, bool, std::array<bool, 2> output_mask) {
  ops::detail::check_learned_int_quant_backward_args(grad_y, grad_scale, x, scale, threshold, zero_point, bit_width,
                                                     rounding_mode);
  const bool has_gy = grad_y.has_value() && grad_y->defined();
  const bool has_gs = grad_scale.has_value() && grad_scale->defined();
  at::Tensor gx = output_mask[0] && has_gy ? empty_output_like(x, grad_y->scalar_type()) : at::Tensor();
  at::Tensor gv;
  if (output_mask[1] && (has_gy || has_gs)) {
    const at::Tensor gs = has_gy ? at::empty_symint(scale.sym_sizes(), scale.options()) : at::Tensor();
    const at::Tensor g = has_gy ? (has_gs ? gs + *grad_scale : gs) : *grad_scale;
    gv = at::div(g, threshold);
  }
  return {gx, gv};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("learned_int_quant", TORCH_FN(learned_int_quant_meta));
  m.impl("_learned_int_quant_backward", TORCH_FN(learned_int_quant_backward_meta));
}

}  // namespace brevitas_cpp::meta
