// float_quant (+ _float_quant_backward) from C++ through the dispatcher: OCP e4m3 (bias 7, largest
// value 448) values worked out by hand from its bit fields, and the straight-through gradient.
#include "ops/float_quant.h"

#include "../test_utils.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <cmath>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

TEST(FloatQuant, SchemasAreRegistered) {
  auto& d = c10::Dispatcher::singleton();
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::float_quant", "").schema()),
            "brevitas_cpp::float_quant(Tensor x, Tensor scale, int exponent_bit_width, int mantissa_bit_width, "
            "int exponent_bias, float max_value, bool signed=True, bool saturating=True, bool inf_values=False, "
            "bool nan_values=False, str rounding_mode=\"round\") -> Tensor");
}

TEST(FloatQuant, OcpE4m3ByHand) {
  // [1, 2) has step 1/8: 1.0625 and 1.1875 are ties, to the even mantissa (1.0 and 1.25); the
  // subnormals are k * 2^-9, so 1.5 * 2^-9 ties to 2 * 2^-9; beyond 448 saturates; inf is NaN.
  const double s9 = std::ldexp(1.0, -9);
  const at::Tensor x =
      test::values({1.0625, 1.1875, -1.3, 1.5 * s9, 500.0, -1e6, 0.0, test::inf(), test::nan(), 240.0, 250.0});
  const at::Tensor y = ops::float_quant(x, at::full({}, 1.0), 4, 3, 7, 448.0, true, true, false, false, "round");
  EXPECT_TRUE(bitwise_equal(
      y, test::values({1.0, 1.25, -1.25, 2 * s9, 448.0, -448.0, 0.0, test::nan(), test::nan(), 240.0, 256.0})));
  // With a scale: the grid of x / 0.5, times 0.5.
  const at::Tensor y2 =
      ops::float_quant(test::values({0.53125}), at::full({}, 0.5), 4, 3, 7, 448.0, true, true, false, false, "round");
  EXPECT_TRUE(bitwise_equal(y2, test::values({0.5})));  // 1.0625 -> 1.0, times 0.5
}

TEST(FloatQuant, StraightThroughGradient) {
  // dy/dx = 1 + I sign(u) / |u| (round(u / I) - u / I), I = 2^(floor(log2|u|) - 3); 0 beyond 448.
  const at::Tensor x = test::leaf(test::values({1.3, 500.0}, at::kDouble));
  const at::Tensor y =
      ops::float_quant(x, at::full({}, 1.0, at::kDouble), 4, 3, 7, 448.0, true, true, false, false, "round");
  const at::Tensor g = test::grads(y, {x}, at::ones({2}, at::kDouble))[0];
  const double i = 0.125, u = 1.3, v = u / i;
  EXPECT_NEAR(g[0].item<double>(), 1 + i / u * (std::nearbyint(v) - v), 1e-15);
  EXPECT_EQ(g[1].item<double>(), 0.0);
}

TEST(FloatQuant, BadInputNamesTheArgument) {
  const at::Tensor x = at::randn({3});
  EXPECT_THROW(ops::float_quant(x, at::full({}, 1.0), 4, 0, 7, 448.0, true, true, false, false, "round"), c10::Error);
  EXPECT_THROW(ops::float_quant(x, at::full({}, 1.0), 4, 3, 7, 481.0, true, true, false, false, "round"), c10::Error);
  EXPECT_THROW(ops::float_quant(x, at::full({}, 1.0), 4, 3, 7, 448.0, true, false, false, false, "round"), c10::Error);
}

}  // namespace
}  // namespace brevitas_cpp
