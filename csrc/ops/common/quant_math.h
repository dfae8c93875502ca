// The CPU kernels' vector forms (at::vec::Vectorized) of the shared arithmetic of
// rounding.h; tests/cpp/ops/common checks them lane by lane against its scalar forms.
#pragma once

#include "ops/common/rounding.h"

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16-math.h>
#include <c10/util/string_view.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace brevitas_cpp {

namespace vec_math {
inline namespace CPU_CAPABILITY {

template <typename T>
using Vec = at::vec::Vectorized<T>;

// sign(x) as torch.sign computes it for non-NaN x: (x > 0) - (x < 0), so sign(±0) = +0.
template <typename T>
inline Vec<T> sign(const Vec<T>& x) {
  const Vec<T> zero(T(0)), one(T(1));
  return (Vec<T>(x > zero) & one) - (Vec<T>(x < zero) & one);
}

// Brevitas's binary sign: +1 for x >= 0 (including -0), -1 otherwise.
template <typename T>
inline Vec<T> binary_sign(const Vec<T>& x) {
  const Vec<T> zero(T(0)), one(T(1));
  return (Vec<T>(x >= zero) & one) - (Vec<T>(x < zero) & one);
}

// NaN lanes of x replace the lanes of v: every op propagates NaN inputs to NaN outputs.
template <typename T>
inline Vec<T> keep_nan(const Vec<T>& v, const Vec<T>& x) {
  return Vec<T>::blendv(v, x, x.isnan());
}

// v * c for a double c, as ATen multiplies a tensor by a Python scalar: for float16 and
// bfloat16 in float with c as float, rounded once; otherwise with c converted to T.
template <typename T>
inline Vec<T> mul_scalar(const Vec<T>& v, double c) {
  if constexpr (c10::is_reduced_floating_point_v<T>) {
    auto [lo, hi] = at::vec::convert_to_float<T>(v);
    const Vec<float> cf(static_cast<float>(c));
    return at::vec::convert_from_float<T>(lo * cf, hi * cf);
  } else {
    return v * Vec<T>(static_cast<T>(c));
  }
}

// Rounding of each mode, written as the ATen composition it replaces (bitwise equal,
// including the sign of zero).
template <RoundingMode M, typename T>
inline Vec<T> round_as(const Vec<T>& x) {
  if constexpr (M == RoundingMode::kRound) {
    return x.round();  // half to even, like torch.round
  } else if constexpr (M == RoundingMode::kCeil) {
    return x.ceil();
  } else if constexpr (M == RoundingMode::kFloor) {
    return x.floor();
  } else if constexpr (M == RoundingMode::kRoundToZero) {
    return sign<T>(x) * x.abs().floor();  // sign(x) * floor(|x|)
  } else {
    // DPU: round half to even, except a negative x with fractional part exactly 0.5 goes up.
    const Vec<T> zero(T(0)), half(T(0.5));
    const Vec<T> tie_up = Vec<T>(x < zero) & Vec<T>((x - x.floor()) == half);
    return Vec<T>::blendv(x.round(), x.ceil(), tie_up);
  }
}

// scalar_math::symmetric_quant, lane by lane: the clamp as where(r > q, q, r), then
// where(. < -q, -q, .), so NaN stays NaN.
template <typename T>
inline Vec<T> symmetric_quant(const Vec<T>& x, const Vec<T>& s, T quant_max) {
  const Vec<T> zero(T(0)), hi(quant_max), lo(-quant_max);
  const Vec<T> r = (x / s).round();  // half to even
  const Vec<T> c1 = Vec<T>::blendv(r, hi, r > hi);
  const Vec<T> q = Vec<T>::blendv(c1, lo, c1 < lo) * s;
  return Vec<T>::blendv(q, keep_nan<T>(zero, x), s == zero);
}

// scalar_math::clip_window_grad, lane by lane.
template <typename T>
inline Vec<T> clip_window_grad(const Vec<T>& g, const Vec<T>& x, const Vec<T>& t) {
  return Vec<T>::blendv(g, Vec<T>(T(0)), x.abs() > t);
}

// round_as with the mode read at run time (one branch per vector).
template <typename T>
inline Vec<T> round_as_mode(const Vec<T>& v, RoundingMode mode) {
  switch (mode) {
    case RoundingMode::kRound:
      return round_as<RoundingMode::kRound, T>(v);
    case RoundingMode::kCeil:
      return round_as<RoundingMode::kCeil, T>(v);
    case RoundingMode::kFloor:
      return round_as<RoundingMode::kFloor, T>(v);
    case RoundingMode::kRoundToZero:
      return round_as<RoundingMode::kRoundToZero, T>(v);
    default:
      return round_as<RoundingMode::kDpu, T>(v);
  }
}

// Whether float_quant_element (below) serves the format in T: float and double lanes, and a
// smallest grid exponent whose power of two is a normal T (so every subnormal |u| lies below it).
template <typename T>
inline bool minifloat_vectorizes(const MinifloatFormat& f) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return f.min_exponent >= std::numeric_limits<T>::min_exponent - 1;
  } else {
    return false;
  }
}

