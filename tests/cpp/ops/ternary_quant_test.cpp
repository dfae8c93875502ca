// ternary_quant (+ _ternary_quant_backward) from C++ through the dispatcher:
//   mask = x.abs() > threshold * scale;  y = (mask.to(x.dtype) * ternary_sign_ste(x)) * scale
#include "ops/ternary_quant.h"

#include "../test_utils.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

at::Tensor ref_ternary_quant(const at::Tensor& x, const at::Tensor& s, double threshold, bool ste) {
  const at::Tensor mask = at::abs(x) > s * threshold;
  // torch.sign with NaN kept (the contract's NaN rule; torch.sign(NaN) is 0).
  const at::Tensor sign = at::where(at::isnan(x), x, at::sign(x));
  const at::Tensor ts = ste ? test::ste(x, sign) : sign;
  return (mask.to(x.scalar_type()) * ts) * s;
}

TEST(TernaryQuant, SchemasAreRegistered) {
  auto& d = c10::Dispatcher::singleton();
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::ternary_quant", "").schema()),
            "brevitas_cpp::ternary_quant(Tensor x, Tensor scale, float threshold) -> Tensor");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::_ternary_quant_backward", "").schema()),
            "brevitas_cpp::_ternary_quant_backward(Tensor grad, Tensor x, Tensor scale, float threshold, "
            "bool[2] output_mask) -> (Tensor, Tensor)");
}

TEST(TernaryQuant, Forward) {
  // scale 2, threshold 0.25: |x| must exceed 0.5 exactly.
  const at::Tensor x = test::values({-1., -0.5, -0.25, -0.0, 0.0, 0.5, 0.50001, 3., test::nan()});
  const at::Tensor y = ops::ternary_quant(x, at::full({}, 2.), 0.25);
  EXPECT_TRUE(bitwise_equal(y, test::values({-2., -0., -0., 0., 0., 0., 2., 2., test::nan()})));
  EXPECT_TRUE(bitwise_equal(y, ref_ternary_quant(x, at::full({}, 2.), 0.25, false)));
  // threshold 0: every nonzero x maps to +-scale.
  EXPECT_TRUE(
      bitwise_equal(ops::ternary_quant(x, at::full({}, 2.), 0.0), ref_ternary_quant(x, at::full({}, 2.), 0.0, false)));
  {  // ForwardEveryDtypePerTensorAndPerChannel
    for (const auto dtype : test::float_dtypes()) {
      const auto o = at::TensorOptions().dtype(dtype);
      const at::Tensor x = (at::randn({4, 3, 2, 5}, at::kDouble)).to(dtype);
      const at::Tensor specials = test::values(test::tie_values(), dtype);
      for (const double thr : {0.0, 0.1, 0.5, 0.7, 2.0}) {
        for (const auto& s : {at::full({}, 0.6, o), at::rand({4, 1, 1, 1}, o).add(0.1),
                              at::rand({1, 3, 1, 1}, o).add(0.1), at::rand({5}, o).add(0.1)}) {
          for (const auto& xx :
               {x, x.contiguous(at::MemoryFormat::ChannelsLast), x.transpose(0, 2).contiguous().transpose(0, 2)}) {
            const at::Tensor y = ops::ternary_quant(xx, s, thr);
            EXPECT_EQ(y.strides(), xx.strides());
            EXPECT_TRUE(bitwise_equal(y, ref_ternary_quant(xx, s, thr, false)))
                << dtype << " thr " << thr << " scale " << s.sizes() << " strides " << xx.strides();
          }
        }
        const at::Tensor s = at::full({}, 1.0, o);
        EXPECT_TRUE(bitwise_equal(ops::ternary_quant(specials, s, thr), ref_ternary_quant(specials, s, thr, false)))
            << dtype << " thr " << thr;
      }
    }
  }
  {  // NaNPropagates
    for (const auto dtype : test::float_dtypes()) {
      const at::Tensor x = test::values({test::nan(), -test::nan(), 2.0, 0.1}, dtype);
      const at::Tensor y = ops::ternary_quant(x, at::ones({}, at::TensorOptions().dtype(dtype)), 0.5);
      EXPECT_TRUE(at::isnan(y.slice(0, 0, 2)).all().item<bool>()) << dtype << y;
      EXPECT_EQ(y[2].item<double>(), 1.0);
      EXPECT_EQ(y[3].item<double>(), 0.0);
    }
  }
}

