// The scale checks of csrc/ops/common/checks.h: which values each range accepts in every
// floating dtype (the bounds written out here) and what the message names.
#include "ops/common/checks.h"

#include "../../test_utils.h"

#include <cmath>

namespace brevitas_cpp {
namespace {

using test::inf;
using test::nan;
using test::values;

struct DtypeBound {
  at::ScalarType dtype;
  double smallest_normal, smallest_subnormal;
  const char* message;  // how normal_scale_range names the bound
};

const std::vector<DtypeBound>& bounds() {
  static const std::vector<DtypeBound> b{
      {at::kFloat, std::ldexp(1.0, -126), std::ldexp(1.0, -149), "(>= 1.17549e-38 for float32)"},
      {at::kDouble, std::ldexp(1.0, -1022), std::ldexp(1.0, -1074), "(>= 2.22507e-308 for float64)"},
      {at::kHalf, std::ldexp(1.0, -14), std::ldexp(1.0, -24), "(>= 6.10352e-05 for float16)"},
      {at::kBFloat16, std::ldexp(1.0, -126), std::ldexp(1.0, -133), "(>= 1.17549e-38 for bfloat16)"},
  };
  return b;
}

TEST(CheckScale, NormalRangeStartsAtTheSmallestNormal) {
  for (const DtypeBound& d : bounds()) {
    EXPECT_EQ(normal_scale_range(d.dtype), std::string("a normal positive finite number ") + d.message);
    check_scale(values({d.smallest_normal, 1.0, 0.25}, d.dtype), ScaleRange::kNormal, "op");
    for (double bad : {d.smallest_normal / 2, d.smallest_subnormal, 0.0, -1.0, inf(), nan()}) {
      const at::Tensor scale = values({1.0, bad}, d.dtype);
      EXPECT_ERROR_CONTAINS(check_scale(scale, ScaleRange::kNormal, "some_op"),
                            "brevitas_cpp::some_op: scale must be a normal positive finite number", d.message,
                            "at flat index 1 (of shape [2])");
    }
  }
}

TEST(CheckScale, PositiveRangeTakesSubnormals) {
  for (const DtypeBound& d : bounds()) {
    check_scale(values({d.smallest_subnormal, d.smallest_normal / 4, 3.0}, d.dtype), ScaleRange::kPositive, "op");
    for (double bad : {0.0, -0.0, -d.smallest_subnormal, inf(), nan()}) {
      EXPECT_ERROR_CONTAINS(check_scale(values({bad}, d.dtype), ScaleRange::kPositive, "some_op"),
                            "brevitas_cpp::some_op: scale must be positive and finite, got");
    }
  }
}

TEST(CheckScale, MessageGivesTheValue) {
  // 1e-40 is a float32 subnormal (stored as 9.99995e-41).
  EXPECT_ERROR_CONTAINS(check_scale(at::full({}, 1e-40), ScaleRange::kNormal, "float_quant"),
                        "brevitas_cpp::float_quant: scale must be a normal positive finite number (>= 1.17549e-38 "
                        "for float32), got 9.99995e-41 at flat index 0 (of shape [])");
}

TEST(CheckScale, DeviceValuesAreLeftToTheDeviceKernels) {
  // Meta tensors hold no values: nothing is read (the CUDA kernels give NaN instead).
  check_scale(at::zeros({2}, at::TensorOptions().device(at::kMeta)), ScaleRange::kNormal, "op");
}

}  // namespace
}  // namespace brevitas_cpp
