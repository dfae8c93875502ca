#include "ops/binary_quant.h"
#include "ops/common/param_layout.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace brevitas_cpp::meta {
namespace {

at::Tensor binary_quant_meta(const at::Tensor& x, const at::Tensor& scale) {
  ops::detail::check_scaled_quant_args(x, scale, "binary_quant");
  return empty_output_like(x);
}

at::Tensor clamped_binary_quant_meta(const at::Tensor& x, const at::Tensor& scale) {
  ops::detail::check_scaled_quant_args(x, scale, "clamped_binary_quant");
  return empty_output_like(x);
}

std::tuple<at::Tensor, at::Tensor> scaled_backward_meta(const at::Tensor& x, const at::Tensor& scale,
                                                        std::array<bool, 2> output_mask, const char* op) {
  ops::detail::check_scaled_quant_args(x, scale, op);
  return {output_mask[0] ? empty_output_like(x) : at::Tensor(),
          output_mask[1] ? at::empty_symint(scale.sym_sizes(), scale.options()) : at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor> binary_quant_backward_meta(const at::Tensor& grad,
                                                              const std::optional<at::Tensor>& x,
                                                              const at::Tensor& scale,
                                                              std::array<bool, 2> output_mask) {
  return scaled_backward_meta(ops::detail::binary_quant_backward_input(grad, x, output_mask), scale, output_mask,
                              "_binary_quant_backward");
}

std::tuple<at::Tensor, at::Tensor> clamped_binary_quant_backward_meta(const at::Tensor&, const at::Tensor& x,
                                                                      const at::Tensor& scale,
                                                                      std::array<bool, 2> output_mask) {
  return scaled_backward_meta(x, scale, output_mask, "_clamped_binary_quant_backward");
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("binary_quant", TORCH_FN(binary_quant_meta));
  m.impl("clamped_binary_quant", TORCH_FN(clamped_binary_quant_meta));
  m.impl("_binary_quant_backward", TORCH_FN(binary_quant_backward_meta));
  m.impl("_clamped_binary_quant_backward", TORCH_FN(clamped_binary_quant_backward_meta));
}

}  // namespace brevitas_cpp::meta