// scalar_math::float_quant_element, lane by lane (float and double, see minifloat_vectorizes).
// The grid's spacing needs floor(log2|u|): |u| & the bits of inf keeps the exponent field alone,
// which is 2^floor(log2|u|) for a normal |u|, 0 for 0 and subnormals, inf for inf and NaN (whose
// lanes then end NaN, as in the scalar form). The powers of two multiply and divide exactly.
template <typename T>
struct FloatQuantLanes {
  Vec<T> y;
  Vec<T> q;  // the clamped grid value
  Vec<T> u;
  Vec<T> passed;  // all-ones lanes where the clamp let x's gradient through
  Vec<T> slope;
};

template <typename T>
inline FloatQuantLanes<T> float_quant_element(const Vec<T>& x, const Vec<T>& s, const MinifloatFormat& f) {
  const Vec<T> one(T(1)), tiny(T(1.17549435082228750797e-38));
  const Vec<T> u = x / s;
  const Vec<T> a = u.abs();
  const Vec<T> power = a & Vec<T>(std::numeric_limits<T>::infinity());
  const Vec<T> unclamped = power * Vec<T>(std::ldexp(T(1), -f.mantissa_bits));
  const Vec<T> smallest(std::ldexp(T(1), f.min_exponent));
  const Vec<T> above_min = unclamped >= smallest;
  const Vec<T> scale = Vec<T>::blendv(smallest, unclamped, above_min);
  const Vec<T> v = u / scale;
  const Vec<T> r = round_as_mode<T>(v, f.rounding);
  const Vec<T> q = scale * r;
  const Vec<T> slope = Vec<T>::blendv(one, one + scale * sign<T>(u) / (a + tiny) * (r - v), above_min);
  const Vec<T> hi(static_cast<T>(f.max_value));
  const Vec<T> lo(f.is_signed ? static_cast<T>(-f.max_value) : T(0));
  const Vec<T> above = q > hi, below = q < lo;
  Vec<T> c = Vec<T>::blendv(Vec<T>::blendv(q, lo, below), hi, above);
  const Vec<T> beyond = above | below;
  if (!f.saturating) {
    const T inf = std::numeric_limits<T>::infinity();
    const Vec<T> marked =
        f.inf_values ? Vec<T>::blendv(Vec<T>(-inf), Vec<T>(inf), above) : Vec<T>(std::numeric_limits<T>::quiet_NaN());
    c = Vec<T>::blendv(c, marked, beyond);
  }
  const Vec<T> all_ones = Vec<T>(T(0)) == Vec<T>(T(0));
  return {c * s, c, u, beyond ^ all_ones, slope};
}

}  // namespace CPU_CAPABILITY
}  // namespace vec_math

}  // namespace brevitas_cpp
