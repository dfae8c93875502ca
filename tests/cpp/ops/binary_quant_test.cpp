// binary_quant and clamped_binary_quant (+ backward ops) from C++ through the dispatcher,
// against the contract's compositions built from ATen ops.
#include "ops/binary_quant.h"

#include "../test_utils.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

// +1 for x >= 0 (incl. -0.0), -1 below, NaN kept.
at::Tensor ref_binary_sign(const at::Tensor& x) {
  const at::Tensor one = at::ones({}, x.options());
  return at::where(at::isnan(x), x, at::where(x >= 0, one, -one));
}
at::Tensor ref_binary_sign_ste(const at::Tensor& x, bool ste) {
  return ste ? test::ste(x, ref_binary_sign(x)) : ref_binary_sign(x);
}

at::Tensor ref_binary_quant(const at::Tensor& x, const at::Tensor& s, bool ste) {
  return ref_binary_sign_ste(x, ste) * s;
}

// Brevitas's tensor_clamp(x, -scale, scale) (torch.where form, differentiable in the bounds),
// then binary_sign_ste(c) * scale.
at::Tensor ref_clamped_binary_quant(const at::Tensor& x, const at::Tensor& s, bool ste) {
  const at::Tensor min_val = -s;
  at::Tensor c = at::where(x > s, s.type_as(x), x);
  c = at::where(c < min_val, min_val.type_as(c), c);
  return ref_binary_sign_ste(c, ste) * s;
}

using QuantFn = at::Tensor (*)(const at::Tensor&, const at::Tensor&);
using RefFn = at::Tensor (*)(const at::Tensor&, const at::Tensor&, bool);
struct Case {
  const char* name;
  QuantFn op;
  RefFn ref;
};
const Case kCases[] = {{"binary_quant", ops::binary_quant, ref_binary_quant},
                       {"clamped_binary_quant", ops::clamped_binary_quant, ref_clamped_binary_quant}};

TEST(BinaryQuant, SchemasAreRegistered) {
  auto& d = c10::Dispatcher::singleton();
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::binary_quant", "").schema()),
            "brevitas_cpp::binary_quant(Tensor x, Tensor scale) -> Tensor");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::clamped_binary_quant", "").schema()),
            "brevitas_cpp::clamped_binary_quant(Tensor x, Tensor scale) -> Tensor");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::_binary_quant_backward", "").schema()),
            "brevitas_cpp::_binary_quant_backward(Tensor grad, Tensor? x, Tensor scale, bool[2] output_mask) -> "
            "(Tensor, Tensor)");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::_clamped_binary_quant_backward", "").schema()),
            "brevitas_cpp::_clamped_binary_quant_backward(Tensor grad, Tensor x, Tensor scale, bool[2] output_mask) "
            "-> (Tensor, Tensor)");
}

TEST(BinaryQuant, Forward) {
  const at::Tensor x = test::values({-3., -0.5, -0.0, 0.0, 0.5, 3., test::nan()});
  const at::Tensor s = at::full({}, 0.75);
  EXPECT_TRUE(
      bitwise_equal(ops::binary_quant(x, s), test::values({-0.75, -0.75, 0.75, 0.75, 0.75, 0.75, test::nan()})));
  EXPECT_TRUE(bitwise_equal(ops::clamped_binary_quant(x, s),
                            test::values({-0.75, -0.75, 0.75, 0.75, 0.75, 0.75, test::nan()})));
  {  // ForwardEveryDtypePerTensorAndPerChannel
    for (const auto dtype : test::float_dtypes()) {
      const auto o = at::TensorOptions().dtype(dtype);
      const at::Tensor x = (at::randn({4, 3, 2, 2}, at::kDouble) * 2).to(dtype);
      const at::Tensor specials = test::values(test::tie_values(), dtype);
      const std::vector<at::Tensor> scales{at::full({}, 0.3, o), at::rand({4, 1, 1, 1}, o).add(0.1),
                                           at::rand({1, 3, 1, 1}, o).add(0.1), at::rand({2}, o).add(0.1)};
      for (const auto& c : kCases) {
        for (const auto& s : scales) {
          for (const auto& xx : {x, x.contiguous(at::MemoryFormat::ChannelsLast)}) {
            const at::Tensor y = c.op(xx, s);
            EXPECT_EQ(y.strides(), xx.strides()) << c.name;
            EXPECT_TRUE(bitwise_equal(y, c.ref(xx, s, false))) << c.name << " " << dtype << " scale " << s.sizes();
          }
        }
        EXPECT_TRUE(bitwise_equal(c.op(specials, scales[0]), c.ref(specials, scales[0], false))) << c.name << dtype;
      }
    }
  }
  {  // NaNPropagates
    for (const auto dtype : test::float_dtypes()) {
      const at::Tensor x = test::values({test::nan(), -test::nan(), 2.0}, dtype);
      for (const auto& c : kCases) {
        const at::Tensor y = c.op(x, at::ones({}, at::TensorOptions().dtype(dtype)));
        EXPECT_TRUE(at::isnan(y.slice(0, 0, 2)).all().item<bool>()) << c.name << " " << dtype << y;
        EXPECT_EQ(y[2].item<double>(), 1.0);
      }
    }
  }
}

