#include "ops/meta/unary_meta.h"
#include "ops/sign_ste.h"

#include <torch/library.h>

namespace brevitas_cpp::meta {
namespace {

constexpr char kBinary[] = "binary_sign_ste";
constexpr char kTernary[] = "ternary_sign_ste";
constexpr char kAbs[] = "abs_binary_sign_grad";

at::Tensor abs_binary_sign_grad_backward_meta(const at::Tensor& grad, const at::Tensor& x) {
  ops::detail::check_abs_binary_sign_grad_backward_args(grad, x);
  return empty_output_like(x);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("binary_sign_ste", TORCH_FN(unary_meta<kBinary>));
  m.impl("ternary_sign_ste", TORCH_FN(unary_meta<kTernary>));
  m.impl("abs_binary_sign_grad", TORCH_FN(unary_meta<kAbs>));
  m.impl("_abs_binary_sign_grad_backward", TORCH_FN(abs_binary_sign_grad_backward_meta));
}

}  // namespace brevitas_cpp::meta
