// The loops of int_quant's CPU kernels, shared by int_quant and relu_int_quant (whose input is
// relu(x), computed as x is read). Compiled once per instruction set, as every CPU kernel.
#pragma once

#include "ops/common/bit_width_value.h"
#include "ops/common/checks.h"
#include "ops/common/quant_math.h"
#include "ops/cpu/elementwise.h"
#include "ops/int_quant.h"

#include <ATen/ATen.h>

#include <array>
#include <tuple>
#include <vector>

namespace brevitas_cpp::cpu::CPU_CAPABILITY::int_quant_loops {

// The composition computes max_int/min_int in bit_width's dtype and casts them to x's
// (max_int(...).type_as(x)): int_range_of rounds the exact value through both dtypes.
template <typename T>
struct IntBounds {
  Vec<T> lo, hi;
  IntBounds(const at::Tensor& bit_width, bool is_signed, bool narrow) {
    const IntRange<T> r = int_range_of<T>(bit_width.const_data_ptr(), bit_width.scalar_type(), is_signed, narrow);
    lo = Vec<T>(r.lo);
    hi = Vec<T>(r.hi);
  }
};

// The clamp of Brevitas's tensor_clamp: where(r > hi, hi, r), then where(. < lo, lo, .).
template <typename T>
struct Clamped {
  Vec<T> value, above, below;
};
template <typename T>
inline Clamped<T> clamp_as_brevitas(const Vec<T>& r, const IntBounds<T>& b) {
  const Vec<T> above = r > b.hi;
  const Vec<T> c1 = Vec<T>::blendv(r, b.hi, above);
  const Vec<T> below = c1 < b.lo;
  return {Vec<T>::blendv(c1, b.lo, below), above, below};
}

// The value alone: at::vec's clamp_max(a, m) is a > m ? m : a and clamp_min(a, m) is
// a < m ? m : a on every instruction set (NaN and -0 kept), the two wheres above, without
// materialising comparison vectors (each a compare and a blend on AVX512).
template <typename T>
inline Vec<T> clamp_value_as_brevitas(const Vec<T>& r, const IntBounds<T>& b) {
  return at::vec::clamp_min(at::vec::clamp_max(r, b.hi), b.lo);
}

// q = the clamp of r as above, and gs where the clamp let the gradient through (+0 where it
// acted). On AVX512 the comparisons stay lane masks: at::vec widens each to a vector and
// converts it back for the blend, three instructions where one does.
template <typename T>
inline Vec<T> clamp_and_pass(const Vec<T>& r, const Vec<T>& gs, const IntBounds<T>& b, Vec<T>& q) {
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    const __mmask16 above = _mm512_cmp_ps_mask(r, b.hi, _CMP_GT_OQ);
    const __m512 c1 = _mm512_mask_blend_ps(above, r, b.hi);
    const __mmask16 below = _mm512_cmp_ps_mask(c1, b.lo, _CMP_LT_OQ);
    q = _mm512_mask_blend_ps(below, c1, b.lo);
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~(above | below)), gs);
  } else if constexpr (std::is_same_v<T, double>) {
    const __mmask8 above = _mm512_cmp_pd_mask(r, b.hi, _CMP_GT_OQ);
    const __m512d c1 = _mm512_mask_blend_pd(above, r, b.hi);
    const __mmask8 below = _mm512_cmp_pd_mask(c1, b.lo, _CMP_LT_OQ);
    q = _mm512_mask_blend_pd(below, c1, b.lo);
    return _mm512_maskz_mov_pd(static_cast<__mmask8>(~(above | below)), gs);
  }
#endif
  const Clamped<T> c = clamp_as_brevitas(r, b);
  q = c.value;
  return Vec<T>::blendv(gs, Vec<T>(T(0)), c.above | c.below);
}

template <typename T, bool kRelu>
inline Vec<T> input_of(const Vec<T>& x) {
  if constexpr (kRelu) {
    return at::vec::clamp_min(x, Vec<T>(T(0)));
  } else {
    return x;
  }
}

