#include "ops/common/checks.h"
#include "ops/common/rounding.h"
#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/int_bounds.cuh"
#include "ops/int_quant.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace brevitas_cpp::cuda {

namespace {

constexpr const char* kOp = "int_quant";

// round, then Brevitas's tensor_clamp: where(r > hi, hi, r), then where(. < lo, lo, .).
template <typename T>
struct Clamped {
  T value;
  bool above, below;
};
template <RoundingMode M, typename T>
__device__ __forceinline__ Clamped<T> round_and_clamp(T t_plus_z, const IntRange<T>& b) {
  const T r = scalar_math::round_as<M>(t_plus_z);
  const bool above = r > b.hi;
  const T c1 = above ? b.hi : r;
  const bool below = c1 < b.lo;
  return {below ? b.lo : c1, above, below};
}

// A value check the CPU kernel makes before it starts (and raises on): on the GPU it would
// cost a copy to the host, so an invalid scale, zero point or bit width gives NaN instead.
template <typename T>
__device__ __forceinline__ bool valid_params(T s, T z, bool valid_bit_width) {
  return valid_bit_width && scalar_math::is_normal_scale(s) && scalar_math::isfinite_of(z);
}

template <typename T, RoundingMode M>
struct Forward {
  const T* x;
  T* y;
  bool* mask;  // nullptr: no mask wanted
  const T* s;
  const T* z;
  BitWidthRef bw;
  bool is_signed, narrow_range;
  ParamIndex pi;
  using State = IntRange<T>;
  struct Loaded {
    T x, s, z;
  };
  __device__ __forceinline__ State state() const { return bw.range<T>(is_signed, narrow_range); }
  __device__ __forceinline__ Loaded load(int64_t idx) const {
    const int64_t k = pi(idx);
    return {x[idx], s[k], z[k]};
  }
  __device__ __forceinline__ void store(int64_t idx, const Loaded& v, const State& r) const {
    const Clamped<T> q = round_and_clamp<M>(v.x / v.s + v.z, r);
    y[idx] = valid_params(v.s, v.z, r.valid) ? (q.value - v.z) * v.s : quiet_nan<T>();
    if (mask != nullptr) mask[idx] = !(q.above || q.below);
  }
};

std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                                           const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                           c10::string_view rounding_mode, bool with_mask) {
  ops::detail::check_int_quant_args(x, scale, zero_point, bit_width, rounding_mode, kOp);
  const RoundingMode mode = parse_rounding_mode(rounding_mode, kOp);
  check_bit_width_dtype(bit_width, kOp);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = empty_output_like(x);
  at::Tensor mask = with_mask ? empty_output_like(x, at::kBool) : at::Tensor();
  if (x.numel() == 0) return {y, mask};
  const at::Tensor xd = with_layout_of(x, y);
  const ParamLayout L = make_param_layout(y, {scale, zero_point}, x.scalar_type(), /*fold_short_runs=*/false);
  BREVITAS_CPP_DISPATCH_FLOATING_CUDA(x.scalar_type(), "int_quant_cuda", [&] {
    using T = scalar_t;
    dispatch_rounding_mode(mode, [&](auto m) {
      launch_map(x.numel(),
                 Forward<T, decltype(m)::value>{xd.const_data_ptr<T>(), y.mutable_data_ptr<T>(),
                                                with_mask ? mask.mutable_data_ptr<bool>() : nullptr,
                                                L.params[0].const_data_ptr<T>(), L.params[1].const_data_ptr<T>(),
                                                BitWidthRef(bit_width), is_signed, narrow_range, ParamIndex(L)});
    });
  });
  return {y, mask};
}

at::Tensor int_quant_cuda(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                          const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                          c10::string_view rounding_mode, bool /*clamp_ste: backward only*/) {
  return std::get<0>(forward(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, false));
}

std::tuple<at::Tensor, at::Tensor> int_quant_with_mask_cuda(const at::Tensor& x, const at::Tensor& scale,
                                                            const at::Tensor& zero_point, const at::Tensor& bit_width,
                                                            bool is_signed, bool narrow_range,
                                                            c10::string_view rounding_mode) {
  return forward(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, true);
}

// ---- backward: the gradients of the CPU kernel (see csrc/ops/cpu/int_quant_kernel.cpp) ----

// dx from the saved pass mask (or, with clamp_ste, from nothing): no x needed.
template <typename T>
struct GradInput {
  const T* g;
  const bool* mask;  // nullptr: everything passes (clamp_ste)
  T* gx;
  const T* s;
  ParamIndex pi;
  using State = NoState;
  struct Loaded {
    T g, s;
    bool pass;
  };
  __device__ __forceinline__ State state() const { return {}; }
  __device__ __forceinline__ Loaded load(int64_t idx) const {
    // A scale the CPU kernel raises on gives NaN.
    return {g[idx], scalar_math::normal_scale_or_nan(s[pi(idx)]), mask == nullptr || mask[idx]};
  }
  __device__ __forceinline__ void store(int64_t idx, const Loaded& v, const State&) const {
    gx[idx] = v.pass ? (v.g * v.s) / v.s : T(0);
  }
};