TEST(BinaryQuant, BackwardMatchesCompositionAutograd) {
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    const auto o = at::TensorOptions().dtype(dtype);
    const at::Tensor x0 = (at::randn({5, 3, 4}, at::kDouble) * 2).to(dtype);
    const at::Tensor g = at::randn({5, 3, 4}, at::kDouble).to(dtype);
    for (const auto& c : kCases) {
      for (const auto& s0 : {at::full({}, 0.8, o), at::rand({5, 1, 1}, o).add(0.2), at::rand({1, 3, 1}, o).add(0.2),
                             at::rand({4}, o).add(0.2)}) {
        for (const bool scale_grad : {false, true}) {
          at::Tensor x = test::leaf(x0), s = test::leaf(s0, scale_grad);
          at::Tensor xr = test::leaf(x0), sr = test::leaf(s0, scale_grad);
          std::vector<at::Tensor> in{x}, in_r{xr};
          if (scale_grad) in.push_back(s), in_r.push_back(sr);
          const auto got = test::grads(c.op(x, s), in, g);
          const auto want = test::grads(c.ref(xr, sr, true), in_r, g);
          EXPECT_TRUE(bitwise_equal(got[0], want[0])) << c.name << " grad x, scale " << s0.sizes();
          if (scale_grad) {
            const double rtol = test::grad_rtol(dtype);
            EXPECT_TRUE(test::close(got[1], want[1], rtol, rtol * 100)) << c.name << " grad scale " << s0.sizes();
          }
        }
      }
    }
  }
}

TEST(BinaryQuant, BackwardExpandedScale) {
  // scale passed as an expanded view (stride 0): its gradient keeps the expanded shape and
  // autograd sums it into the leaf.
  const at::Tensor x0 = at::randn({5, 3, 4}) * 2, g = at::randn({5, 3, 4});
  for (const auto& c : kCases) {
    at::Tensor x = test::leaf(x0), leaf = test::leaf(at::full({1, 1, 1}, 0.7));
    at::Tensor xr = test::leaf(x0), leaf_r = test::leaf(at::full({1, 1, 1}, 0.7));
    const auto got = test::grads(c.op(x, leaf.expand({5, 1, 1})), {x, leaf}, g);
    const auto want = test::grads(c.ref(xr, leaf_r.expand({5, 1, 1}), true), {xr, leaf_r}, g);
    EXPECT_TRUE(bitwise_equal(got[0], want[0])) << c.name;
    EXPECT_TRUE(test::close(got[1], want[1], 1e-5, 1e-5)) << c.name;
    auto [gx, gs] = ops::_binary_quant_backward(g, x0, at::full({1, 1, 1}, 0.7).expand({5, 1, 1}), {false, true});
    EXPECT_EQ(gs.sizes(), (std::vector<int64_t>{5, 1, 1}));
  }
}

