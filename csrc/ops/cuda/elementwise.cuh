// Dense elementwise CUDA kernels over at::Tensor: output layout, device guard and dtype
// dispatch around launch_map (loops.cuh). Ops are structs with a __device__ operator().
#pragma once

#include "ops/common/param_layout.h"
#include "ops/cuda/loops.cuh"

#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAGuard.h>

namespace brevitas_cpp::cuda {

#define BREVITAS_CPP_DISPATCH_FLOATING_CUDA(dtype, name, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, name, __VA_ARGS__)

template <typename T, typename Op>
struct UnaryMap {
  const T* x;
  T* y;
  Op op;
  using State = NoState;
  struct Loaded {
    T x;
  };
  __device__ __forceinline__ State state() const { return {}; }
  __device__ __forceinline__ Loaded load(int64_t idx) const { return {x[idx]}; }
  __device__ __forceinline__ void store(int64_t idx, const Loaded& v, const State&) const { y[idx] = op(v.x); }
};

template <typename T, typename Op>
struct BinaryMap {
  const T* a;
  const T* b;
  T* y;
  Op op;
  using State = NoState;
  struct Loaded {
    T a, b;
  };
  __device__ __forceinline__ State state() const { return {}; }
  __device__ __forceinline__ Loaded load(int64_t idx) const { return {a[idx], b[idx]}; }
  __device__ __forceinline__ void store(int64_t idx, const Loaded& v, const State&) const { y[idx] = op(v.a, v.b); }
};

// out = op(x) elementwise, out laid out like x; make_op(T{}) gives the op for dtype T.
template <typename MakeOp>
at::Tensor unary_cuda(const at::Tensor& x, const MakeOp& make_op) {
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = empty_output_like(x);
  if (x.numel() == 0) return out;
  const at::Tensor xd = with_layout_of(x, out);
  BREVITAS_CPP_DISPATCH_FLOATING_CUDA(x.scalar_type(), "brevitas_cpp_unary_cuda", [&] {
    const auto op = make_op(scalar_t{});
    launch_map(x.numel(), UnaryMap<scalar_t, std::decay_t<decltype(op)>>{xd.const_data_ptr<scalar_t>(),
                                                                         out.mutable_data_ptr<scalar_t>(), op});
  });
  return out;
}

// out = op(a, b) elementwise for two tensors of one shape (a gives the layout).
template <typename MakeOp>
at::Tensor binary_cuda(const at::Tensor& a, const at::Tensor& b, const MakeOp& make_op) {
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor out = empty_output_like(a);
  if (a.numel() == 0) return out;
  const at::Tensor ad = with_layout_of(a, out);
  const at::Tensor bd = with_layout_of(b, out);
  BREVITAS_CPP_DISPATCH_FLOATING_CUDA(a.scalar_type(), "brevitas_cpp_binary_cuda", [&] {
    const auto op = make_op(scalar_t{});
    launch_map(a.numel(),
               BinaryMap<scalar_t, std::decay_t<decltype(op)>>{
                   ad.const_data_ptr<scalar_t>(), bd.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), op});
  });
  return out;
}

}  // namespace brevitas_cpp::cuda
