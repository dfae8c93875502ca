#include "ops/common/checks.h"
#include "ops/common/rounding.h"
#include "ops/cuda/elementwise.cuh"
#include "ops/sign_ste.h"

#include <torch/library.h>

namespace brevitas_cpp::cuda {

namespace {

template <typename T>
struct BinarySignOp {
  __device__ __forceinline__ T operator()(T x) const { return scalar_math::binary_sign(x); }
};

template <typename T>
struct TernarySignOp {  // torch.sign, NaN kept
  __device__ __forceinline__ T operator()(T x) const { return scalar_math::isnan_of(x) ? x : scalar_math::sign(x); }
};

template <typename T>
struct AbsOp {
  __device__ __forceinline__ T operator()(T x) const { return scalar_math::abs_of(x); }
};

template <typename T>
struct AbsBinarySignGradBackwardOp {  // grad * binary_sign(x)
  __device__ __forceinline__ T operator()(T x, T g) const { return g * scalar_math::binary_sign(x); }
};

at::Tensor binary_sign_ste_cuda(const at::Tensor& x) {
  check_floating(x, "binary_sign_ste", "x");
  return unary_cuda(x, [](auto tag) { return BinarySignOp<decltype(tag)>{}; });
}

at::Tensor ternary_sign_ste_cuda(const at::Tensor& x) {
  check_floating(x, "ternary_sign_ste", "x");
  return unary_cuda(x, [](auto tag) { return TernarySignOp<decltype(tag)>{}; });
}

at::Tensor abs_binary_sign_grad_cuda(const at::Tensor& x) {
  check_floating(x, "abs_binary_sign_grad", "x");
  return unary_cuda(x, [](auto tag) { return AbsOp<decltype(tag)>{}; });
}

at::Tensor abs_binary_sign_grad_backward_cuda(const at::Tensor& grad, const at::Tensor& x) {
  ops::detail::check_abs_binary_sign_grad_backward_args(grad, x);
  // x gives the layout: the gradient of x has x's strides.
  return binary_cuda(x, grad, [](auto tag) { return AbsBinarySignGradBackwardOp<decltype(tag)>{}; });
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CUDA, m) {
  m.impl("binary_sign_ste", TORCH_FN(binary_sign_ste_cuda));
  m.impl("ternary_sign_ste", TORCH_FN(ternary_sign_ste_cuda));
  m.impl("abs_binary_sign_grad", TORCH_FN(abs_binary_sign_grad_cuda));
  m.impl("_abs_binary_sign_grad_backward", TORCH_FN(abs_binary_sign_grad_backward_cuda));
}

}  // namespace brevitas_cpp::cuda
