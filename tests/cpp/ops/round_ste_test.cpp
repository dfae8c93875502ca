// round_ste, ceil_ste, floor_ste, round_to_zero_ste, dpu_round_ste called from C++ through the
// dispatcher: forward equals the ATen composition of the contract bit for bit (ties, signed
// zeros, inf, NaN, every float dtype); backward passes the gradient unchanged.
#include "ops/round_ste.h"

#include "../test_utils.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <string>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

struct RoundCase {
  std::string name;
  std::function<at::Tensor(const at::Tensor&)> op;   // ours, through the dispatcher
  std::function<at::Tensor(const at::Tensor&)> ref;  // the contract's ATen composition
};

std::vector<RoundCase> round_cases() {
  return {
      {"round_ste", ops::round_ste, [](const at::Tensor& x) { return at::round(x); }},
      {"ceil_ste", ops::ceil_ste, [](const at::Tensor& x) { return at::ceil(x); }},
      {"floor_ste", ops::floor_ste, [](const at::Tensor& x) { return at::floor(x); }},
      {"round_to_zero_ste", ops::round_to_zero_ste,
       // torch.sign(x) * torch.floor(torch.abs(x)); sign(NaN) is 0 in ATen but floor(|NaN|) is NaN.
       [](const at::Tensor& x) { return at::sign(x) * at::floor(at::abs(x)); }},
      {"dpu_round_ste", ops::dpu_round_ste,
       [](const at::Tensor& x) { return at::where((x < 0.) & (x - at::floor(x) == 0.5), at::ceil(x), at::round(x)); }},
  };
}

TEST(RoundSte, SchemasAreRegistered) {
  for (const auto& c : round_cases()) {
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(("brevitas_cpp::" + c.name).c_str(), "");
    EXPECT_EQ(c10::str(op.schema()), "brevitas_cpp::" + c.name + "(Tensor x) -> Tensor");
    EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::CPU)) << c.name;
    EXPECT_TRUE(op.hasKernelForDispatchKey(c10::DispatchKey::Meta)) << c.name;
  }
}

TEST(RoundSte, Forward) {
  for (const auto dtype : test::float_dtypes()) {
    const at::Tensor x = test::values(test::tie_values(), dtype);
    for (const auto& c : round_cases()) {
      const at::Tensor y = c.op(x);
      EXPECT_TRUE(bitwise_equal(y, c.ref(x))) << c.name << " " << dtype;
      EXPECT_FALSE(y.requires_grad());
    }
  }
  {  // TiesSpelledOut
    // x:                 -2.5  -1.5  -0.5   0.5  1.5  2.5
    const at::Tensor x = test::values({-2.5, -1.5, -0.5, 0.5, 1.5, 2.5});
    EXPECT_TRUE(bitwise_equal(ops::round_ste(x), test::values({-2., -2., -0., 0., 2., 2.})));      // half to even
    EXPECT_TRUE(bitwise_equal(ops::dpu_round_ste(x), test::values({-2., -1., -0., 0., 2., 2.})));  // negative .5 up
    EXPECT_TRUE(bitwise_equal(ops::ceil_ste(x), test::values({-2., -1., -0., 1., 2., 3.})));
    EXPECT_TRUE(bitwise_equal(ops::floor_ste(x), test::values({-3., -2., -1., 0., 1., 2.})));
    EXPECT_TRUE(bitwise_equal(ops::round_to_zero_ste(x), test::values({-2., -1., -0., 0., 1., 2.})));
  }
  {  // NaNPropagates
    for (const auto dtype : test::float_dtypes()) {
      const at::Tensor x = test::values({test::nan(), 1.5, -test::nan()}, dtype);
      for (const auto& c : round_cases()) {
        const at::Tensor y = c.op(x);
        EXPECT_TRUE(at::isnan(y[0]).item<bool>()) << c.name << " " << dtype;
        EXPECT_TRUE(at::isnan(y[2]).item<bool>()) << c.name << " " << dtype;
      }
    }
  }
}