// kRelu: the input is relu(x), as torch.relu computes it on the CPU (at::vec::clamp_min(x, 0):
// -0 and NaN kept), applied as x is read.
template <typename T, RoundingMode M, bool kWithMask, bool kRelu>
void forward_loop(const T* px, T* py, bool* pmask, const ParamLayout& L, int64_t n, const IntBounds<T>& bounds) {
  const T* ps = L.params[0].const_data_ptr<T>();
  const T* pz = L.params[1].const_data_ptr<T>();
  at::parallel_for(0, n, kGrainSize, [&](int64_t begin, int64_t end) {
    for_each_run(L, begin, end, [&](int64_t off, int64_t len, int64_t k, bool strided) {
      for_each_block<T>(len, [&](int64_t j, int64_t c) {
        const Vec<T> s = load_param(ps, k, j, strided, c);
        const Vec<T> z = load_param(pz, k, j, strided, c);
        const Vec<T> t = input_of<T, kRelu>(Vec<T>::loadu(px + off + j, c)) / s;
        const Vec<T> r = vec_math::round_as<M, T>(t + z);
        if constexpr (kWithMask) {
          const Clamped<T> q = clamp_as_brevitas(r, bounds);
          ((q.value - z) * s).store(py + off + j, c);
          store_clear_lanes<T>(q.above | q.below, pmask + off + j, c);
        } else {
          ((clamp_value_as_brevitas(r, bounds) - z) * s).store(py + off + j, c);
        }
      });
    });
  });
}

// int_quant's forward (of relu(x) with kRelu), with the pass mask when with_mask; `op` names
// the op in error messages.
template <bool kRelu>
std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                                           const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                           c10::string_view rounding_mode, bool with_mask, const char* op) {
  ops::detail::check_int_quant_args(x, scale, zero_point, bit_width, rounding_mode, op);
  const RoundingMode mode = parse_rounding_mode(rounding_mode, op);
  check_bit_width(bit_width, op);
  check_scale(scale, ScaleRange::kNormal, op);
  check_finite(zero_point, op, "zero_point");

  at::Tensor y = empty_output_like(x);
  at::Tensor mask = with_mask ? empty_output_like(x, at::kBool) : at::Tensor();
  if (x.numel() == 0) return {y, mask};
  const at::Tensor xd = with_layout_of(x, y);
  const ParamLayout L = make_param_layout(y, {scale, zero_point}, x.scalar_type());
  BREVITAS_CPP_DISPATCH_FLOATING(x.scalar_type(), "int_quant", [&] {
    const IntBounds<scalar_t> bounds(bit_width, is_signed, narrow_range);
    dispatch_rounding_mode(mode, [&](auto m) {
      if (with_mask) {
        forward_loop<scalar_t, decltype(m)::value, true, kRelu>(xd.const_data_ptr<scalar_t>(),
                                                                y.mutable_data_ptr<scalar_t>(),
                                                                mask.mutable_data_ptr<bool>(), L, x.numel(), bounds);
      } else {
        forward_loop<scalar_t, decltype(m)::value, false, kRelu>(
            xd.const_data_ptr<scalar_t>(), y.mutable_data_ptr<scalar_t>(), nullptr, L, x.numel(), bounds);
      }
    });
  });
  return {y, mask};
}

// ---- backward ---------------------------------------------------------------------------
// Gradients are those of autograd through the unfused composition
//   t = x / s;  r = round(t + z);  q = clamp(r);  y = (q - z) * s
// with gs = g * s arriving at q and gt = gs where the clamp passes (all of it with clamp_ste):
//   dx = gt / s,   ds = g * (q - z) + (-gt) * (t / s),   dz = gt + (-gs),
//   d max_int = gs where r > max_int,   d min_int = gs where clamped below.

