// A bit width's one value, read from its memory in any real dtype, and the rounding of the
// integer range through that dtype. Host-device: the CPU kernels read a CPU bit width with
// them, the GPU kernels a GPU one, in the kernel (no copy to the host).
#pragma once

#include "ops/common/rounding.h"

#include <c10/core/ScalarType.h>
#include <c10/macros/Macros.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>

namespace brevitas_cpp {

// The value at p of a tensor of dtype t (a real dtype: check_bit_width_dtype).
C10_HOST_DEVICE inline double load_single_value(const void* p, c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return static_cast<double>(*static_cast<const float*>(p));
    case c10::ScalarType::Double:
      return *static_cast<const double*>(p);
    case c10::ScalarType::Half:
      return static_cast<double>(static_cast<float>(*static_cast<const c10::Half*>(p)));
    case c10::ScalarType::BFloat16:
      return static_cast<double>(static_cast<float>(*static_cast<const c10::BFloat16*>(p)));
    case c10::ScalarType::Long:
      return static_cast<double>(*static_cast<const int64_t*>(p));
    case c10::ScalarType::Int:
      return static_cast<double>(*static_cast<const int32_t*>(p));
    case c10::ScalarType::Short:
      return static_cast<double>(*static_cast<const int16_t*>(p));
    case c10::ScalarType::Char:
      return static_cast<double>(*static_cast<const int8_t*>(p));
    case c10::ScalarType::Byte:
      return static_cast<double>(*static_cast<const uint8_t*>(p));
    default:
      return 0.0;  // not a bit width dtype: 0 is rejected as a bit width
  }
}

// v stored in dtype t and read back, as the composition computes max_int/min_int in the bit
// width's dtype. Integer dtypes wrap modulo 2^bits, as an integer tensor does (an unsigned
// 8-bit bit width gives min_int -15 as 241).
C10_HOST_DEVICE inline double through_dtype(double v, c10::ScalarType t) {
  const int64_t i = static_cast<int64_t>(v);
  switch (t) {
    case c10::ScalarType::Float:
      return static_cast<double>(static_cast<float>(v));
    case c10::ScalarType::Half:
      return static_cast<double>(static_cast<float>(static_cast<c10::Half>(v)));
    case c10::ScalarType::BFloat16:
      return static_cast<double>(static_cast<float>(static_cast<c10::BFloat16>(v)));
    case c10::ScalarType::Long:
      return static_cast<double>(i);
    case c10::ScalarType::Int:
      return static_cast<double>(static_cast<int32_t>(i));
    case c10::ScalarType::Short:
      return static_cast<double>(static_cast<int16_t>(i));
    case c10::ScalarType::Char:
      return static_cast<double>(static_cast<int8_t>(i));
    case c10::ScalarType::Byte:
      return static_cast<double>(static_cast<uint8_t>(i));
    default:
      return v;  // Double
  }
}

// IntScaling's threshold for a bit width b held in dtype t: 2^(b-1) (- 1 narrow) signed,
// max_int unsigned, rounded through t as the composition computes it there (host only).
inline double int_scaling_threshold(double b, c10::ScalarType t, bool is_signed, bool narrow_range) {
  const double v = is_signed ? std::ldexp(1.0, static_cast<int>(b - 1)) - (narrow_range ? 1.0 : 0.0)
                             : max_int_value(b, false, narrow_range);
  return through_dtype(v, t);
}

// int_scaling_threshold in the dtype T of x, which the composition casts it to.
template <typename T>
inline T int_scaling_threshold_as(double b, c10::ScalarType t, bool is_signed, bool narrow_range) {
  return static_cast<T>(int_scaling_threshold(b, t, is_signed, narrow_range));
}

// The integer range [lo, hi] of a quantizer whose bit width is stored at p with dtype t, in
// the dtype T of x; valid is false for a bit width outside the integers [1, 32].
template <typename T>
struct IntRange {
  T lo, hi;
  double bit_width;
  bool valid;
};
template <typename T>
C10_HOST_DEVICE inline IntRange<T> int_range_of(const void* p, c10::ScalarType t, bool is_signed, bool narrow) {
  const double b = load_single_value(p, t);
  const bool valid = is_valid_bit_width(b);
  const double bb = valid ? b : 8.0;  // any valid width: the kernels give NaN for an invalid one
  return {static_cast<T>(through_dtype(min_int_value(bb, is_signed, narrow), t)),
          static_cast<T>(through_dtype(max_int_value(bb, is_signed, narrow), t)), b, valid};
}

}  // namespace brevitas_cpp
