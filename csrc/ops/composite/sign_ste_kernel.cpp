#include "ops/common/checks.h"
#include "ops/composite/compositions.h"
#include "ops/sign_ste.h"

#include <torch/library.h>

namespace brevitas_cpp::composite {
namespace {

at::Tensor binary_sign_ste(const at::Tensor& x) {
  check_floating(x, "binary_sign_ste", "x");
  return as_output_like(binary_sign(x), x);
}

at::Tensor ternary_sign_ste(const at::Tensor& x) {
  check_floating(x, "ternary_sign_ste", "x");
  return as_output_like(sign_keep_nan(x), x);
}

at::Tensor abs_binary_sign_grad(const at::Tensor& x) {
  check_floating(x, "abs_binary_sign_grad", "x");
  return as_output_like(at::abs(x), x);
}

at::Tensor abs_binary_sign_grad_backward(const at::Tensor& grad, const at::Tensor& x) {
  ops::detail::check_abs_binary_sign_grad_backward_args(grad, x);
  return as_output_like(grad * binary_sign(x), x);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("binary_sign_ste", TORCH_FN(binary_sign_ste));
  m.impl("ternary_sign_ste", TORCH_FN(ternary_sign_ste));
  m.impl("abs_binary_sign_grad", TORCH_FN(abs_binary_sign_grad));
  m.impl("_abs_binary_sign_grad_backward", TORCH_FN(abs_binary_sign_grad_backward));
}

}  // namespace brevitas_cpp::composite
