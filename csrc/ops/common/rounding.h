// Rounding modes and the scalar rounding, sign and integer-range arithmetic shared by the
// CPU and CUDA kernels. Host-device functions: the CUDA kernels call them per element, the
// CPU vector forms in quant_math.h are checked against them (tests/cpp/ops/common).
#pragma once

#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/string_view.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace brevitas_cpp {

enum class RoundingMode : int8_t { kRound, kCeil, kFloor, kRoundToZero, kDpu };

// Parses a rounding mode name case-insensitively ("round", "ceil", "floor",
// "round_to_zero", "dpu"); throws naming `op` and the accepted names otherwise.
RoundingMode parse_rounding_mode(c10::string_view name, const char* op);
const char* rounding_mode_name(RoundingMode mode);

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

// Exact integer range of a quantizer (Brevitas's max_int/min_int), as doubles.
// Signed: [-2^(b-1), 2^(b-1)-1], narrow: [-2^(b-1)+1, ...]; unsigned: [0, 2^b-1], narrow: [0, 2^b-2].
C10_HOST_DEVICE inline double max_int_value(double bit_width, bool is_signed, bool narrow_range) {
  if (is_signed) return std::ldexp(1.0, static_cast<int>(bit_width - 1)) - 1.0;
  return std::ldexp(1.0, static_cast<int>(bit_width)) - (narrow_range ? 2.0 : 1.0);
}
C10_HOST_DEVICE inline double min_int_value(double bit_width, bool is_signed, bool narrow_range) {
  if (!is_signed) return 0.0;
  return -std::ldexp(1.0, static_cast<int>(bit_width - 1)) + (narrow_range ? 1.0 : 0.0);
}

// d max_int / d bit_width and d min_int / d bit_width of the formulas above
// (2^e · ln 2 for each 2^e term), for the learned-bit-width gradient.
constexpr double kLn2 = 0.693147180559945309417232121458176568;
C10_HOST_DEVICE inline double max_int_slope(double bit_width, bool is_signed) {
  return std::exp2(is_signed ? bit_width - 1.0 : bit_width) * kLn2;
}
C10_HOST_DEVICE inline double min_int_slope(double bit_width, bool is_signed) {
  return is_signed ? -std::exp2(bit_width - 1.0) * kLn2 : 0.0;
}

// A bit width the quantizers accept: an integer in [1, 32].
C10_HOST_DEVICE inline bool is_valid_bit_width(double b) {
  return std::isfinite(b) && b == std::floor(b) && b >= 1.0 && b <= 32.0;
}