// Recomputes the forward from x; writes dx (when gx) and adds the six terms
// [ds from * s | ds from / s | dz from + z | dz from - z | d max_int | d min_int].
// A block works on one parameter entry k: its s, z and 1 / s are the thread's state.
template <typename T, RoundingMode M, bool kClampSte>
struct GradFull {
  const T* g;
  const T* x;
  T* gx;  // nullptr: dx not wanted
  const T* s;
  const T* z;
  BitWidthRef bw;
  bool is_signed, narrow_range;
  struct State {
    IntRange<T> r;
    T s, z, inv_s;
  };
  struct Loaded {
    T g, x;
  };
  __device__ __forceinline__ State state(int64_t k) const {
    // A scale the CPU kernel raises on computes as NaN: x's, the scale's and the zero point's
    // gradients of its entry are NaN.
    const T sk = scalar_math::normal_scale_or_nan(s[k]);
    return {bw.range<T>(is_signed, narrow_range), sk, z[k], static_cast<T>(T(1) / sk)};
  }
  __device__ __forceinline__ Loaded load(int64_t idx) const { return {g[idx], x[idx]}; }
  __device__ __forceinline__ void apply(int64_t idx, const Loaded& v, const State& st, double* acc) const {
    const T t = v.x / st.s;
    const Clamped<T> q = round_and_clamp<M>(t + st.z, st.r);
    const T gs = v.g * st.s;
    const T gt = (kClampSte || !(q.above || q.below)) ? gs : T(0);
    if (gx != nullptr) gx[idx] = gt / st.s;  // x's gradient: the CPU kernel's bits
    acc[0] += static_cast<double>(v.g * (q.value - st.z));
    // (x / s) / s only feeds a sum: for float and double times 1 / s instead of a third
    // division, as on the CPU; float16/bfloat16 keep the division, whose rounding is coarser.
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      acc[1] += static_cast<double>(-gt * (t * st.inv_s));
    } else {
      acc[1] += static_cast<double>(-gt * (t / st.s));
    }
    acc[2] += static_cast<double>(gt);
    acc[3] += static_cast<double>(-gs);
    acc[4] += q.above ? static_cast<double>(gs) : 0.0;
    acc[5] += q.below ? static_cast<double>(gs) : 0.0;
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> int_quant_backward_cuda(
    const at::Tensor& grad, const std::optional<at::Tensor>& x_opt, const std::optional<at::Tensor>& mask_opt,
    const at::Tensor& scale, const at::Tensor& zero_point, const at::Tensor& bit_width, bool is_signed,
    bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, std::array<bool, 4> output_mask) {
  const auto args = ops::detail::check_int_quant_backward_args(grad, x_opt, mask_opt, scale, zero_point, bit_width,
                                                               rounding_mode, clamp_ste, output_mask);
  const at::Tensor& ref = args.ref;
  const bool has_mask = args.has_mask, want_params = args.want_params;
  const RoundingMode mode = args.mode;
  const c10::cuda::CUDAGuard guard(grad.device());

  at::Tensor gx = output_mask[0] ? empty_output_like(ref, grad.scalar_type()) : at::Tensor();
  at::Tensor gs, gz, gb;  // With clamp_ste, bit_width gets no gradient (TensorClampSte).
  if (!output_mask[0] && !want_params) return {gx, gs, gz, gb};
  const int64_t n = grad.numel();
  const at::Tensor layout = gx.defined() ? gx : dense_or_contiguous(ref);
  const at::Tensor gd = with_layout_of(grad, layout);

  if (!want_params && (clamp_ste || has_mask)) {
    if (gx.defined() && n > 0) {
      const ParamLayout L = make_param_layout(gx, {scale}, grad.scalar_type(), /*fold_short_runs=*/false);
      const at::Tensor md = clamp_ste ? at::Tensor() : with_layout_of(*mask_opt, gx);
      BREVITAS_CPP_DISPATCH_FLOATING_CUDA(grad.scalar_type(), "_int_quant_backward_cuda", [&] {
        launch_map(n, GradInput<scalar_t>{
                          gd.const_data_ptr<scalar_t>(), md.defined() ? md.const_data_ptr<bool>() : nullptr,
                          gx.mutable_data_ptr<scalar_t>(), L.params[0].const_data_ptr<scalar_t>(), ParamIndex(L)});
      });
    }
    return {gx, gs, gz, gb};
  }

  const at::Tensor xd = gx.defined() ? with_layout_of(*x_opt, layout) : layout;
  const ParamLayout L = make_param_layout(layout, {scale, zero_point}, grad.scalar_type(), /*fold_short_runs=*/false);
  Partials sums;
  BREVITAS_CPP_DISPATCH_FLOATING_CUDA(grad.scalar_type(), "_int_quant_backward_cuda", [&] {
    using T = scalar_t;
    T* pgx = gx.defined() ? gx.mutable_data_ptr<T>() : nullptr;
    dispatch_rounding_mode(mode, [&](auto m) {
      constexpr RoundingMode M = decltype(m)::value;
      const T* pg = gd.const_data_ptr<T>();
      const T* px = xd.const_data_ptr<T>();
      const T* ps = L.params[0].const_data_ptr<T>();
      const T* pz = L.params[1].const_data_ptr<T>();
      const BitWidthRef bw(bit_width);
      sums = clamp_ste
                 ? reduce_by_param<6>(L, n, GradFull<T, M, true>{pg, px, pgx, ps, pz, bw, is_signed, narrow_range},
                                      grad.options())
                 : reduce_by_param<6>(L, n, GradFull<T, M, false>{pg, px, pgx, ps, pz, bw, is_signed, narrow_range},
                                      grad.options());
    });
  });
  if (output_mask[1]) gs = param_grad(sums, L, 0, 1, scale);
  if (output_mask[2]) gz = param_grad(sums, L, 2, 3, zero_point);
  if (output_mask[3] && !clamp_ste) gb = bit_width_grad(sums, 4, 5, grad.scalar_type(), bit_width, is_signed);
  return {gx, gs, gz, gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CUDA, m) {
  m.impl("int_quant", TORCH_FN(int_quant_cuda));
  m.impl("_int_quant_with_mask", TORCH_FN(int_quant_with_mask_cuda));
  m.impl("_int_quant_backward", TORCH_FN(int_quant_backward_cuda));
}

}  // namespace brevitas_cpp::cuda
