// tensor_clamp_ste, scalar_clamp_ste, scalar_clamp_min_ste from C++ through the dispatcher.
#include "ops/clamp_ste.h"

#include "../test_utils.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

// Brevitas's tensor_clamp: where(x > max, max, x), then where(. < min, min, .), bounds cast to x's dtype.
at::Tensor ref_tensor_clamp(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val) {
  at::Tensor out = at::where(x > max_val, max_val.to(x.scalar_type()), x);
  return at::where(out < min_val, min_val.to(out.scalar_type()), out);
}

TEST(ClampSte, SchemasAreRegistered) {
  auto& d = c10::Dispatcher::singleton();
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::tensor_clamp_ste", "").schema()),
            "brevitas_cpp::tensor_clamp_ste(Tensor x, Tensor min_val, Tensor max_val) -> Tensor");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::scalar_clamp_ste", "").schema()),
            "brevitas_cpp::scalar_clamp_ste(Tensor x, float min_val, float max_val) -> Tensor");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::scalar_clamp_min_ste", "").schema()),
            "brevitas_cpp::scalar_clamp_min_ste(Tensor x, float min_val) -> Tensor");
}

TEST(ClampSte, TensorClampForward) {
  for (const auto dtype : test::float_dtypes()) {
    const at::Tensor x =
        test::values({-5., -2., -1.5, -0.0, 0.0, 1.5, 2., 5., test::inf(), -test::inf(), test::nan()}, dtype);
    const at::Tensor lo = test::values({-2.}, dtype), hi = test::values({1.5}, dtype);
    const at::Tensor y = ops::tensor_clamp_ste(x, lo, hi);
    EXPECT_TRUE(bitwise_equal(y, ref_tensor_clamp(x, lo, hi))) << dtype;
    EXPECT_TRUE(
        bitwise_equal(y, test::values({-2., -2., -1.5, -0.0, 0.0, 1.5, 1.5, 1.5, 1.5, -2., test::nan()}, dtype)))
        << dtype;
  }
  {  // TensorClampBoundsOfOtherDtypesAreCast
    const at::Tensor x = at::randn({4, 5}) * 10;
    for (const auto bdtype : {at::kInt, at::kLong, at::kDouble, at::kHalf, at::kByte}) {
      const at::Tensor lo = at::full({}, 1, at::TensorOptions().dtype(bdtype));
      const at::Tensor hi = at::full({1, 5}, 3, at::TensorOptions().dtype(bdtype));
      const at::Tensor y = ops::tensor_clamp_ste(x, lo, hi);
      EXPECT_EQ(y.scalar_type(), at::kFloat);
      EXPECT_TRUE(bitwise_equal(y, ref_tensor_clamp(x, lo, hi))) << bdtype;
    }
    // A bound not representable in x's dtype is cast first (max_val.type_as(x)).
    const at::Tensor xh = test::values({2047., 2049., 2050.}, at::kHalf);
    const at::Tensor hi = test::values({2049.}, at::kFloat);
    EXPECT_TRUE(bitwise_equal(ops::tensor_clamp_ste(xh, test::values({0.}, at::kFloat), hi),
                              ref_tensor_clamp(xh, test::values({0.}, at::kFloat), hi)));
  }
  {  // TensorClampPerChannelBounds
    const at::Tensor x = at::randn({3, 4, 5, 6}) * 3;
    const at::Tensor x_cl = x.contiguous(at::MemoryFormat::ChannelsLast);
    const at::Tensor lo0 = -at::rand({3, 1, 1, 1}), hi0 = at::rand({3, 1, 1, 1});  // per output channel
    const at::Tensor lo1 = -at::rand({1, 4, 1, 1}), hi1 = at::rand({1, 4, 1, 1});  // per input channel
    const at::Tensor lo3 = -at::rand({6}), hi3 = at::rand({6});                    // last dim
    for (const auto& xx : {x, x_cl, x.transpose(1, 3)}) {
      for (const auto& [lo, hi] : {std::pair{lo0, hi0}, std::pair{lo1, hi1}}) {
        if (lo.size(1) != 1 && lo.size(1) != xx.size(1)) continue;
        const at::Tensor y = ops::tensor_clamp_ste(xx, lo, hi);
        EXPECT_EQ(y.strides(), xx.strides());
        EXPECT_TRUE(bitwise_equal(y, ref_tensor_clamp(xx, lo, hi)));
      }
      if (xx.size(3) == 6)
        EXPECT_TRUE(bitwise_equal(ops::tensor_clamp_ste(xx, lo3, hi3), ref_tensor_clamp(xx, lo3, hi3)));
    }
    // min per channel, max per tensor; min > max somewhere: the max applies first, then the min.
    const at::Tensor lo = at::full({3, 1, 1, 1}, 0.5), hi = at::zeros({});
    EXPECT_TRUE(bitwise_equal(ops::tensor_clamp_ste(x, lo, hi), ref_tensor_clamp(x, lo, hi)));
  }
}

TEST(ClampSte, TensorClampBackwardStraightThroughNoGradToBounds) {
  const at::Tensor x0 = at::randn({3, 4}) * 3;
  const at::Tensor g = at::randn({3, 4});
  at::Tensor x = test::leaf(x0);
  at::Tensor lo = test::leaf(-at::rand({3, 1})), hi = test::leaf(at::rand({1, 4}));
  at::Tensor y = ops::tensor_clamp_ste(x, lo, hi);
  ASSERT_TRUE(y.requires_grad());
  const auto gr = test::grads(y, {x, lo, hi}, g);
  EXPECT_TRUE(bitwise_equal(gr[0], g));
  EXPECT_FALSE(gr[1].defined());  // None for min_val
  EXPECT_FALSE(gr[2].defined());  // None for max_val
  // Same as the composition x + (tensor_clamp(x, lo, hi) - x).detach().
  at::Tensor xr = test::leaf(x0);
  test::ste(xr, ref_tensor_clamp(xr, lo.detach(), hi.detach())).backward(g);
  EXPECT_TRUE(bitwise_equal(gr[0], xr.grad()));
}

