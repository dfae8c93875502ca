#include "ops/common/param_layout.h"
#include "ops/int_quant.h"
#include "ops/relu_int_quant.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace brevitas_cpp::meta {
namespace {

at::Tensor relu_int_quant_meta(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                               const at::Tensor& bit_width, bool, bool, c10::string_view rounding_mode, bool) {
  ops::detail::check_int_quant_args(x, scale, zero_point, bit_width, rounding_mode, "relu_int_quant");
  return empty_output_like(x);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> relu_int_quant_backward_meta(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
    const at::Tensor& bit_width, bool, bool, c10::string_view rounding_mode, bool clamp_ste,
    std::array<bool, 4> output_mask) {
  ops::detail::check_relu_int_quant_backward_args(grad, x, scale, zero_point, bit_width, rounding_mode, clamp_ste,
                                                  output_mask);
  // Parameter gradients are contiguous tensors of the parameter's shape, as int_quant's.
  auto param_grad = [](const at::Tensor& p) { return at::empty_symint(p.sym_sizes(), p.options()); };
  return {output_mask[0] ? empty_output_like(x, grad.scalar_type()) : at::Tensor(),
          output_mask[1] ? param_grad(scale) : at::Tensor(), output_mask[2] ? param_grad(zero_point) : at::Tensor(),
          output_mask[3] && !clamp_ste ? param_grad(bit_width) : at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("relu_int_quant", TORCH_FN(relu_int_quant_meta));
  m.impl("_relu_int_quant_backward", TORCH_FN(relu_int_quant_backward_meta));
}

}  // namespace brevitas_cpp::meta
