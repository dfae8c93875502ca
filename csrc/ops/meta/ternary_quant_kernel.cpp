#include "ops/binary_quant.h"
#include "ops/common/param_layout.h"
#include "ops/ternary_quant.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace brevitas_cpp::meta {
namespace {

at::Tensor ternary_quant_meta(const at::Tensor& x, const at::Tensor& scale, double threshold) {
  ops::detail::check_scaled_quant_args(x, scale, "ternary_quant");
  ops::detail::check_threshold(threshold, "ternary_quant");
  return empty_output_like(x);
}

std::tuple<at::Tensor, at::Tensor> ternary_quant_backward_meta(const at::Tensor&, const at::Tensor& x,
                                                               const at::Tensor& scale, double threshold,
                                                               std::array<bool, 2> output_mask) {
  ops::detail::check_scaled_quant_args(x, scale, "_ternary_quant_backward");
  ops::detail::check_threshold(threshold, "_ternary_quant_backward");
  return {output_mask[0] ? empty_output_like(x) : at::Tensor(),
          output_mask[1] ? at::empty_symint(scale.sym_sizes(), scale.options()) : at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("ternary_quant", TORCH_FN(ternary_quant_meta));
  m.impl("_ternary_quant_backward", TORCH_FN(ternary_quant_backward_meta));
}

}  // namespace brevitas_cpp::meta
