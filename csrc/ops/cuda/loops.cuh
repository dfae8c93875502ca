// Loop drivers of the CUDA kernels: an elementwise map over dense memory and a
// deterministic reduction of per-element gradient terms to the K entries of a ParamLayout.
//
// A map functor has
//   struct State; State state() const;            // per thread, once (e.g. the integer range)
//   struct Loaded; Loaded load(int64_t idx) const;  // what element idx (flat memory index) needs
//   void store(int64_t idx, const Loaded&, const State&) const;
// A reduce functor has
//   struct State; State state(int64_t k) const;   // per thread, once: parameter entry k's values
//   struct Loaded; Loaded load(int64_t idx) const;
//   void apply(int64_t idx, const Loaded&, const State&, double* acc) const;  // adds kTerms terms
// The drivers issue the loads of several elements before any store, so each thread keeps
// several memory requests in flight (the kernels are memory bound).
#pragma once

#include "ops/common/param_layout.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace brevitas_cpp::cuda {

constexpr int kBlock = 256;  // threads per block
constexpr int kUnroll = 4;   // elements per thread per step

struct NoState {};

// Where element idx finds its parameters: entry (idx / inner) % K (see ParamLayout).
struct ParamIndex {
  int64_t K = 1;
  int64_t inner = 1;
  explicit ParamIndex(const ParamLayout& L) : K(L.K), inner(L.inner) {}
  __device__ __forceinline__ int64_t operator()(int64_t idx) const { return K == 1 ? 0 : (idx / inner) % K; }
};

template <typename T>
__device__ __forceinline__ T quiet_nan() {
  return static_cast<T>(std::numeric_limits<float>::quiet_NaN());
}

template <typename Fn>
__global__ void __launch_bounds__(kBlock) map_kernel(int64_t n, Fn fn) {
  using Loaded = typename Fn::Loaded;
  const auto state = fn.state();
  const int64_t step = static_cast<int64_t>(gridDim.x) * kBlock * kUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kBlock * kUnroll + threadIdx.x; base < n; base += step) {
    Loaded v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t idx = base + u * kBlock;
      if (idx < n) v[u] = fn.load(idx);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t idx = base + u * kBlock;
      if (idx < n) fn.store(idx, v[u], state);
    }
  }
}

// Runs fn over [0, n) on the current stream.
template <typename Fn>
void launch_map(int64_t n, const Fn& fn) {
  if (n == 0) return;
  constexpr int64_t per_block = int64_t(kBlock) * kUnroll;
  const int64_t blocks = std::min<int64_t>((n + per_block - 1) / per_block, int64_t(1) << 20);
  map_kernel<Fn><<<static_cast<unsigned>(blocks), kBlock, 0, c10::cuda::getCurrentCUDAStream()>>>(n, fn);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Block (k, c) adds the terms of chunk c of the elements of parameter entry k and writes
// its kTerms sums to partial[(t * K + k) * chunks + c]. The chunks and the summation tree
// depend on the sizes only: every run gives the same bits (no atomics).
template <int kTerms, typename Fn>
__global__ void __launch_bounds__(kBlock) reduce_by_param_kernel(Fn fn, int64_t outer, int64_t K, int64_t inner,
                                                                 int64_t chunks, int64_t chunk_len, double* partial) {
  using Loaded = typename Fn::Loaded;
  const int64_t k = blockIdx.x / chunks;
  const int64_t c = blockIdx.x - k * chunks;
  const int64_t m = outer * inner;
  const int64_t begin = c * chunk_len;
  const int64_t end = std::min(m, begin + chunk_len);
  const auto state = fn.state(k);
  // Flat memory index of the j-th element of entry k: (o * K + k) * inner + i.
  auto index_of = [&](int64_t j) -> int64_t {
    if (outer == 1) return k * inner + j;
    const int64_t o = j / inner;
    return (o * K + k) * inner + (j - o * inner);
  };
  double acc[kTerms];
#pragma unroll
  for (int t = 0; t < kTerms; ++t) acc[t] = 0.0;
  for (int64_t base = begin + threadIdx.x; base < end; base += int64_t(kBlock) * kUnroll) {
    Loaded v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = base + u * kBlock;
      if (j < end) v[u] = fn.load(index_of(j));
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = base + u * kBlock;
      if (j < end) fn.apply(index_of(j), v[u], state, acc);
    }
  }
  __shared__ double shared[kTerms][kBlock];
#pragma unroll
  for (int t = 0; t < kTerms; ++t) shared[t][threadIdx.x] = acc[t];
  __syncthreads();
  for (int half = kBlock / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
#pragma unroll
      for (int t = 0; t < kTerms; ++t) shared[t][threadIdx.x] += shared[t][threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
#pragma unroll
    for (int t = 0; t < kTerms; ++t) partial[(t * K + k) * chunks + c] = shared[t][0];
  }
}

// The per-chunk sums of a reduction: partial[(t * K + k) * chunks + c], doubles.
struct Partials {
  at::Tensor partial;
  int64_t K = 1;
  int64_t chunks = 1;
  // Term t of entry k: the sum over the chunks, in chunk order.
  __device__ __forceinline__ static double sum(const double* partial, int64_t K, int64_t chunks, int t, int64_t k) {
    const double* p = partial + (t * K + k) * chunks;
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s += p[c];
    return s;
  }
};

// Runs fn.apply on every element (which may also write a gradient of x) and returns the
// per-chunk sums of its kTerms terms; `numel` is the dense tensor's (0: nothing runs, sums 0).
template <int kTerms, typename Fn>
Partials reduce_by_param(const ParamLayout& L, int64_t numel, const Fn& fn, const at::TensorOptions& device_options) {
  const int64_t m = numel == 0 ? 0 : L.outer * L.inner;
  // About 2048 blocks in all, at least 4096 elements each, whatever K is.
  constexpr int64_t kTargetBlocks = 2048, kMinChunk = 4096;
  const int64_t by_blocks = std::max<int64_t>(1, kTargetBlocks / L.K);
  const int64_t by_size = std::max<int64_t>(1, (m + kMinChunk - 1) / kMinChunk);
  Partials out;
  out.K = L.K;
  out.chunks = std::min(by_blocks, by_size);
  const int64_t chunk_len = (m + out.chunks - 1) / out.chunks;
  out.partial = at::empty({kTerms * L.K * out.chunks}, device_options.dtype(at::kDouble));
  if (m == 0) {
    out.partial.zero_();
    return out;
  }
  reduce_by_param_kernel<kTerms, Fn>
      <<<static_cast<unsigned>(L.K * out.chunks), kBlock, 0, c10::cuda::getCurrentCUDAStream()>>>(
          fn, L.outer, L.K, L.inner, out.chunks, chunk_len, out.partial.mutable_data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// The gradient of `param` from terms row_a and (row_b >= 0) row_b of the sums: each summed
// over the chunks in double, rounded to param's dtype, then added in it (as autograd adds the
// gradients of a parameter's two uses), in param's shape.
at::Tensor param_grad(const Partials& p, const ParamLayout& L, int row_a, int row_b, const at::Tensor& param);

}  // namespace brevitas_cpp::cuda
