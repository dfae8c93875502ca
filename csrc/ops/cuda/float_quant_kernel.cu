// float_quant on CUDA: the scaled-op drivers (scaled_quant.cuh) with the shared scalar
// arithmetic of common/rounding.h.
#include "ops/common/rounding.h"
#include "ops/cuda/scaled_quant.cuh"
#include "ops/float_quant.h"

#include <torch/library.h>

namespace brevitas_cpp::cuda {

namespace {

// A scale the CPU kernels raise on (not normal, positive and finite) computes as NaN, so every
// output is NaN: normal_scale_or_nan.
struct FloatQuantOp {
  MinifloatFormat f;
  template <typename T>
  __device__ __forceinline__ T forward(T x, T s) const {
    return scalar_math::float_quant_element<T>(x, scalar_math::normal_scale_or_nan(s), f).y;
  }
  template <typename T>
  __device__ __forceinline__ void backward(T g, T x, T s, T& dx, T& ds) const {
    using A = scalar_math::opmath_t<T>;
    const auto e = scalar_math::float_quant_element<T>(x, scalar_math::normal_scale_or_nan(s), f);
    const A through = e.passed ? e.slope : A(0);
    dx = static_cast<T>(static_cast<A>(g) * through);
    ds = static_cast<T>(static_cast<A>(g) * (static_cast<A>(e.q) - through * static_cast<A>(e.u)));
  }
};

at::Tensor float_quant_cuda(const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
                            int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed,
                            bool saturating, bool inf_values, bool nan_values, c10::string_view rounding_mode) {
  const MinifloatFormat f =
      ops::detail::check_float_quant_args(x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value,
                                          is_signed, saturating, inf_values, nan_values, rounding_mode, "float_quant");
  return scaled_quant_forward_cuda(x, scale, "float_quant", FloatQuantOp{f});
}

std::tuple<at::Tensor, at::Tensor> float_quant_backward_cuda(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
    int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed, bool saturating,
    bool inf_values, bool nan_values, c10::string_view rounding_mode, std::array<bool, 2> output_mask) {
  const MinifloatFormat f = ops::detail::check_float_quant_args(
      x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value, is_signed, saturating, inf_values,
      nan_values, rounding_mode, "_float_quant_backward");
  return scaled_quant_backward_cuda(grad, x, scale, output_mask, "_float_quant_backward", FloatQuantOp{f});
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CUDA, m) {
  m.impl("float_quant", TORCH_FN(float_quant_cuda));
  m.impl("_float_quant_backward", TORCH_FN(float_quant_backward_cuda));
}

}  // namespace brevitas_cpp::cuda
