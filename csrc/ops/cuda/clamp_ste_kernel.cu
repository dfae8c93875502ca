#include "ops/clamp_ste.h"
#include "ops/common/checks.h"
#include "ops/common/rounding.h"
#include "ops/cuda/elementwise.cuh"

#include <torch/library.h>

#include <optional>

namespace brevitas_cpp::cuda {

namespace {

// Brevitas's tensor_clamp: where(x > max, max, x), then where(. < min, min, .).
template <typename T>
struct TensorClamp {
  const T* x;
  T* y;
  const T* lo;
  const T* hi;
  ParamIndex pi;
  using State = NoState;
  struct Loaded {
    T x, lo, hi;
  };
  __device__ __forceinline__ State state() const { return {}; }
  __device__ __forceinline__ Loaded load(int64_t idx) const {
    const int64_t k = pi(idx);
    return {x[idx], lo[k], hi[k]};
  }
  __device__ __forceinline__ void store(int64_t idx, const Loaded& v, const State&) const {
    const T c = v.x > v.hi ? v.hi : v.x;
    y[idx] = c < v.lo ? v.lo : c;
  }
};

at::Tensor tensor_clamp_ste_cuda(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val) {
  ops::detail::check_tensor_clamp_ste_args(x, min_val, max_val);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor out = empty_output_like(x);
  if (x.numel() == 0) return out;
  const at::Tensor xd = with_layout_of(x, out);
  // Bounds are cast to x's dtype first, as Brevitas's max_val.type_as(x).
  const ParamLayout L = make_param_layout(out, {min_val, max_val}, x.scalar_type(), /*fold_short_runs=*/false);
  BREVITAS_CPP_DISPATCH_FLOATING_CUDA(x.scalar_type(), "tensor_clamp_ste_cuda", [&] {
    launch_map(x.numel(), TensorClamp<scalar_t>{xd.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(),
                                                L.params[0].const_data_ptr<scalar_t>(),
                                                L.params[1].const_data_ptr<scalar_t>(), ParamIndex(L)});
  });
  return out;
}

// torch.clamp semantics: bounds converted to x's dtype (on the host, as the CPU kernel
// does), NaN propagates; the lower bound is applied first.
template <typename T>
struct ScalarClampOp {
  T lo, hi;
  bool has_hi;
  __device__ __forceinline__ T operator()(T x) const {
    const T c = x < lo ? lo : x;
    return (has_hi && c > hi) ? hi : c;
  }
};

at::Tensor clamp_kernel(const at::Tensor& x, double min_val, std::optional<double> max_val, const char* name) {
  ops::detail::check_scalar_clamp_args(x, min_val, max_val, name);
  return unary_cuda(x, [&](auto tag) {
    using T = decltype(tag);
    return ScalarClampOp<T>{static_cast<T>(min_val), static_cast<T>(max_val.value_or(0.0)), max_val.has_value()};
  });
}

at::Tensor scalar_clamp_ste_cuda(const at::Tensor& x, double min_val, double max_val) {
  return clamp_kernel(x, min_val, max_val, "scalar_clamp_ste");
}

at::Tensor scalar_clamp_min_ste_cuda(const at::Tensor& x, double min_val) {
  return clamp_kernel(x, min_val, std::nullopt, "scalar_clamp_min_ste");
}

// sign(x) * clamp_min(|x|, lo) with sign(-0.0) = +1: |x| clamped up for x >= 0, x clamped
// down to -lo otherwise (NaN stays NaN).
template <typename T>
struct SignedClampMinOp {
  T lo, neg_lo;
  __device__ __forceinline__ T operator()(T x) const {
    if (x >= T(0)) {
      const T a = scalar_math::abs_of(x);
      return a < lo ? lo : a;
    }
    return x > neg_lo ? neg_lo : x;
  }
};

at::Tensor scalar_signed_clamp_min_ste_cuda(const at::Tensor& x, double min_val) {
  ops::detail::check_scalar_signed_clamp_min_args(x, min_val);
  return unary_cuda(x, [&](auto tag) {
    using T = decltype(tag);
    const T lo = static_cast<T>(min_val);
    return SignedClampMinOp<T>{lo, -lo};
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CUDA, m) {
  m.impl("tensor_clamp_ste", TORCH_FN(tensor_clamp_ste_cuda));
  m.impl("scalar_clamp_ste", TORCH_FN(scalar_clamp_ste_cuda));
  m.impl("scalar_clamp_min_ste", TORCH_FN(scalar_clamp_min_ste_cuda));
  m.impl("scalar_signed_clamp_min_ste", TORCH_FN(scalar_signed_clamp_min_ste_cuda));
}

}  // namespace brevitas_cpp::cuda
