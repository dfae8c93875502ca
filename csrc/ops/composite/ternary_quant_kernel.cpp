#include "ops/binary_quant.h"
#include "ops/common/checks.h"
#include "ops/composite/compositions.h"
#include "ops/ternary_quant.h"

#include <torch/library.h>

namespace brevitas_cpp::composite {
namespace {

// m = 1 where |x| > threshold * s (a tensor times a Python scalar, as ATen computes it), else 0.
at::Tensor mask(const at::Tensor& x, const at::Tensor& scale, double threshold) {
  return (at::abs(x) > at::mul(scale, threshold)).to(x.scalar_type());
}

// m * sign(x), NaN kept.
at::Tensor masked_sign(const at::Tensor& x, const at::Tensor& scale, double threshold) {
  return at::where(at::isnan(x), x, mask(x, scale, threshold) * at::sign(x));
}

at::Tensor ternary_quant(const at::Tensor& x, const at::Tensor& scale, double threshold) {
  ops::detail::check_threshold(threshold, "ternary_quant");
  ops::detail::check_scaled_quant_args(x, scale, "ternary_quant");
  const at::Tensor y = masked_sign(x, scale, threshold) * scale;
  return as_output_like(nan_where_invalid(y, positive_finite(scale)), x);
}

// dx = (g * s) * m,  ds = g * (m * sign(x)).
std::tuple<at::Tensor, at::Tensor> ternary_quant_backward(const at::Tensor& grad, const at::Tensor& x,
                                                          const at::Tensor& scale, double threshold,
                                                          std::array<bool, 2> output_mask) {
  constexpr const char* op = "_ternary_quant_backward";
  ops::detail::check_threshold(threshold, op);
  ops::detail::check_scaled_quant_backward_args(grad, x, scale, op);
  at::Tensor gx, gs;
  if (output_mask[0]) gx = as_output_like((grad * scale) * mask(x, scale, threshold), x);
  if (output_mask[1]) {
    gs = (grad * masked_sign(x, scale, threshold)).sum_to_size(scale.sizes()).reshape(scale.sizes()).contiguous();
  }
  return {gx, gs};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("ternary_quant", TORCH_FN(ternary_quant));
  m.impl("_ternary_quant_backward", TORCH_FN(ternary_quant_backward));
}

}  // namespace brevitas_cpp::composite