TEST(RoundSte, Backward) {
  for (const auto dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
    const at::Tensor x0 = (at::randn({3, 4, 5}, at::TensorOptions().dtype(at::kDouble)) * 4).to(dtype);
    const at::Tensor g = at::randn({3, 4, 5}, at::TensorOptions().dtype(at::kDouble)).to(dtype);
    for (const auto& c : round_cases()) {
      at::Tensor x = test::leaf(x0);
      at::Tensor y = c.op(x);
      ASSERT_TRUE(y.requires_grad()) << c.name;
      y.backward(g);
      at::Tensor xr = test::leaf(x0);
      test::ste(xr, c.ref(xr)).backward(g);
      EXPECT_TRUE(bitwise_equal(x.grad(), xr.grad())) << c.name << " " << dtype;
      EXPECT_TRUE(bitwise_equal(x.grad(), g)) << c.name << " " << dtype;
    }
  }
  {  // BackwardThroughAutogradGrad
    at::Tensor x = test::leaf(test::values({-2.5, -0.5, 0.5, 7.25}, at::kDouble));
    const at::Tensor g = test::values({1., 2., 3., 4.}, at::kDouble);
    auto gx = test::grads(ops::round_ste(x) * 2, {x}, g);
    EXPECT_TRUE(bitwise_equal(gx[0], g * 2));
  }
  {  // NoGradModeBuildsNoGraph
    at::Tensor x = test::leaf(at::randn({8}));
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(ops::round_ste(x).requires_grad());
  }
}

TEST(RoundSte, LayoutEmptyScalarAndMeta) {
  const at::Tensor cl = (at::randn({2, 3, 4, 5}) * 3).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor transposed = (at::randn({6, 7}) * 3).t();
  const at::Tensor sliced = (at::randn({6, 8}) * 3).slice(1, 0, 8, 2);  // not dense
  for (const auto& c : round_cases()) {
    at::Tensor y = c.op(cl);
    EXPECT_EQ(y.strides(), cl.strides()) << c.name;
    EXPECT_TRUE(bitwise_equal(y, c.ref(cl))) << c.name;
    y = c.op(transposed);
    EXPECT_EQ(y.strides(), transposed.strides()) << c.name;
    EXPECT_TRUE(bitwise_equal(y, c.ref(transposed))) << c.name;
    EXPECT_TRUE(bitwise_equal(c.op(sliced), c.ref(sliced))) << c.name;
  }
  {  // EmptyAndScalarInputs
    for (const auto& c : round_cases()) {
      const at::Tensor e = at::empty({0, 3});
      const at::Tensor y = c.op(e);
      EXPECT_EQ(y.sizes(), e.sizes()) << c.name;
      const at::Tensor s = at::full({}, -1.5);
      EXPECT_TRUE(bitwise_equal(c.op(s), c.ref(s))) << c.name;
    }
  }
  {  // MetaKernelGivesShapeAndStrides
    const at::Tensor x =
        at::empty({2, 3, 4, 5}, at::TensorOptions().device(at::kMeta)).contiguous(at::MemoryFormat::ChannelsLast);
    for (const auto& c : round_cases()) {
      const at::Tensor y = c.op(x);
      EXPECT_TRUE(y.is_meta()) << c.name;
      EXPECT_EQ(y.sizes(), x.sizes()) << c.name;
      EXPECT_EQ(y.strides(), x.strides()) << c.name;
    }
  }
}

TEST(RoundSte, IntegerInputIsRejectedNamingX) {
  for (const auto& c : round_cases()) {
    const at::Tensor xi = at::arange(4, at::kInt);
    EXPECT_ERROR_CONTAINS(c.op(xi), "brevitas_cpp::" + c.name, "x must be a floating-point tensor", "Int");
    EXPECT_ERROR_CONTAINS(c.op(at::ones({2}, at::kBool)), "x must be a floating-point tensor");
  }
}

}  // namespace
}  // namespace brevitas_cpp