namespace scalar_math {

// The type a T is computed in, one operation at a time: float for float16/bfloat16 (each
// result rounded back to T, as ATen's reduced-precision ops do), T itself otherwise.
template <typename T>
using opmath_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
C10_HOST_DEVICE inline T rint_of(T x) {
  return static_cast<T>(std::rint(static_cast<opmath_t<T>>(x)));  // half to even, like torch.round
}
template <typename T>
C10_HOST_DEVICE inline T floor_of(T x) {
  return static_cast<T>(std::floor(static_cast<opmath_t<T>>(x)));
}
template <typename T>
C10_HOST_DEVICE inline T ceil_of(T x) {
  return static_cast<T>(std::ceil(static_cast<opmath_t<T>>(x)));
}
template <typename T>
C10_HOST_DEVICE inline T abs_of(T x) {
  return static_cast<T>(std::fabs(static_cast<opmath_t<T>>(x)));
}
template <typename T>
C10_HOST_DEVICE inline bool isnan_of(T x) {
  return std::isnan(static_cast<opmath_t<T>>(x));
}
template <typename T>
C10_HOST_DEVICE inline bool isfinite_of(T x) {
  return std::isfinite(static_cast<opmath_t<T>>(x));
}

// The smallest positive normal number of T, in opmath_t<T> (exact there): 2^-126 for float32 and
// bfloat16, 2^-14 for float16, 2^-1022 for float64.
template <typename T>
C10_HOST_DEVICE inline opmath_t<T> smallest_normal() {
  return static_cast<opmath_t<T>>(std::numeric_limits<T>::min());
}

// A scale that int_quant and float_quant accept: normal, positive and finite (NaN fails). Below
// the smallest normal m, x / s overflows once |x| passes 4 s / m (under 4), and the scale's
// gradient, (x / s) / s, once |x / s| does: float_quant's grid and int_quant's scale gradient
// would be NaN or inf.
template <typename T>
C10_HOST_DEVICE inline bool is_normal_scale(T s) {
  const opmath_t<T> v = static_cast<opmath_t<T>>(s);
  return v >= smallest_normal<T>() && std::isfinite(v);
}

// s, or NaN where the CPU kernels would raise on it (is_normal_scale): what the CUDA kernels
// compute with, so every output that reads the scale is NaN, without a host read.
template <typename T>
C10_HOST_DEVICE inline T normal_scale_or_nan(T s) {
  return is_normal_scale(s) ? s : static_cast<T>(std::numeric_limits<opmath_t<T>>::quiet_NaN());
}

// sign(x) as torch.sign computes it for non-NaN x: (x > 0) - (x < 0), so sign(±0) = +0.
template <typename T>
C10_HOST_DEVICE inline T sign(T x) {
  return static_cast<T>(x > T(0) ? 1 : 0) - static_cast<T>(x < T(0) ? 1 : 0);
}

// Brevitas's binary sign: +1 for x >= 0 (including -0), -1 otherwise; NaN stays NaN.
template <typename T>
C10_HOST_DEVICE inline T binary_sign(T x) {
  return isnan_of(x) ? x : (x >= T(0) ? T(1) : T(-1));
}

// Rounding of each mode, written as the ATen composition it replaces (bitwise equal,
// including the sign of zero), each step rounded to T.
template <RoundingMode M, typename T>
C10_HOST_DEVICE inline T round_as(T x) {
  if constexpr (M == RoundingMode::kRound) {
    return rint_of(x);
  } else if constexpr (M == RoundingMode::kCeil) {
    return ceil_of(x);
  } else if constexpr (M == RoundingMode::kFloor) {
    return floor_of(x);
  } else if constexpr (M == RoundingMode::kRoundToZero) {
    return sign(x) * floor_of(abs_of(x));  // sign(x) * floor(|x|)
  } else {
    // DPU: round half to even, except a negative x with fractional part exactly 0.5 goes up.
    const bool tie_up = x < T(0) && (x - floor_of(x)) == T(0.5);
    return tie_up ? ceil_of(x) : rint_of(x);
  }
}

// quantization_int8's quantizer: clamp(round_half_even(x / s), -q, q) * s, each step rounded to
// T, the clamp keeping NaN; a zero scale (a zero threshold) gives +0, NaN staying NaN.
template <typename T>
C10_HOST_DEVICE inline T symmetric_quant(T x, T s, T quant_max) {
  if (s == T(0)) return isnan_of(x) ? x : T(0);
  T r = rint_of(static_cast<T>(x / s));
  r = r > quant_max ? quant_max : r;
  r = r < -quant_max ? static_cast<T>(-quant_max) : r;
  return static_cast<T>(r * s);
}

// quantization_int8's "clip" gradient: g where !(|x| > t) (NaN x passes), else 0.
template <typename T>
C10_HOST_DEVICE inline T clip_window_grad(T g, T x, T t) {
  return abs_of(x) > t ? T(0) : g;
}

// A minifloat format (float_quant): m mantissa bits, the smallest exponent of the grid
// (1 - exponent_bias - m: subnormals), the largest magnitude, and what lies beyond it.
struct MinifloatFormat {
  int mantissa_bits;
  int min_exponent;
  double max_value;
  bool is_signed;
  bool saturating;  // beyond max_value: clamp; otherwise +-inf (inf_values) or NaN
  bool inf_values;
  RoundingMode rounding;
};

// Brevitas's FloatQuant grid for u = x / scale, in A: the internal scale
// I = 2^max(floor(log2|u|) - m, min_exponent), q = I * round(u / I), and dq/du as Brevitas's
// autograd gives it (straight-through round and floor, the path through log2|u|):
//   slope = 1 + [floor(log2|u|) - m >= min_exponent] * I * sign(u) / (|u| + tiny) * (round(u/I) - u/I).
// floor(log2|u|) is taken exactly from the exponent (frexp), where a float32 log2 rounds the values
// just below a power of two up to it: q is the same there, the slope's second term differs.
// +-inf and NaN give NaN (Brevitas: inf / inf).
template <typename A>
struct MinifloatPoint {
  A q;
  A slope;
};

template <typename A>
C10_HOST_DEVICE inline MinifloatPoint<A> minifloat_point(A u, const MinifloatFormat& f) {
  const A a = std::fabs(u);
  if (!std::isfinite(a)) {
    const A nan = std::numeric_limits<A>::quiet_NaN();
    return {nan, nan};
  }
  bool above_min = false;
  int exponent = f.min_exponent;
  if (a > A(0)) {
    int e = 0;
    (void)std::frexp(a, &e);  // a = g * 2^e with g in [0.5, 1): floor(log2 a) = e - 1
    const int unclamped = e - 1 - f.mantissa_bits;
    above_min = unclamped >= f.min_exponent;
    if (above_min) exponent = unclamped;
  }
  const A scale = std::ldexp(A(1), exponent);
  const A v = u / scale;
  A r;
  switch (f.rounding) {
    case RoundingMode::kRound:
      r = round_as<RoundingMode::kRound>(v);
      break;
    case RoundingMode::kCeil:
      r = round_as<RoundingMode::kCeil>(v);
      break;
    case RoundingMode::kFloor:
      r = round_as<RoundingMode::kFloor>(v);
      break;
    case RoundingMode::kRoundToZero:
      r = round_as<RoundingMode::kRoundToZero>(v);
      break;
    default:
      r = round_as<RoundingMode::kDpu>(v);
  }
  // float32's smallest normal: Brevitas adds it to |u| before the log2 (its quantizers' dtype).
  constexpr A kTiny = A(1.17549435082228750797e-38);
  const A slope = above_min ? A(1) + scale * sign(u) / (a + kTiny) * (r - v) : A(1);
  return {scale * r, slope};
}

// One element of float_quant, as Brevitas's FloatQuant + FloatClamp compute it in T:
// u = x / s; q on the grid (minifloat_point); the clamp to [-max, max] (or [0, max] unsigned) as
// TensorClamp's where(q > max, max, q), where(. < min, min, .); beyond the range, when not
// saturating, +-inf (inf_values) or NaN; y = q * s. `passed`: the clamp let x's gradient through.
template <typename T>
struct FloatQuantElement {
  T y;
  T q;  // the clamped grid value (y / s)
  T u;
  bool passed;
  opmath_t<T> slope;
};

template <typename T>
C10_HOST_DEVICE inline FloatQuantElement<T> float_quant_element(T x, T s, const MinifloatFormat& f) {
  using A = opmath_t<T>;
  const T u = static_cast<T>(x / s);
  const MinifloatPoint<A> p = minifloat_point<A>(static_cast<A>(u), f);
  const T q = static_cast<T>(p.q);
  const T hi = static_cast<T>(f.max_value);
  const T lo = f.is_signed ? static_cast<T>(-f.max_value) : T(0);
  const bool above = q > hi;
  const bool below = q < lo;
  T c = above ? hi : (below ? lo : q);
  if (!f.saturating && (above || below)) {
    const A beyond = f.inf_values ? (above ? std::numeric_limits<A>::infinity() : -std::numeric_limits<A>::infinity())
                                  : std::numeric_limits<A>::quiet_NaN();
    c = static_cast<T>(beyond);
  }
  return {static_cast<T>(c * s), c, u, !(above || below), p.slope};
}

}  // namespace scalar_math

using scalar_math::MinifloatFormat;

}  // namespace brevitas_cpp
