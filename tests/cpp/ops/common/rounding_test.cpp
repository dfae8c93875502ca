// The shared arithmetic of csrc/ops/common/rounding.h (host-device: the CUDA kernels use it)
// against formulas written out here, and the CPU kernels' vector forms (quant_math.h) against
// it, lane by lane and bit for bit, for every rounding mode and floating dtype.
#ifndef CPU_CAPABILITY
#define CPU_CAPABILITY DEFAULT
#endif
#include "ops/common/rounding.h"
#include "ops/common/bit_width_value.h"
#include "ops/common/quant_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace brevitas_cpp {
namespace {

template <typename T>
bool same_bits(T a, T b) {
  if (scalar_math::isnan_of(a) && scalar_math::isnan_of(b)) return true;
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

std::vector<double> probe_values() {
  std::vector<double> v{0.0,
                        -0.0,
                        1e6,
                        -1e6,
                        std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity(),
                        std::numeric_limits<double>::quiet_NaN()};
  for (int k = -9; k <= 9; ++k) {
    for (double f : {0.0, 0.25, 0.5, 0.75, 0.4999, 0.5001}) v.push_back(k + f);
  }
  return v;
}

template <RoundingMode M, typename T>
void expect_vector_matches_scalar() {
  using V = at::vec::Vectorized<T>;
  const std::vector<double> values = probe_values();
  for (size_t start = 0; start < values.size(); start += V::size()) {
    T in[V::size()], out[V::size()];
    const int64_t n = std::min<int64_t>(V::size(), values.size() - start);
    for (int64_t j = 0; j < V::size(); ++j) in[j] = static_cast<T>(j < n ? values[start + j] : 0.0);
    vec_math::round_as<M, T>(V::loadu(in)).store(out);
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_TRUE(same_bits(out[j], scalar_math::round_as<M>(in[j])))
          << rounding_mode_name(M) << " of " << static_cast<double>(in[j]) << ": vector " << static_cast<double>(out[j])
          << ", scalar " << static_cast<double>(scalar_math::round_as<M>(in[j]));
    }
  }
}

template <typename T>
void expect_all_modes() {
  expect_vector_matches_scalar<RoundingMode::kRound, T>();
  expect_vector_matches_scalar<RoundingMode::kCeil, T>();
  expect_vector_matches_scalar<RoundingMode::kFloor, T>();
  expect_vector_matches_scalar<RoundingMode::kRoundToZero, T>();
  expect_vector_matches_scalar<RoundingMode::kDpu, T>();
}

TEST(Rounding, VectorFormsEqualTheScalarFormsBitForBit) {
  expect_all_modes<float>();
  expect_all_modes<double>();
  expect_all_modes<c10::Half>();
  expect_all_modes<c10::BFloat16>();
}

// quantization_int8's arithmetic: the vector forms against the scalar ones, for scales 0, 1/3,
// 2^-7 and the 8-bit range, lane by lane, NaN, infinities and ties included.
template <typename T>
void expect_symmetric_quant_vector_matches_scalar() {
  using V = at::vec::Vectorized<T>;
  const std::vector<double> values = probe_values();
  const T quant_max = T(127);
  for (const double scale : {0.0, 1.0 / 3.0, 0.0078125, 1.0}) {
    const T s = static_cast<T>(scale);
    for (size_t start = 0; start < values.size(); start += V::size()) {
      T in[V::size()], out[V::size()], grad[V::size()];
      const int64_t n = std::min<int64_t>(V::size(), values.size() - start);
      for (int64_t j = 0; j < V::size(); ++j) in[j] = static_cast<T>(j < n ? values[start + j] * 40.0 : 0.0);
      vec_math::symmetric_quant<T>(V::loadu(in), V(s), quant_max).store(out);
      vec_math::clip_window_grad<T>(V(T(1)), V::loadu(in), V(s * T(3))).store(grad);
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_TRUE(same_bits(out[j], scalar_math::symmetric_quant(in[j], s, quant_max)))
            << static_cast<double>(in[j]) << " scale " << scale;
        EXPECT_TRUE(same_bits(grad[j], scalar_math::clip_window_grad(T(1), in[j], static_cast<T>(s * T(3)))))
            << static_cast<double>(in[j]) << " scale " << scale;
      }
    }
  }
}

