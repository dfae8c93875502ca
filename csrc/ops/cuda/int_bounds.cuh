// A quantizer's integer range from a bit width that lives on the GPU, read in the kernels
// (bit_width_value.h) without a copy to the host, and the gradient of that bit width.
#pragma once

#include "ops/common/bit_width_value.h"
#include "ops/cuda/loops.cuh"

#include <ATen/core/Tensor.h>

namespace brevitas_cpp::cuda {

// Where a kernel finds the bit width: its memory and dtype.
struct BitWidthRef {
  const void* ptr;
  c10::ScalarType dtype;
  explicit BitWidthRef(const at::Tensor& bit_width) : ptr(bit_width.const_data_ptr()), dtype(bit_width.scalar_type()) {}
  template <typename T>
  __device__ __forceinline__ IntRange<T> range(bool is_signed, bool narrow_range) const {
    return int_range_of<T>(ptr, dtype, is_signed, narrow_range);
  }
};

// The gradient of bit_width (its shape and dtype): terms row_hi and row_lo of the sums (x's
// gradient where the clamp hit max_int / min_int), summed over every entry and chunk in a
// fixed order, each rounded through grad_dtype, times d max_int / d bit width and
// d min_int / d bit width.
at::Tensor bit_width_grad(const Partials& p, int row_hi, int row_lo, at::ScalarType grad_dtype,
                          const at::Tensor& bit_width, bool is_signed);

}  // namespace brevitas_cpp::cuda
