#include "ops/composite/compositions.h"
#include "ops/int_quant.h"
#include "ops/relu_int_quant.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace brevitas_cpp::composite {
namespace {

// torch.relu, then int_quant (its own kernel on the device: CUDA's, or int_quant's composite).
at::Tensor relu_int_quant(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                          const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                          c10::string_view rounding_mode, bool clamp_ste) {
  ops::detail::check_int_quant_args(x, scale, zero_point, bit_width, rounding_mode, "relu_int_quant");
  return ops::int_quant(at::relu(x), scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
}

// int_quant's gradients at relu(x), then ReLU's backward for x (threshold_backward, as autograd).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> relu_int_quant_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
    const at::Tensor& bit_width, bool is_signed, bool narrow_range, c10::string_view rounding_mode, bool clamp_ste,
    std::array<bool, 4> output_mask) {
  ops::detail::check_relu_int_quant_backward_args(grad, x, scale, zero_point, bit_width, rounding_mode, clamp_ste,
                                                  output_mask);
  const at::Tensor r = at::relu(x);
  auto [gr, gs, gz, gb] = ops::_int_quant_backward(grad, r, std::nullopt, scale, zero_point, bit_width, is_signed,
                                                   narrow_range, rounding_mode, clamp_ste, output_mask);
  at::Tensor gx = gr.defined() ? as_output_like(at::threshold_backward(gr, r, 0), x) : gr;
  return {gx, gs, gz, gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("relu_int_quant", TORCH_FN(relu_int_quant));
  m.impl("_relu_int_quant_backward", TORCH_FN(relu_int_quant_backward));
}

}  // namespace brevitas_cpp::composite
