// Shared quantization arithmetic: rounding modes and integer ranges.
// Written once and used by every kernel (scalar and at::vec::Vectorized forms), so
// each op rounds and clamps exactly the same way.
#pragma once

#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16-math.h>
#include <c10/util/string_view.h>

#include <cmath>
#include <cstdint>

namespace brevitas_cpp {

enum class RoundingMode : int8_t { kRound, kCeil, kFloor, kRoundToZero, kDpu };

// Parses a rounding mode name case-insensitively ("round", "ceil", "floor",
// "round_to_zero", "dpu"); throws naming `op` and the accepted names otherwise.
RoundingMode parse_rounding_mode(c10::string_view name, const char* op);
const char* rounding_mode_name(RoundingMode mode);

// Exact integer range of a quantizer (Brevitas's max_int/min_int), as doubles.
// Signed: [-2^(b-1), 2^(b-1)-1], narrow: [-2^(b-1)+1, ...]; unsigned: [0, 2^b-1], narrow: [0, 2^b-2].
inline double max_int_value(int64_t bit_width, bool is_signed, bool narrow_range) {
  if (is_signed) return std::ldexp(1.0, static_cast<int>(bit_width - 1)) - 1.0;
  return std::ldexp(1.0, static_cast<int>(bit_width)) - (narrow_range ? 2.0 : 1.0);
}
inline double min_int_value(int64_t bit_width, bool is_signed, bool narrow_range) {
  if (!is_signed) return 0.0;
  return -std::ldexp(1.0, static_cast<int>(bit_width - 1)) + (narrow_range ? 1.0 : 0.0);
}

// d max_int / d bit_width and d min_int / d bit_width of the formulas above
// (2^e · ln 2 for each 2^e term), for the learned-bit-width gradient.
inline double max_int_slope(double bit_width, bool is_signed) {
  return std::exp2(is_signed ? bit_width - 1.0 : bit_width) * M_LN2;
}
inline double min_int_slope(double bit_width, bool is_signed) {
  return is_signed ? -std::exp2(bit_width - 1.0) * M_LN2 : 0.0;
}

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

}  // namespace CPU_CAPABILITY
}  // namespace vec_math

// Calls f with RoundingMode as a compile-time constant.
template <typename F>
inline auto dispatch_rounding_mode(RoundingMode mode, F&& f) {
  switch (mode) {
    case RoundingMode::kRound:
      return f(std::integral_constant<RoundingMode, RoundingMode::kRound>{});
    case RoundingMode::kCeil:
      return f(std::integral_constant<RoundingMode, RoundingMode::kCeil>{});
    case RoundingMode::kFloor:
      return f(std::integral_constant<RoundingMode, RoundingMode::kFloor>{});
    case RoundingMode::kRoundToZero:
      return f(std::integral_constant<RoundingMode, RoundingMode::kRoundToZero>{});
    case RoundingMode::kDpu:
    default:
      return f(std::integral_constant<RoundingMode, RoundingMode::kDpu>{});
  }
}

}  // namespace brevitas_cpp