TEST(ClampSte, ScalarClampForwardAndBackward) {
  for (const auto dtype : test::float_dtypes()) {
    const at::Tensor x0 = test::values({-3., -1., -0.0, 0.25, 1., 3., test::inf(), test::nan()}, dtype);
    EXPECT_TRUE(bitwise_equal(ops::scalar_clamp_ste(x0, -1.0, 0.75), at::clamp(x0, -1.0, 0.75))) << dtype;
    EXPECT_TRUE(bitwise_equal(ops::scalar_clamp_min_ste(x0, -0.5), at::clamp_min(x0, -0.5))) << dtype;
    EXPECT_TRUE(at::isnan(ops::scalar_clamp_ste(x0, -1.0, 0.75)[7]).item<bool>());
    EXPECT_TRUE(at::isnan(ops::scalar_clamp_min_ste(x0, -0.5)[7]).item<bool>());
    // Bounds not representable in the dtype round the way torch.clamp does.
    EXPECT_TRUE(bitwise_equal(ops::scalar_clamp_ste(x0, -0.1, 0.3), at::clamp(x0, -0.1, 0.3))) << dtype;

    const at::Tensor g = test::values({1., 2., 3., 4., 5., 6., 7., 8.}, dtype);
    at::Tensor x = test::leaf(x0);
    EXPECT_TRUE(bitwise_equal(test::grads(ops::scalar_clamp_ste(x, -1.0, 0.75), {x}, g)[0], g));
    EXPECT_TRUE(bitwise_equal(test::grads(ops::scalar_clamp_min_ste(x, 0.0), {x}, g)[0], g));
  }
  // Equal bounds are accepted.
  EXPECT_TRUE(bitwise_equal(ops::scalar_clamp_ste(test::values({-1., 2.}), 1.0, 1.0), test::values({1., 1.})));
}

TEST(ClampSte, LayoutEmptyAndMeta) {
  const at::Tensor cl = at::randn({2, 3, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast);
  EXPECT_EQ(ops::scalar_clamp_ste(cl, -0.5, 0.5).strides(), cl.strides());
  EXPECT_EQ(ops::scalar_clamp_min_ste(cl, 0.).strides(), cl.strides());
  EXPECT_EQ(ops::tensor_clamp_ste(cl, at::zeros({}), at::ones({})).strides(), cl.strides());
  EXPECT_EQ(ops::tensor_clamp_ste(at::empty({0, 3}), at::zeros({3}), at::ones({3})).sizes(),
            (std::vector<int64_t>{0, 3}));
  const at::Tensor m =
      at::empty({2, 3, 4, 5}, at::TensorOptions().device(at::kMeta)).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor mb = at::empty({1, 3, 1, 1}, at::TensorOptions().device(at::kMeta));
  for (const auto& y :
       {ops::tensor_clamp_ste(m, mb, mb), ops::scalar_clamp_ste(m, 0., 1.), ops::scalar_clamp_min_ste(m, 0.)}) {
    EXPECT_TRUE(y.is_meta());
    EXPECT_EQ(y.sizes(), m.sizes());
    EXPECT_EQ(y.strides(), m.strides());
  }
}

TEST(ClampSte, BadInputsNameTheArgument) {
  const at::Tensor x = at::randn({2, 5});
  EXPECT_ERROR_CONTAINS(ops::scalar_clamp_ste(x, 2.0, 1.0), "brevitas_cpp::scalar_clamp_ste",
                        "min_val (2) must be <= max_val (1)");
  EXPECT_ERROR_CONTAINS(ops::scalar_clamp_ste(x, test::nan(), 1.0), "min_val");
  EXPECT_ERROR_CONTAINS(ops::scalar_clamp_ste(x, 0.0, test::nan()), "max_val");
  EXPECT_ERROR_CONTAINS(ops::scalar_clamp_min_ste(x, test::nan()), "brevitas_cpp::scalar_clamp_min_ste", "min_val");
  EXPECT_ERROR_CONTAINS(ops::scalar_clamp_ste(at::arange(4), 0.0, 1.0), "x must be a floating-point");
  EXPECT_ERROR_CONTAINS(ops::tensor_clamp_ste(at::arange(4), at::zeros({}), at::ones({})), "x must be");
  EXPECT_ERROR_CONTAINS(ops::tensor_clamp_ste(x, at::zeros({3}), at::ones({})), "brevitas_cpp::tensor_clamp_ste",
                        "min_val of shape [3] does not broadcast to x of shape [2, 5]");
  // Broadcasting must not expand x.
  EXPECT_ERROR_CONTAINS(ops::tensor_clamp_ste(x, at::zeros({}), at::ones({3, 2, 5})), "max_val of shape [3, 2, 5]");
  EXPECT_ERROR_CONTAINS(ops::tensor_clamp_ste(x, at::zeros({}, at::kBool), at::ones({})), "min_val", "Bool");
  // A bound on another device.
  EXPECT_THROW(ops::tensor_clamp_ste(x, at::zeros({}, at::TensorOptions().device(at::kMeta)), at::ones({})),
               c10::Error);
}

}  // namespace
}  // namespace brevitas_cpp
