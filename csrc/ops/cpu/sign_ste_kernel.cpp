#include "ops/common/checks.h"
#include "ops/common/quant_math.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/kernels.h"
#include "ops/sign_ste.h"

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

namespace {

template <typename V>
using value_t = typename std::decay_t<V>::value_type;

}  // namespace

at::Tensor binary_sign_ste_cpu(const at::Tensor& x) {
  check_floating(x, "binary_sign_ste", "x");
  return unary_kernel(x, "binary_sign_ste", [](const auto& v) {
    using T = value_t<decltype(v)>;
    return vec_math::keep_nan<T>(vec_math::binary_sign<T>(v), v);
  });
}

at::Tensor ternary_sign_ste_cpu(const at::Tensor& x) {
  check_floating(x, "ternary_sign_ste", "x");
  return unary_kernel(x, "ternary_sign_ste", [](const auto& v) {
    using T = value_t<decltype(v)>;
    return vec_math::keep_nan<T>(vec_math::sign<T>(v), v);
  });
}

at::Tensor abs_binary_sign_grad_cpu(const at::Tensor& x) {
  check_floating(x, "abs_binary_sign_grad", "x");
  return unary_kernel(x, "abs_binary_sign_grad", [](const auto& v) { return v.abs(); });
}

at::Tensor abs_binary_sign_grad_backward_cpu(const at::Tensor& grad, const at::Tensor& x) {
  ops::detail::check_abs_binary_sign_grad_backward_args(grad, x);
  // x gives the layout: the gradient of x has x's strides.
  return binary_kernel(x, grad, "_abs_binary_sign_grad_backward", [](const auto& xv, const auto& g) {
    using T = value_t<decltype(xv)>;
    return g * vec_math::keep_nan<T>(vec_math::binary_sign<T>(xv), xv);
  });
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
