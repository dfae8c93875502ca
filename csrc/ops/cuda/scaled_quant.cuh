// Drivers for ops that quantize x with one broadcast scale (binary, clamped binary,
// ternary) on CUDA: argument checks, layout, dtype dispatch and the scale-gradient reduction.
// An Op is a struct with
//   template <typename T> __device__ T forward(T x, T s) const;
//   template <typename T> __device__ void backward(T g, T x, T s, T& dx, T& ds) const;
#pragma once

#include "ops/binary_quant.h"
#include "ops/common/checks.h"
#include "ops/common/rounding.h"
#include "ops/cuda/elementwise.cuh"

#include <ATen/ATen.h>

namespace brevitas_cpp::cuda {

template <typename T, typename Op>
struct ScaledForward {
  const T* x;
  T* y;
  const T* s;
  ParamIndex pi;
  Op op;
  using State = NoState;
  struct Loaded {
    T x, s;
  };
  __device__ __forceinline__ State state() const { return {}; }
  __device__ __forceinline__ Loaded load(int64_t idx) const { return {x[idx], s[pi(idx)]}; }
  __device__ __forceinline__ void store(int64_t idx, const Loaded& v, const State&) const {
    // The CPU kernel raises on a scale that is not positive and finite; here it gives NaN.
    const bool valid = v.s > T(0) && scalar_math::isfinite_of(v.s);
    y[idx] = valid ? op.template forward<T>(v.x, v.s) : quiet_nan<T>();
  }
};

template <typename T, typename Op>
struct ScaledBackward {
  const T* g;
  const T* x;
  T* gx;  // nullptr: dx not wanted
  const T* s;
  Op op;
  struct State {
    T s;  // a block works on one parameter entry
  };
  struct Loaded {
    T g, x;
  };
  __device__ __forceinline__ State state(int64_t k) const { return {s[k]}; }
  __device__ __forceinline__ Loaded load(int64_t idx) const { return {g[idx], x[idx]}; }
  __device__ __forceinline__ void apply(int64_t idx, const Loaded& v, const State& st, double* acc) const {
    T dx, ds;
    op.template backward<T>(v.g, v.x, st.s, dx, ds);
    if (gx != nullptr) gx[idx] = dx;
    acc[0] += static_cast<double>(ds);
  }
};

template <typename Op>
at::Tensor scaled_quant_forward_cuda(const at::Tensor& x, const at::Tensor& scale, const char* op_name, Op op) {
  ops::detail::check_scaled_quant_args(x, scale, op_name);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = empty_output_like(x);
  if (x.numel() == 0) return y;
  const at::Tensor xd = with_layout_of(x, y);
  const ParamLayout L = make_param_layout(y, {scale}, x.scalar_type(), /*fold_short_runs=*/false);
  BREVITAS_CPP_DISPATCH_FLOATING_CUDA(x.scalar_type(), "scaled_quant_forward_cuda", [&] {
    launch_map(x.numel(), ScaledForward<scalar_t, Op>{xd.const_data_ptr<scalar_t>(), y.mutable_data_ptr<scalar_t>(),
                                                      L.params[0].const_data_ptr<scalar_t>(), ParamIndex(L), op});
  });
  return y;
}

// Returns (dx, ds) as output_mask selects.
template <typename Op>
std::tuple<at::Tensor, at::Tensor> scaled_quant_backward_cuda(const at::Tensor& grad, const at::Tensor& x,
                                                              const at::Tensor& scale, std::array<bool, 2> output_mask,
                                                              const char* op_name, Op op) {
  ops::detail::check_scaled_quant_backward_args(grad, x, scale, op_name);
  check_same_device(x, {{&grad, "grad"}}, op_name);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor gx = output_mask[0] ? empty_output_like(x) : at::Tensor();
  at::Tensor gs;
  if (!output_mask[0] && !output_mask[1]) return {gx, gs};
  const at::Tensor layout = gx.defined() ? gx : dense_or_contiguous(x);
  const ParamLayout L = make_param_layout(layout, {scale}, x.scalar_type(), /*fold_short_runs=*/false);
  const at::Tensor gd = with_layout_of(grad, layout);
  const at::Tensor xd = gx.defined() ? with_layout_of(x, layout) : layout;  // layout is x made dense
  Partials sums;
  BREVITAS_CPP_DISPATCH_FLOATING_CUDA(x.scalar_type(), "scaled_quant_backward_cuda", [&] {
    using T = scalar_t;
    sums = reduce_by_param<1>(
        L, x.numel(),
        ScaledBackward<T, Op>{gd.const_data_ptr<T>(), xd.const_data_ptr<T>(),
                              gx.defined() ? gx.mutable_data_ptr<T>() : nullptr, L.params[0].const_data_ptr<T>(), op},
        x.options());
  });
  if (output_mask[1]) gs = param_grad(sums, L, 0, -1, scale);
  return {gx, gs};
}

}  // namespace brevitas_cpp::cuda