// dx from the saved pass mask (or, with clamp_ste, from nothing): no x needed.
template <typename T>
void grad_input_loop(const T* pg, const bool* pmask, T* pgx, const ParamLayout& L, int64_t n) {
  const T* ps = L.params[0].const_data_ptr<T>();
  at::parallel_for(0, n, kGrainSize, [&](int64_t begin, int64_t end) {
    for_each_run(L, begin, end, [&](int64_t off, int64_t len, int64_t k, bool strided) {
      for_each_block<T>(len, [&](int64_t j, int64_t c) {
        const Vec<T> s = load_param(ps, k, j, strided, c);
        Vec<T> gx = (Vec<T>::loadu(pg + off + j, c) * s) / s;
        if (pmask) gx = Vec<T>::blendv(Vec<T>(T(0)), gx, load_bool_mask<T>(pmask + off + j, c));
        gx.store(pgx + off + j, c);
      });
    });
  });
}

struct GradSelect {
  bool scale, zero_point, bounds;
};

// Recomputes the forward from x; writes dx (when pgx) and returns the accumulators
// [ds from * s (K) | ds from / s (K) | dz from + z (K) | dz from - z (K) | d max_int | d min_int].
// Each term is reduced on its own and the two are added in the parameter's dtype, as
// autograd adds the gradients of the two uses of s (and of z).
// kRelu: the quantizer's input is relu(x), and dx is ReLU's backward of the quantizer's:
// threshold_backward(dq, relu(x), 0), i.e. +0 where relu(x) <= 0 (x <= 0; NaN passes).
template <typename T, RoundingMode M, bool kClampSte, bool kRelu>
std::vector<double> grad_full_loop(const T* pg, const T* px, T* pgx, const ParamLayout& L, int64_t n,
                                   const IntBounds<T>& bounds, GradSelect want) {
  const T* ps = L.params[0].const_data_ptr<T>();
  const T* pz = L.params[1].const_data_ptr<T>();
  const int64_t K = L.K;
  // ds's (x / s) / s term only feeds a sum: for float and double it multiplies by 1 / s
  // (within an ulp per element) instead of a third division; float16/bfloat16 keep the
  // division, whose own rounding is far coarser.
  constexpr bool kReciprocal = std::is_same_v<T, float> || std::is_same_v<T, double>;
  std::vector<T> inv_scale(kReciprocal ? K : 0);
  for (size_t k = 0; k < inv_scale.size(); ++k) inv_scale[k] = T(1) / ps[k];
  const T* pinv = inv_scale.data();
  return chunked_reduce(n, 4 * K + 2, [&](int64_t begin, int64_t end, double* acc) {
    for_each_run(L, begin, end, [&](int64_t off, int64_t len, int64_t k, bool strided) {
      RunSum<T> sum_s_mul(acc + k, strided), sum_s_div(acc + K + k, strided);
      RunSum<T> sum_z_add(acc + 2 * K + k, strided), sum_z_sub(acc + 3 * K + k, strided);
      RunSum<T> sum_hi(acc + 4 * K, false), sum_lo(acc + 4 * K + 1, false);
      for_each_block<T>(len, [&](int64_t j, int64_t c) {
        const Vec<T> s = load_param(ps, k, j, strided, c);
        const Vec<T> z = load_param(pz, k, j, strided, c);
        const Vec<T> g = Vec<T>::loadu(pg + off + j, c);
        const Vec<T> x = Vec<T>::loadu(px + off + j, c);
        const Vec<T> t = input_of<T, kRelu>(x) / s;
        const Vec<T> r = vec_math::round_as<M, T>(t + z);
        const Vec<T> zero(T(0));
        const Vec<T> gs = g * s;
        // Only the bounds' gradients read where the clamp acted; otherwise the clamped value
        // (and with clamp_ste not even the pass mask) is all that is needed.
        Clamped<T> q;
        Vec<T> gt = gs;
        if constexpr (kClampSte) {
          q.value = clamp_value_as_brevitas(r, bounds);
        } else if (want.bounds) {
          q = clamp_as_brevitas(r, bounds);
          gt = Vec<T>::blendv(gs, zero, q.above | q.below);
        } else {
          gt = clamp_and_pass(r, gs, bounds, q.value);
        }
        if (pgx) {
          if constexpr (kRelu) {
            Vec<T>::blendv(gt / s, zero, x <= zero).store(pgx + off + j, c);
          } else {
            (gt / s).store(pgx + off + j, c);
          }
        }
        if (want.scale) {
          sum_s_mul.add(j, g * (q.value - z), c);
          const Vec<T> t_over_s = kReciprocal ? t * load_param(pinv, k, j, strided, c) : t / s;
          sum_s_div.add(j, gt.neg() * t_over_s, c);
        }
        if (want.zero_point) {
          sum_z_add.add(j, gt, c);
          sum_z_sub.add(j, gs.neg(), c);
        }
        if (!kClampSte && want.bounds) {
          sum_hi.add(j, Vec<T>::blendv(zero, gs, q.above), c);
          sum_lo.add(j, Vec<T>::blendv(zero, gs, q.below), c);
        }
      });
    });
  });
}

