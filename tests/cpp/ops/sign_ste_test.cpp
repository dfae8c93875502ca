// binary_sign_ste, ternary_sign_ste, abs_binary_sign_grad (+ its backward op) from C++
// through the dispatcher, against the contract's formulas written with ATen ops.
#include "ops/sign_ste.h"

#include "../test_utils.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

// +1 for x >= 0 (including -0.0), -1 for x < 0, NaN kept (the contract's deliberate NaN rule).
at::Tensor ref_binary_sign(const at::Tensor& x) {
  const at::Tensor one = at::ones({}, x.options()), minus_one = -one;
  return at::where(at::isnan(x), x, at::where(x >= 0, one, minus_one));
}

// torch.sign(x) with sign(+-0) = +0 (adding +0 turns -0 into +0), NaN kept (torch.sign(NaN) is 0).
at::Tensor ref_ternary_sign(const at::Tensor& x) {
  return at::where(at::isnan(x), x, at::sign(x) + 0.0);
}

TEST(SignSte, SchemasAreRegistered) {
  auto& d = c10::Dispatcher::singleton();
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::binary_sign_ste", "").schema()),
            "brevitas_cpp::binary_sign_ste(Tensor x) -> Tensor");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::ternary_sign_ste", "").schema()),
            "brevitas_cpp::ternary_sign_ste(Tensor x) -> Tensor");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::abs_binary_sign_grad", "").schema()),
            "brevitas_cpp::abs_binary_sign_grad(Tensor x) -> Tensor");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::_abs_binary_sign_grad_backward", "").schema()),
            "brevitas_cpp::_abs_binary_sign_grad_backward(Tensor grad, Tensor x) -> Tensor");
}

TEST(SignSte, Forward) {
  const at::Tensor x = test::values({-2., -1e-30, -0.0, 0.0, 1e-30, 3., test::inf(), -test::inf(), test::nan()});
  const at::Tensor y = ops::binary_sign_ste(x);
  EXPECT_TRUE(bitwise_equal(y, test::values({-1., -1., 1., 1., 1., 1., 1., -1., test::nan()})));
  {  // TernarySignForwardSpelledOut
    const at::Tensor x = test::values({-2., -1e-30, -0.0, 0.0, 1e-30, 3., test::inf(), -test::inf(), test::nan()});
    const at::Tensor y = ops::ternary_sign_ste(x);
    // sign(-0.0) is +0.0 bit for bit.
    EXPECT_TRUE(bitwise_equal(y, test::values({-1., -1., 0., 0., 1., 1., 1., -1., test::nan()})));
  }
  {  // ForwardEveryDtypeAgainstReference
    for (const auto dtype : test::float_dtypes()) {
      const at::Tensor x = test::values(test::tie_values(), dtype);
      EXPECT_TRUE(bitwise_equal(ops::binary_sign_ste(x), ref_binary_sign(x))) << dtype;
      EXPECT_TRUE(bitwise_equal(ops::ternary_sign_ste(x), ref_ternary_sign(x))) << dtype;
      EXPECT_TRUE(bitwise_equal(ops::abs_binary_sign_grad(x), at::abs(x))) << dtype;
    }
  }
  {  // NaNPropagatesEveryDtype
    for (const auto dtype : test::float_dtypes()) {
      const at::Tensor x = test::values({test::nan(), -test::nan(), 1.0}, dtype);
      for (const auto& y : {ops::binary_sign_ste(x), ops::ternary_sign_ste(x), ops::abs_binary_sign_grad(x)}) {
        EXPECT_TRUE(at::isnan(y.slice(0, 0, 2)).all().item<bool>()) << dtype << "\n" << y;
        EXPECT_EQ(y[2].item<double>(), 1.0);
      }
    }
  }
}

TEST(SignSte, SignBackwardIsIdentityLikeComposition) {
  for (const auto dtype : test::float_dtypes()) {
    const at::Tensor x0 = at::randn({4, 6}, at::TensorOptions().dtype(at::kDouble)).to(dtype);
    const at::Tensor g = at::randn({4, 6}, at::TensorOptions().dtype(at::kDouble)).to(dtype);
    for (int which = 0; which < 2; ++which) {
      at::Tensor x = test::leaf(x0), xr = test::leaf(x0);
      at::Tensor y = which == 0 ? ops::binary_sign_ste(x) : ops::ternary_sign_ste(x);
      at::Tensor yr = test::ste(xr, which == 0 ? ref_binary_sign(xr) : ref_ternary_sign(xr));
      EXPECT_TRUE(bitwise_equal(y, yr.detach())) << which << " " << dtype;
      y.backward(g);
      yr.backward(g);
      EXPECT_TRUE(bitwise_equal(x.grad(), xr.grad())) << which << " " << dtype;
      EXPECT_TRUE(bitwise_equal(x.grad(), g)) << which << " " << dtype;
    }
  }
}