TEST(SymmetricQuant, VectorFormsEqualTheScalarFormsBitForBit) {
  expect_symmetric_quant_vector_matches_scalar<float>();
  expect_symmetric_quant_vector_matches_scalar<double>();
  expect_symmetric_quant_vector_matches_scalar<c10::Half>();
  expect_symmetric_quant_vector_matches_scalar<c10::BFloat16>();
}

// float_quant's arithmetic: the vector form against the scalar one, lane by lane, for OCP e4m3
// and e5m2 (saturating, inf and NaN), unsigned e2m1 and a custom e3m5 with bias 20, each rounding
// mode, scales 1, 1/3 and 2^-12, over the probe values, powers of two and their neighbours,
// subnormals of the formats and of T, and the specials.
template <typename T>
std::vector<T> minifloat_probes() {
  std::vector<T> v;
  for (double p : probe_values()) v.push_back(static_cast<T>(p));
  for (int k = -30; k <= 20; ++k) {
    const T p = std::ldexp(T(1), k);
    for (T x : {p, std::nextafter(p, T(0)), std::nextafter(p, T(4 * p)), T(1.5) * p, T(1.0625) * p}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  v.push_back(std::numeric_limits<T>::denorm_min());
  v.push_back(-std::numeric_limits<T>::min() / T(3));
  return v;
}

template <typename T>
void expect_float_quant_vector_matches_scalar(MinifloatFormat f) {
  using V = at::vec::Vectorized<T>;
  ASSERT_TRUE(vec_math::minifloat_vectorizes<T>(f));
  const std::vector<T> values = minifloat_probes<T>();
  for (const double scale : {1.0, 1.0 / 3.0, 0.000244140625}) {
    const T s = static_cast<T>(scale);
    for (size_t start = 0; start < values.size(); start += V::size()) {
      T in[V::size()], y[V::size()], q[V::size()], passed[V::size()], slope[V::size()];
      const int64_t n = std::min<int64_t>(V::size(), values.size() - start);
      for (int64_t j = 0; j < V::size(); ++j) in[j] = j < n ? values[start + j] : T(0);
      const auto lanes = vec_math::float_quant_element<T>(V::loadu(in), V(s), f);
      lanes.y.store(y);
      lanes.q.store(q);
      lanes.passed.store(passed);
      lanes.slope.store(slope);
      for (int64_t j = 0; j < n; ++j) {
        const auto e = scalar_math::float_quant_element<T>(in[j], s, f);
        const bool lane_passed = passed[j] != T(0) || std::isnan(passed[j]);
        EXPECT_TRUE(same_bits(y[j], e.y)) << static_cast<double>(in[j]) << " scale " << scale << ": vector "
                                          << static_cast<double>(y[j]) << ", scalar " << static_cast<double>(e.y);
        EXPECT_TRUE(same_bits(q[j], e.q)) << static_cast<double>(in[j]) << " scale " << scale;
        EXPECT_EQ(lane_passed, e.passed) << static_cast<double>(in[j]) << " scale " << scale;
        if (e.passed) EXPECT_TRUE(same_bits(slope[j], e.slope)) << static_cast<double>(in[j]) << " scale " << scale;
      }
    }
  }
}

// m mantissa bits, the exponent bias and the largest value (the exponent width is in it).
MinifloatFormat minifloat(int m, int bias, double max_value, bool is_signed, bool saturating, bool inf_values,
                          RoundingMode rounding) {
  return MinifloatFormat{m, 1 - bias - m, max_value, is_signed, saturating, inf_values, rounding};
}

TEST(FloatQuant, VectorFormEqualsTheScalarFormBitForBit) {
  for (RoundingMode mode : {RoundingMode::kRound, RoundingMode::kCeil, RoundingMode::kFloor, RoundingMode::kRoundToZero,
                            RoundingMode::kDpu}) {
    for (const MinifloatFormat& f :
         {minifloat(3, 7, 448.0, true, true, false, mode), minifloat(2, 15, 57344.0, true, false, true, mode),
          minifloat(3, 7, 448.0, true, false, false, mode), minifloat(1, 1, 6.0, false, true, false, mode),
          minifloat(5, 20, 0.0009765625, true, true, false, mode)}) {
      expect_float_quant_vector_matches_scalar<float>(f);
      expect_float_quant_vector_matches_scalar<double>(f);
    }
  }
}

TEST(FloatQuant, HalfPrecisionAndExtremeBiasesTakeTheScalarForm) {
  const MinifloatFormat ocp = minifloat(3, 7, 448.0, true, true, false, RoundingMode::kRound);
  EXPECT_FALSE(vec_math::minifloat_vectorizes<c10::Half>(ocp));
  EXPECT_FALSE(vec_math::minifloat_vectorizes<c10::BFloat16>(ocp));
  // 2^(1 - 200 - 3) is no normal float: float lanes take the scalar form, double ones do not.
  const MinifloatFormat deep = minifloat(3, 200, 1.0, true, true, false, RoundingMode::kRound);
  EXPECT_FALSE(vec_math::minifloat_vectorizes<float>(deep));
  EXPECT_TRUE(vec_math::minifloat_vectorizes<double>(deep));
}

TEST(SymmetricQuant, ScalarFormFollowsItsDefinition) {
  using scalar_math::symmetric_quant;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // clamp(round_half_even(x / s), -127, 127) * s with s = 0.5.
  EXPECT_EQ(symmetric_quant(0.25, 0.5, 127.0), 0.0);  // 0.5 rounds to 0 (even)
  EXPECT_EQ(symmetric_quant(0.75, 0.5, 127.0), 1.0);  // 1.5 rounds to 2
  EXPECT_EQ(symmetric_quant(-0.75, 0.5, 127.0), -1.0);
  EXPECT_EQ(symmetric_quant(100.0, 0.5, 127.0), 63.5);  // saturates at 127 * s
  EXPECT_EQ(symmetric_quant(-inf, 0.5, 127.0), -63.5);
  EXPECT_TRUE(std::isnan(symmetric_quant(nan, 0.5, 127.0)));
  // A zero scale: +0, NaN kept.
  EXPECT_TRUE(same_bits(symmetric_quant(-3.0, 0.0, 127.0), 0.0));
  EXPECT_TRUE(std::isnan(symmetric_quant(nan, 0.0, 127.0)));
  // The clip window [-t, t]: the bound passes, NaN passes.
  EXPECT_EQ(scalar_math::clip_window_grad(2.0, 1.5, 1.5), 2.0);
  EXPECT_EQ(scalar_math::clip_window_grad(2.0, -1.5000001, 1.5), 0.0);
  EXPECT_EQ(scalar_math::clip_window_grad(2.0, nan, 1.5), 2.0);
}

TEST(Rounding, ScalarFormsFollowTheirDefinitions) {
  using scalar_math::round_as;
  // Half to even; DPU rounds negative ties up; round_to_zero keeps the sign of zero of sign().
  EXPECT_EQ(round_as<RoundingMode::kRound>(2.5), 2.0);
  EXPECT_EQ(round_as<RoundingMode::kRound>(-2.5), -2.0);
  EXPECT_EQ(round_as<RoundingMode::kRound>(3.5), 4.0);
  EXPECT_EQ(round_as<RoundingMode::kDpu>(-2.5), -2.0);
  EXPECT_EQ(round_as<RoundingMode::kDpu>(-3.5), -3.0);
  EXPECT_EQ(round_as<RoundingMode::kDpu>(3.5), 4.0);
  EXPECT_EQ(round_as<RoundingMode::kDpu>(2.5), 2.0);
  EXPECT_EQ(round_as<RoundingMode::kRoundToZero>(-2.7), -2.0);
  EXPECT_EQ(round_as<RoundingMode::kRoundToZero>(2.7), 2.0);
  EXPECT_TRUE(std::signbit(round_as<RoundingMode::kRoundToZero>(-0.3)));  // sign(-0.3) * floor(0.3) = -1 * 0
  EXPECT_EQ(round_as<RoundingMode::kCeil>(-0.5), -0.0);
  EXPECT_EQ(round_as<RoundingMode::kFloor>(-0.5), -1.0);
  EXPECT_EQ(scalar_math::sign(-0.0), 0.0);
  EXPECT_FALSE(std::signbit(scalar_math::sign(-0.0)));
  EXPECT_EQ(scalar_math::binary_sign(-0.0), 1.0);
  EXPECT_EQ(scalar_math::binary_sign(-1e-30), -1.0);
  EXPECT_TRUE(std::isnan(scalar_math::binary_sign(std::numeric_limits<double>::quiet_NaN())));
}

TEST(IntRange, BrevitasMaxIntMinInt) {
  for (int b = 1; b <= 32; ++b) {
    const double p = std::pow(2.0, b - 1), q = std::pow(2.0, b);
    EXPECT_EQ(max_int_value(b, true, false), p - 1) << b;
    EXPECT_EQ(min_int_value(b, true, false), -p) << b;
    EXPECT_EQ(min_int_value(b, true, true), -p + 1) << b;
    EXPECT_EQ(max_int_value(b, false, false), q - 1) << b;
    EXPECT_EQ(max_int_value(b, false, true), q - 2) << b;
    EXPECT_EQ(min_int_value(b, false, false), 0.0) << b;
    EXPECT_EQ(max_int_slope(b, true), p * std::log(2.0)) << b;
    EXPECT_EQ(min_int_slope(b, true), -p * std::log(2.0)) << b;
  }
  for (double bad : {0.0, 33.0, 4.5, -1.0, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_FALSE(is_valid_bit_width(bad)) << bad;
  }
}

TEST(IntRange, ReadFromTheBitWidthsMemoryInItsDtype) {
  // 5 bits, signed narrow: [-15, 15]; the bounds go through the bit width's dtype.
  const float f = 5.0f;
  const IntRange<float> r = int_range_of<float>(&f, c10::ScalarType::Float, true, true);
  EXPECT_TRUE(r.valid);
  EXPECT_EQ(r.lo, -15.0f);
  EXPECT_EQ(r.hi, 15.0f);
  // An unsigned 8-bit bit width stores min_int -15 as 241, as the composition in uint8 does.
  const uint8_t u = 5;
  const IntRange<float> ru = int_range_of<float>(&u, c10::ScalarType::Byte, true, true);
  EXPECT_EQ(ru.lo, 241.0f);
  EXPECT_EQ(ru.hi, 15.0f);
  // 32 bits in float16: 2^31 - 1 overflows to inf there.
  const c10::Half h(32.0f);
  const IntRange<float> rh = int_range_of<float>(&h, c10::ScalarType::Half, false, false);
  EXPECT_TRUE(std::isinf(rh.hi));
  const int64_t bad = 33;
  EXPECT_FALSE((int_range_of<double>(&bad, c10::ScalarType::Long, true, false).valid));
}

// The smallest normal of each dtype, written out: 2^-126 (float32, bfloat16), 2^-1022
// (float64), 2^-14 (float16); the scales int_quant and float_quant accept start there.
template <typename T>
void expect_normal_scale_bound(double smallest_normal, double smallest_subnormal) {
  using scalar_math::is_normal_scale;
  using scalar_math::normal_scale_or_nan;
  EXPECT_EQ(static_cast<double>(scalar_math::smallest_normal<T>()), smallest_normal);
  const T lo = static_cast<T>(smallest_normal);
  EXPECT_TRUE(is_normal_scale(lo));
  EXPECT_TRUE(same_bits(normal_scale_or_nan(lo), lo));
  for (double ok : {1.0, 0.1, 2.0 * smallest_normal, 60000.0}) EXPECT_TRUE(is_normal_scale(static_cast<T>(ok))) << ok;
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {smallest_normal / 2, smallest_normal / 4, smallest_subnormal, 0.0, -0.0, -1.0, -smallest_normal,
                     inf, -inf, std::numeric_limits<double>::quiet_NaN()}) {
    const T v = static_cast<T>(bad);
    EXPECT_FALSE(is_normal_scale(v)) << bad;
    EXPECT_TRUE(scalar_math::isnan_of(normal_scale_or_nan(v))) << bad;
  }
}

TEST(NormalScale, SmallestNormalOfEachDtype) {
  expect_normal_scale_bound<float>(std::ldexp(1.0, -126), std::ldexp(1.0, -149));
  expect_normal_scale_bound<double>(std::ldexp(1.0, -1022), std::ldexp(1.0, -1074));
  expect_normal_scale_bound<c10::Half>(std::ldexp(1.0, -14), std::ldexp(1.0, -24));
  expect_normal_scale_bound<c10::BFloat16>(std::ldexp(1.0, -126), std::ldexp(1.0, -133));
}

}  // namespace
}  // namespace brevitas_cpp
