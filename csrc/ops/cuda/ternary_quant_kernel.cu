#include "ops/common/rounding.h"
#include "ops/cuda/scaled_quant.cuh"
#include "ops/ternary_quant.h"

#include <torch/library.h>

namespace brevitas_cpp::cuda {

namespace {

// m = 1 where |x| > threshold * s, else 0;  y = (m * sign(x)) * s (NaN x kept);
// dx = (g * s) * m,  ds = g * (m * sign(x)).
struct TernaryQuantOp {
  double threshold;
  template <typename T>
  __device__ __forceinline__ T threshold_times(T s) const {
    // As ATen multiplies a tensor by a Python scalar: float16/bfloat16 in float, rounded once.
    using A = scalar_math::opmath_t<T>;
    return static_cast<T>(static_cast<A>(s) * static_cast<A>(threshold));
  }
  template <typename T>
  __device__ __forceinline__ T mask(T x, T s) const {
    return scalar_math::abs_of(x) > threshold_times(s) ? T(1) : T(0);
  }
  template <typename T>
  __device__ __forceinline__ T masked_sign(T x, T s) const {
    return scalar_math::isnan_of(x) ? x : mask(x, s) * scalar_math::sign(x);
  }
  template <typename T>
  __device__ __forceinline__ T forward(T x, T s) const {
    return masked_sign(x, s) * s;
  }
  template <typename T>
  __device__ __forceinline__ void backward(T g, T x, T s, T& dx, T& ds) const {
    dx = (g * s) * mask(x, s);
    ds = g * masked_sign(x, s);
  }
};

at::Tensor ternary_quant_cuda(const at::Tensor& x, const at::Tensor& scale, double threshold) {
  ops::detail::check_threshold(threshold, "ternary_quant");
  return scaled_quant_forward_cuda(x, scale, "ternary_quant", TernaryQuantOp{threshold});
}

std::tuple<at::Tensor, at::Tensor> ternary_quant_backward_cuda(const at::Tensor& grad, const at::Tensor& x,
                                                               const at::Tensor& scale, double threshold,
                                                               std::array<bool, 2> output_mask) {
  ops::detail::check_threshold(threshold, "_ternary_quant_backward");
  return scaled_quant_backward_cuda(grad, x, scale, output_mask, "_ternary_quant_backward", TernaryQuantOp{threshold});
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CUDA, m) {
  m.impl("ternary_quant", TORCH_FN(ternary_quant_cuda));
  m.impl("_ternary_quant_backward", TORCH_FN(ternary_quant_backward_cuda));
}

}  // namespace brevitas_cpp::cuda