TEST(SignSte, AbsBinarySignGradBackward) {
  for (const auto dtype : test::float_dtypes()) {
    const at::Tensor x0 = test::values({-2., -0.5, -0.0, 0.0, 0.5, 2.}, dtype);
    const at::Tensor g = test::values({1., 2., 3., 4., 5., 6.}, dtype);
    at::Tensor x = test::leaf(x0);
    at::Tensor y = ops::abs_binary_sign_grad(x);
    EXPECT_TRUE(bitwise_equal(y.detach(), at::abs(x0)));
    const auto gx = test::grads(y, {x}, g)[0];
    // grad * binary_sign(x): +1 at both zeros, unlike the gradient of |x| (0 there).
    const at::Tensor expected = g * test::values({-1., -1., 1., 1., 1., 1.}, dtype);
    EXPECT_TRUE(bitwise_equal(gx, expected)) << dtype;
    // The backward op directly.
    EXPECT_TRUE(bitwise_equal(ops::_abs_binary_sign_grad_backward(g, x0), expected)) << dtype;
  }
  {  // AbsBinarySignGradBackwardOpIsNotDifferentiable
    at::Tensor g = test::leaf(at::randn({5}));
    const at::Tensor x = at::randn({5});
    at::Tensor gx = ops::_abs_binary_sign_grad_backward(g, x);
    EXPECT_THROW(gx.sum().backward(), c10::Error);
  }
}

TEST(SignSte, LayoutEmptyAndMeta) {
  const at::Tensor cl = at::randn({2, 3, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor perm = at::randn({3, 4, 5}).permute({2, 0, 1});
  for (const auto& x : {cl, perm}) {
    for (const auto& y : {ops::binary_sign_ste(x), ops::ternary_sign_ste(x), ops::abs_binary_sign_grad(x)}) {
      EXPECT_EQ(y.strides(), x.strides());
    }
    EXPECT_TRUE(bitwise_equal(ops::binary_sign_ste(x), ref_binary_sign(x)));
    EXPECT_TRUE(bitwise_equal(ops::ternary_sign_ste(x), ref_ternary_sign(x)));
    const at::Tensor g = at::randn(x.sizes());
    EXPECT_EQ(ops::_abs_binary_sign_grad_backward(g, x).strides(), x.strides());
  }
  {  // EmptyAndMeta
    EXPECT_EQ(ops::binary_sign_ste(at::empty({0, 4})).sizes(), (std::vector<int64_t>{0, 4}));
    EXPECT_EQ(ops::ternary_sign_ste(at::empty({3, 0})).sizes(), (std::vector<int64_t>{3, 0}));
    const at::Tensor m = at::empty({2, 3}, at::TensorOptions().device(at::kMeta));
    const at::Tensor y = ops::abs_binary_sign_grad(m);
    EXPECT_TRUE(y.is_meta());
    EXPECT_EQ(y.sizes(), m.sizes());
    EXPECT_TRUE(ops::_abs_binary_sign_grad_backward(m, m).is_meta());
  }
}

TEST(SignSte, BadInputsNameTheArgument) {
  const at::Tensor xi = at::arange(3);  // int64
  EXPECT_ERROR_CONTAINS(ops::binary_sign_ste(xi), "brevitas_cpp::binary_sign_ste", "x must be a floating-point");
  EXPECT_ERROR_CONTAINS(ops::ternary_sign_ste(xi), "brevitas_cpp::ternary_sign_ste", "x must be a floating-point");
  EXPECT_ERROR_CONTAINS(ops::abs_binary_sign_grad(xi), "brevitas_cpp::abs_binary_sign_grad", "x must be");
  const at::Tensor x = at::randn({2, 3});
  EXPECT_ERROR_CONTAINS(ops::_abs_binary_sign_grad_backward(at::randn({3, 2}), x), "grad of shape [3, 2]", "[2, 3]");
  EXPECT_ERROR_CONTAINS(ops::_abs_binary_sign_grad_backward(x.to(at::kDouble), x), "grad must have the dtype of x");
}

}  // namespace
}  // namespace brevitas_cpp
