#include "ops/binary_quant.h"
#include "ops/common/checks.h"
#include "ops/composite/compositions.h"

#include <torch/library.h>

namespace brevitas_cpp::composite {
namespace {

// tensor_clamp(x, -s, s): where(x > s, s, x), then where(. < -s, -s, .).
struct ClampedToScale {
  at::Tensor value, above, below;
};
ClampedToScale clamp_to_scale(const at::Tensor& x, const at::Tensor& s) {
  const at::Tensor above = x > s;
  const at::Tensor c1 = at::where(above, s, x);
  const at::Tensor below = c1 < -s;
  return {at::where(below, -s, c1), above, below};
}

at::Tensor binary_quant(const at::Tensor& x, const at::Tensor& scale) {
  ops::detail::check_scaled_quant_args(x, scale, "binary_quant");
  return as_output_like(nan_where_invalid(binary_sign(x) * scale, positive_finite(scale)), x);
}

at::Tensor clamped_binary_quant(const at::Tensor& x, const at::Tensor& scale) {
  ops::detail::check_scaled_quant_args(x, scale, "clamped_binary_quant");
  const at::Tensor y = binary_sign(clamp_to_scale(x, scale).value) * scale;
  return as_output_like(nan_where_invalid(y, positive_finite(scale)), x);
}

at::Tensor reduced_to(const at::Tensor& t, const at::Tensor& param) {
  return t.sum_to_size(param.sizes()).reshape(param.sizes()).contiguous();
}

// dx = g * s (straight through), ds = g * binary_sign(x).
std::tuple<at::Tensor, at::Tensor> binary_quant_backward(const at::Tensor& grad, const std::optional<at::Tensor>& x,
                                                         const at::Tensor& scale, std::array<bool, 2> output_mask) {
  const at::Tensor& xr = ops::detail::binary_quant_backward_input(grad, x, output_mask);
  ops::detail::check_scaled_quant_backward_args(grad, xr, scale, "_binary_quant_backward");
  at::Tensor gx, gs;
  if (output_mask[0]) gx = as_output_like(grad * scale, xr);
  if (output_mask[1]) gs = reduced_to(grad * binary_sign(*x), scale);
  return {gx, gs};
}

// gs = g * s reaches the clamp: dx = gs where it passes; ds = g * binary_sign(c) + gs[above] - gs[below].
std::tuple<at::Tensor, at::Tensor> clamped_binary_quant_backward(const at::Tensor& grad, const at::Tensor& x,
                                                                 const at::Tensor& scale,
                                                                 std::array<bool, 2> output_mask) {
  ops::detail::check_scaled_quant_backward_args(grad, x, scale, "_clamped_binary_quant_backward");
  const ClampedToScale c = clamp_to_scale(x, scale);
  const at::Tensor g_s = grad * scale;
  const at::Tensor zero = at::zeros({}, grad.options());
  at::Tensor gx, gs;
  if (output_mask[0]) gx = as_output_like(at::where(at::logical_or(c.above, c.below), zero, g_s), x);
  if (output_mask[1]) {
    gs = reduced_to(grad * binary_sign(c.value) + at::where(c.above, g_s, zero) - at::where(c.below, g_s, zero), scale);
  }
  return {gx, gs};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("binary_quant", TORCH_FN(binary_quant));
  m.impl("clamped_binary_quant", TORCH_FN(clamped_binary_quant));
  m.impl("_binary_quant_backward", TORCH_FN(binary_quant_backward));
  m.impl("_clamped_binary_quant_backward", TORCH_FN(clamped_binary_quant_backward));
}

}  // namespace brevitas_cpp::composite