TEST(BinaryQuant, BackwardSpelledOutAndBackwardOps) {
  const at::Tensor x0 = test::values({-3., -0.5, -0.0, 0.5, 3.}, at::kDouble);
  const at::Tensor g = test::values({1., 2., 4., 8., 16.}, at::kDouble);
  at::Tensor x = test::leaf(x0), s = test::leaf(at::full({}, 2., at::kDouble));
  auto gr = test::grads(ops::binary_quant(x, s), {x, s}, g);
  EXPECT_TRUE(bitwise_equal(gr[0], g * 2));                   // grad * scale
  EXPECT_EQ(gr[1].item<double>(), -1. - 2. + 4. + 8. + 16.);  // sum(grad * binary_sign(x))
  gr = test::grads(ops::clamped_binary_quant(x, s), {x, s}, g);
  EXPECT_TRUE(bitwise_equal(gr[0], test::values({0., 4., 8., 16., 0.}, at::kDouble)));  // clamped at -3 and 3
  // sign part: sum(g * sign(c)) = -1 - 2 + 4 + 8 + 16; bounds: +g*s at 3 (above), -g*s at -3 (below).
  EXPECT_EQ(gr[1].item<double>(), (-1. - 2. + 4. + 8. + 16.) + 16. * 2 - 1. * 2);
  {  // BackwardOpsDirectly
    const at::Tensor x = at::randn({3, 4}), s = at::rand({3, 1}).add(0.1), g = at::randn({3, 4});
    auto [gx, gs] = ops::_binary_quant_backward(g, std::nullopt, s, {true, false});
    EXPECT_TRUE(bitwise_equal(gx, g * s));
    EXPECT_FALSE(gs.defined());
    auto [gx2, gs2] = ops::_binary_quant_backward(g, x, s, {false, true});
    EXPECT_FALSE(gx2.defined());
    EXPECT_TRUE(test::close(gs2, (g * ref_binary_sign(x)).sum(1, true), 1e-5, 1e-5));
    EXPECT_ERROR_CONTAINS(ops::_binary_quant_backward(g, std::nullopt, s, {true, true}),
                          "brevitas_cpp::_binary_quant_backward", "scale needs x");
    auto [gx3, gs3] = ops::_clamped_binary_quant_backward(g, x, s, {true, true});
    EXPECT_EQ(gx3.sizes(), x.sizes());
    EXPECT_EQ(gs3.sizes(), s.sizes());
    // Not differentiable a second time.
    at::Tensor gg = test::leaf(g);
    auto [gx4, gs4] = ops::_binary_quant_backward(gg, x, s, {true, true});
    EXPECT_ERROR_CONTAINS(gx4.sum().backward(), "_binary_quant_backward");
  }
}

TEST(BinaryQuant, EmptyInputAndMetaKernel) {
  for (const auto& c : kCases) {
    at::Tensor x = test::leaf(at::empty({0, 3})), s = test::leaf(at::full({1, 3}, 0.5));
    const at::Tensor y = c.op(x, s);
    EXPECT_EQ(y.sizes(), x.sizes());
    const auto gr = test::grads(y, {x, s}, at::empty({0, 3}));
    EXPECT_TRUE(bitwise_equal(gr[1], at::zeros({1, 3}))) << c.name;
  }
  {  // MetaKernel
    const auto meta = at::TensorOptions().device(at::kMeta);
    const at::Tensor x = at::empty({2, 3, 4, 5}, meta).contiguous(at::MemoryFormat::ChannelsLast);
    for (const auto& c : kCases) {
      const at::Tensor y = c.op(x, at::empty({1, 3, 1, 1}, meta));
      EXPECT_TRUE(y.is_meta());
      EXPECT_EQ(y.strides(), x.strides());
    }
  }
}

TEST(BinaryQuant, BadInputsNameTheArgument) {
  const at::Tensor x = at::randn({2, 5});
  for (const auto& c : kCases) {
    const std::string op = std::string("brevitas_cpp::") + c.name;
    EXPECT_ERROR_CONTAINS(c.op(x, at::zeros({})), op, "scale must be positive and finite, got 0");
    EXPECT_ERROR_CONTAINS(c.op(x, at::full({2, 1}, -2.)), "scale must be positive and finite, got -2");
    EXPECT_ERROR_CONTAINS(c.op(x, at::full({}, test::inf())), "scale must be positive and finite");
    EXPECT_ERROR_CONTAINS(c.op(x, at::full({3}, 1.)), op, "scale of shape [3] does not broadcast to x of shape [2, 5]");
    EXPECT_ERROR_CONTAINS(c.op(x, at::ones({}, at::kDouble)), "scale must have the dtype of x");
    EXPECT_ERROR_CONTAINS(c.op(at::arange(10).view({2, 5}), at::ones({}, at::kLong)), "x must be a floating-point");
    EXPECT_THROW(c.op(x, at::ones({}, at::TensorOptions().device(at::kMeta))), c10::Error);
  }
}

}  // namespace
}  // namespace brevitas_cpp
