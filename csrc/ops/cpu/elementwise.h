// Dense elementwise kernels over at::Tensor: layout handling and dtype dispatch around
// the loop drivers of loops.h.
#pragma once

#include "ops/common/param_layout.h"
#include "ops/cpu/loops.h"

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>

// CPU_CAPABILITY (DEFAULT, AVX2, AVX512) names the instruction set this copy is compiled for.
namespace brevitas_cpp::cpu::CPU_CAPABILITY {

// Calls body.template operator()<scalar_t>() for x's floating dtype.
#define BREVITAS_CPP_DISPATCH_FLOATING(dtype, name, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, name, __VA_ARGS__)

// out = fn(x) elementwise; fn is a generic callable on Vectorized<T>.
template <typename Fn>
at::Tensor unary_kernel(const at::Tensor& x, const char* name, const Fn& fn) {
  at::Tensor out = empty_output_like(x);
  if (x.numel() == 0) return out;
  const at::Tensor xd = with_layout_of(x, out);
  BREVITAS_CPP_DISPATCH_FLOATING(x.scalar_type(), "brevitas_cpp_unary", [&] {
    unary_loop<scalar_t>(xd.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(), x.numel(),
                         [&](const Vec<scalar_t>& v) { return fn(v); });
  });
  return out;
}

// out = fn(a, b) elementwise for two tensors of one shape (a gives the layout).
template <typename Fn>
at::Tensor binary_kernel(const at::Tensor& a, const at::Tensor& b, const char* name, const Fn& fn) {
  at::Tensor out = empty_output_like(a);
  if (a.numel() == 0) return out;
  const at::Tensor ad = with_layout_of(a, out);
  const at::Tensor bd = with_layout_of(b, out);
  BREVITAS_CPP_DISPATCH_FLOATING(a.scalar_type(), "brevitas_cpp_binary", [&] {
    const scalar_t* pa = ad.const_data_ptr<scalar_t>();
    const scalar_t* pb = bd.const_data_ptr<scalar_t>();
    scalar_t* po = out.mutable_data_ptr<scalar_t>();
    constexpr int64_t V = Vec<scalar_t>::size();
    at::parallel_for(0, a.numel(), kGrainSize, [&](int64_t begin, int64_t end) {
      int64_t j = begin;
      for (; j + V <= end; j += V) fn(Vec<scalar_t>::loadu(pa + j), Vec<scalar_t>::loadu(pb + j)).store(po + j);
      if (j < end) {
        const int64_t c = end - j;
        fn(Vec<scalar_t>::loadu(pa + j, c), Vec<scalar_t>::loadu(pb + j, c)).store(po + j, c);
      }
    });
  });
  return out;
}

// y = fn(x, s) for a scale `s` laid out by L (L.params[0]).
template <typename T, typename Fn>
void scaled_forward_loop(const T* px, T* py, const ParamLayout& L, int64_t n, const Fn& fn) {
  const T* ps = L.params[0].const_data_ptr<T>();
  at::parallel_for(0, n, kGrainSize, [&](int64_t begin, int64_t end) {
    for_each_run(L, begin, end, [&](int64_t off, int64_t len, int64_t k, bool strided) {
      for_each_block<T>(len, [&](int64_t j, int64_t c) {
        fn(Vec<T>::loadu(px + off + j, c), load_param(ps, k, j, strided, c)).store(py + off + j, c);
      });
    });
  });
}

// Backward of a scaled op: fn(g, x, s) -> {dx, ds contribution}. Writes dx (when pgx) and
// returns the K-long reduction of the ds contributions (when want_scale).
template <typename T, typename Fn>
std::vector<double> scaled_backward_loop(const T* pg, const T* px, T* pgx, const ParamLayout& L, int64_t n,
                                         bool want_scale, const Fn& fn) {
  const T* ps = L.params[0].const_data_ptr<T>();
  return chunked_reduce(n, L.K, [&](int64_t begin, int64_t end, double* acc) {
    for_each_run(L, begin, end, [&](int64_t off, int64_t len, int64_t k, bool strided) {
      RunSum<T> sum_s(acc + k, strided);
      for_each_block<T>(len, [&](int64_t j, int64_t c) {
        const auto [gx, gs] =
            fn(Vec<T>::loadu(pg + off + j, c), Vec<T>::loadu(px + off + j, c), load_param(ps, k, j, strided, c));
        if (pgx) gx.store(pgx + off + j, c);
        if (want_scale) sum_s.add(j, gs, c);
      });
    });
  });
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