TEST(TernaryQuant, BackwardMatchesCompositionAutograd) {
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    const auto o = at::TensorOptions().dtype(dtype);
    const at::Tensor x0 = at::randn({6, 4, 3}, at::kDouble).to(dtype);
    const at::Tensor g = at::randn({6, 4, 3}, at::kDouble).to(dtype);
    for (const double thr : {0.0, 0.5, 0.9}) {
      for (const auto& s0 : {at::full({}, 0.8, o), at::rand({6, 1, 1}, o).add(0.2), at::rand({1, 4, 1}, o).add(0.2)}) {
        for (const bool scale_grad : {false, true}) {
          at::Tensor x = test::leaf(x0), s = test::leaf(s0, scale_grad);
          at::Tensor xr = test::leaf(x0), sr = test::leaf(s0, scale_grad);
          std::vector<at::Tensor> in{x}, in_r{xr};
          if (scale_grad) in.push_back(s), in_r.push_back(sr);
          const auto got = test::grads(ops::ternary_quant(x, s, thr), in, g);
          const auto want = test::grads(ref_ternary_quant(xr, sr, thr, true), in_r, g);
          EXPECT_TRUE(bitwise_equal(got[0], want[0])) << "grad x thr " << thr << " scale " << s0.sizes();
          if (scale_grad) {
            const double rtol = test::grad_rtol(dtype);
            EXPECT_TRUE(test::close(got[1], want[1], rtol, rtol * 100)) << "grad scale thr " << thr;
          }
        }
      }
    }
  }
}

TEST(TernaryQuant, BackwardSpelledOutAndBackwardOp) {
  const at::Tensor x0 = test::values({-2., -0.1, 0.0, 0.3, 1.}, at::kDouble);
  const at::Tensor g = test::values({1., 2., 4., 8., 16.}, at::kDouble);
  at::Tensor x = test::leaf(x0), s = test::leaf(at::full({}, 0.5, at::kDouble));
  const auto gr = test::grads(ops::ternary_quant(x, s, 0.5), {x, s}, g);                // |x| > 0.25 passes
  EXPECT_TRUE(bitwise_equal(gr[0], test::values({0.5, 0., 0., 4., 8.}, at::kDouble)));  // (grad * scale) * mask
  EXPECT_EQ(gr[1].item<double>(), -1. + 8. + 16.);                                      // sum(grad * mask * sign(x))
  auto [gx, gs] = ops::_ternary_quant_backward(g, x0, at::full({}, 0.5, at::kDouble), 0.5, {true, false});
  EXPECT_TRUE(bitwise_equal(gx, gr[0]));
  EXPECT_FALSE(gs.defined());
  {  // BackwardOpIsNotDifferentiable
    at::Tensor g = test::leaf(at::randn({5}));
    auto [gx, gs] = ops::_ternary_quant_backward(g, at::randn({5}), at::ones({}), 0.5, {true, true});
    EXPECT_ERROR_CONTAINS(gx.sum().backward(), "_ternary_quant_backward");
  }
}

TEST(TernaryQuant, EmptyAndMeta) {
  at::Tensor x = test::leaf(at::empty({0, 4})), s = test::leaf(at::full({4}, 0.5));
  const at::Tensor y = ops::ternary_quant(x, s, 0.5);
  EXPECT_EQ(y.sizes(), x.sizes());
  EXPECT_TRUE(bitwise_equal(test::grads(y, {x, s}, at::empty({0, 4}))[1], at::zeros({4})));
  const auto meta = at::TensorOptions().device(at::kMeta);
  const at::Tensor xm = at::empty({2, 3, 4, 5}, meta).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor ym = ops::ternary_quant(xm, at::empty({}, meta), 0.5);
  EXPECT_TRUE(ym.is_meta());
  EXPECT_EQ(ym.strides(), xm.strides());
  EXPECT_ERROR_CONTAINS(ops::ternary_quant(xm, at::empty({}, meta), -1.0), "threshold must be finite and >= 0");
}

TEST(TernaryQuant, BadInputsNameTheArgument) {
  const at::Tensor x = at::randn({2, 5}), s = at::full({}, 0.5);
  EXPECT_ERROR_CONTAINS(ops::ternary_quant(x, s, -0.1), "brevitas_cpp::ternary_quant",
                        "threshold must be finite and >= 0", "-0.1");
  EXPECT_ERROR_CONTAINS(ops::ternary_quant(x, s, test::inf()), "threshold must be finite and >= 0");
  EXPECT_ERROR_CONTAINS(ops::ternary_quant(x, s, test::nan()), "threshold must be finite and >= 0");
  EXPECT_ERROR_CONTAINS(ops::ternary_quant(x, at::zeros({}), 0.5), "scale must be positive and finite, got 0");
  EXPECT_ERROR_CONTAINS(ops::ternary_quant(x, at::full({5, 1}, 0.5), 0.5), "scale of shape [5, 1] does not broadcast");
  EXPECT_ERROR_CONTAINS(ops::ternary_quant(x, s.to(at::kHalf), 0.5), "scale must have the dtype of x");
  EXPECT_ERROR_CONTAINS(ops::ternary_quant(at::ones({3}, at::kInt), at::ones({}, at::kInt), 0.5),
                        "x must be a floating-point");
  EXPECT_ERROR_CONTAINS(ops::_ternary_quant_backward(at::randn({2, 5}), x, s, -1.0, {true, true}),
                        "brevitas_cpp::_ternary_quant_backward", "threshold");
}

}  // namespace
}  // namespace brevitas_cpp