// The gradients that need x (all of them with kRelu): recomputes the forward from x, writing
// dx into gx when it is defined. `layout` and `gd` are the memory order and the gradient in it.
template <bool kRelu>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward_from_x(
    const at::Tensor& gd, const at::Tensor& x, const at::Tensor& layout, at::Tensor gx, const at::Tensor& scale,
    const at::Tensor& zero_point, const at::Tensor& bit_width, bool is_signed, bool narrow_range, RoundingMode mode,
    bool clamp_ste, std::array<bool, 4> output_mask, int64_t b) {
  const at::Tensor& grad = gd;
  const int64_t n = gd.numel();
  at::Tensor gs, gz, gb;
  // Here x is given, so ref is x: without dx, layout already is x in walkable form.
  const at::Tensor xd = gx.defined() ? with_layout_of(x, layout) : layout;
  const ParamLayout L = make_param_layout(layout, {scale, zero_point}, grad.scalar_type());
  const GradSelect want{output_mask[1], output_mask[2], output_mask[3] && !clamp_ste};
  std::vector<double> acc(static_cast<size_t>(4 * L.K + 2), 0.0);
  if (n > 0) {
    BREVITAS_CPP_DISPATCH_FLOATING(grad.scalar_type(), "_int_quant_backward", [&] {
      const IntBounds<scalar_t> bounds(bit_width, is_signed, narrow_range);
      scalar_t* pgx = gx.defined() ? gx.mutable_data_ptr<scalar_t>() : nullptr;
      dispatch_rounding_mode(mode, [&](auto m) {
        constexpr RoundingMode M = decltype(m)::value;
        acc = clamp_ste ? grad_full_loop<scalar_t, M, true, kRelu>(
                              gd.const_data_ptr<scalar_t>(), xd.const_data_ptr<scalar_t>(), pgx, L, n, bounds, want)
                        : grad_full_loop<scalar_t, M, false, kRelu>(
                              gd.const_data_ptr<scalar_t>(), xd.const_data_ptr<scalar_t>(), pgx, L, n, bounds, want);
      });
    });
  }
  if (want.scale) gs = L.fold_sum_to(acc.data(), acc.data() + L.K, scale);
  if (want.zero_point) gz = L.fold_sum_to(acc.data() + 2 * L.K, acc.data() + 3 * L.K, zero_point);
  if (want.bounds) {
    const double bw = static_cast<double>(b);
    // The bounds' gradients are sums in x's dtype (the composition casts max_int to it).
    const double g_hi = through_dtype(acc[4 * L.K], grad.scalar_type());
    const double g_lo = through_dtype(acc[4 * L.K + 1], grad.scalar_type());
    const double value = g_hi * max_int_slope(bw, is_signed) + g_lo * min_int_slope(bw, is_signed);
    gb = at::full(bit_width.sizes(), value, bit_width.options());
  }
  return {gx, gs, gz, gb};
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY::int_quant_loops
