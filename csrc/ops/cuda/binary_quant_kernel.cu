#include "ops/binary_quant.h"
#include "ops/common/rounding.h"
#include "ops/cuda/scaled_quant.cuh"

#include <torch/library.h>

namespace brevitas_cpp::cuda {

namespace {

using scalar_math::binary_sign;

// y = binary_sign(x) * s:  dx = g * s (straight through),  ds = g * binary_sign(x).
struct BinaryQuantOp {
  template <typename T>
  __device__ __forceinline__ T forward(T x, T s) const {
    return binary_sign(x) * s;
  }
  template <typename T>
  __device__ __forceinline__ void backward(T g, T x, T s, T& dx, T& ds) const {
    dx = g * s;
    ds = g * binary_sign(x);
  }
};

// c = tensor_clamp(x, -s, s): where(x > s, s, x), then where(. < -s, -s, .); y = binary_sign(c) * s.
// gs = g * s reaches the clamp: dx = gs where it passes; the bounds s and -s collect gs where
// x was clamped above / below, so ds = g * binary_sign(c) + gs[above] - gs[below].
struct ClampedBinaryQuantOp {
  template <typename T>
  struct Clamped {
    T value;
    bool above, below;
  };
  template <typename T>
  __device__ __forceinline__ static Clamped<T> clamp_to_scale(T x, T s) {
    const bool above = x > s;
    const T c1 = above ? s : x;
    const T neg_s = -s;
    const bool below = c1 < neg_s;
    return {below ? neg_s : c1, above, below};
  }
  template <typename T>
  __device__ __forceinline__ T forward(T x, T s) const {
    return binary_sign(clamp_to_scale(x, s).value) * s;
  }
  template <typename T>
  __device__ __forceinline__ void backward(T g, T x, T s, T& dx, T& ds) const {
    const Clamped<T> c = clamp_to_scale(x, s);
    const T gs = g * s;
    dx = (c.above || c.below) ? T(0) : gs;
    ds = g * binary_sign(c.value) + (c.above ? gs : T(0)) - (c.below ? gs : T(0));
  }
};

at::Tensor binary_quant_cuda(const at::Tensor& x, const at::Tensor& scale) {
  return scaled_quant_forward_cuda(x, scale, "binary_quant", BinaryQuantOp{});
}

std::tuple<at::Tensor, at::Tensor> binary_quant_backward_cuda(const at::Tensor& grad,
                                                              const std::optional<at::Tensor>& x,
                                                              const at::Tensor& scale,
                                                              std::array<bool, 2> output_mask) {
  return scaled_quant_backward_cuda(grad, ops::detail::binary_quant_backward_input(grad, x, output_mask), scale,
                                    output_mask, "_binary_quant_backward", BinaryQuantOp{});
}

at::Tensor clamped_binary_quant_cuda(const at::Tensor& x, const at::Tensor& scale) {
  return scaled_quant_forward_cuda(x, scale, "clamped_binary_quant", ClampedBinaryQuantOp{});
}

std::tuple<at::Tensor, at::Tensor> clamped_binary_quant_backward_cuda(const at::Tensor& grad, const at::Tensor& x,
                                                                      const at::Tensor& scale,
                                                                      std::array<bool, 2> output_mask) {
  return scaled_quant_backward_cuda(grad, x, scale, output_mask, "_clamped_binary_quant_backward",
                                    ClampedBinaryQuantOp{});
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CUDA, m) {
  m.impl("binary_quant", TORCH_FN(binary_quant_cuda));
  m.impl("clamped_binary_quant", TORCH_FN(clamped_binary_quant_cuda));
  m.impl("_binary_quant_backward", TORCH_FN(binary_quant_backward_cuda));
  m.impl("_clamped_binary_quant_backward", TORCH_FN(clamped_binary_quant_backward_cuda));
}

}  // namespace brevitas_cpp::cuda
