#pragma once

#include <ATen/core/Tensor.h>

namespace brevitas_cpp::ops {

// +1 for x >= 0, -1 otherwise; gradient passes unchanged.
at::Tensor binary_sign_ste(const at::Tensor& x);
// sign(x) with sign(0) = 0; gradient passes unchanged.
at::Tensor ternary_sign_ste(const at::Tensor& x);
// Forward |x|; backward grad * binary_sign(x) (so +1 at 0).
at::Tensor abs_binary_sign_grad(const at::Tensor& x);
// The backward of abs_binary_sign_grad.
at::Tensor _abs_binary_sign_grad_backward(const at::Tensor& grad, const at::Tensor& x);

namespace detail {
// Argument checks shared by the CPU and Meta kernels.
void check_abs_binary_sign_grad_backward_args(const at::Tensor& grad, const at::Tensor& x);
}  // namespace detail

}  // namespace brevitas_cpp::ops
