// How per-tensor / per-channel / per-group parameters (scale, zero point, clamp bounds)
// line up with the memory of a dense tensor.
//
// The dense tensor is walked in memory order. The dimensions along which any parameter
// varies span one contiguous block of that order, so every element's flat memory index
// is (o * K + k) * inner + i and its parameters are the k-th entries of K-long vectors.
// Gradients of the parameters are reduced into K-long accumulators inside the kernels,
// then folded to each parameter's own shape (a K-sized tensor, never a full-size one).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <vector>

namespace brevitas_cpp {

struct ParamLayout {
  int64_t outer = 1;
  int64_t K = 1;
  int64_t inner = 1;
  // Each parameter's K values, contiguous, in the order given and in `dtype`: an alias of the
  // parameter's own memory when it already holds them that way (per tensor, per channel of a
  // dense x), else a copy. Kernels read them through const_data_ptr only.
  std::vector<at::Tensor> params;

  // Folds K accumulated doubles (a gradient laid out like params) back to `param`'s shape
  // and dtype, as a new contiguous tensor.
  at::Tensor fold_to(const double* acc_k, const at::Tensor& param) const;
  // fold_to(acc_a) + fold_to(acc_b), added in param's dtype (two uses of one parameter).
  at::Tensor fold_sum_to(const double* acc_a, const double* acc_b, const at::Tensor& param) const;
  // The same from K doubles held in a tensor on any device (the GPU kernels' accumulators).
  at::Tensor fold_tensor_to(const at::Tensor& acc_k, const at::Tensor& param) const;

  // Original-dimension indices of the K block, in memory order, and their sizes.
  std::vector<int64_t> span_dims;
  std::vector<int64_t> span_sizes;
  int64_t ndim = 0;
};

// `dense` must be non-overlapping and dense; params must broadcast to its shape.
// fold_short_runs: runs of one parameter value shorter than a CPU vector are folded into
// the span (K grows, inner becomes 1); the GPU kernels keep the runs as they are.
ParamLayout make_param_layout(const at::Tensor& dense, c10::ArrayRef<at::Tensor> params, at::ScalarType dtype,
                              bool fold_short_runs = true);

// An empty tensor laid out like x (x's strides when x is dense, else x's suggested memory
// format): the output layout of every elementwise op, shared by CPU and Meta kernels.
at::Tensor empty_output_like(const at::Tensor& x, at::ScalarType dtype);
inline at::Tensor empty_output_like(const at::Tensor& x) {
  return empty_output_like(x, x.scalar_type());
}

// A 0-dim CPU tensor of `dtype` holding 0, over static read-only memory: no allocation and no
// dispatcher call (the zero point of the abs-max weight quantizer, read on every step).
at::Tensor cpu_zero_scalar(at::ScalarType dtype);

// `t` itself when it is non-overlapping and dense, else a contiguous copy: a tensor that
// can be walked by flat memory index.
at::Tensor dense_or_contiguous(const at::Tensor& t);

// `t` with exactly the strides of `like` (same sizes): t itself when they already match,
// else a copy. Lets kernels walk several tensors with one flat memory index.
at::Tensor with_layout_of(const at::Tensor& t, const at::Tensor& like);

}  // namespace brevitas_cpp
