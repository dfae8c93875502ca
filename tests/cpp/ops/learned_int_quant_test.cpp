// learned_int_quant (+ _learned_int_quant_backward) from C++ through the dispatcher, against the
// composition it replaces spelled out with ATen ops (Brevitas's signed clamp of value, the
// division by the threshold, at::relu and the IntQuant composition), and its gradients against
// autograd through that composition (round, the clamp of value and, with ste, the int clamp as
// straight-through estimators).
#include "ops/learned_int_quant.h"

#include "../test_utils.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <limits>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

// Unsigned `bits`-bit IntQuant of r, round half to even, with the clamp straight through or not.
// for_grad: round (and the clamp with ste) as straight-through estimators, whose + (v - u).detach()
// is the gradient's reference only (it may move the values by an ulp).
at::Tensor ref_int_quant(const at::Tensor& r, const at::Tensor& s, const at::Tensor& z, double bits, bool ste,
                         bool for_grad = false) {
  const at::Tensor u = r / s + z;
  const at::Tensor q = for_grad ? u + (at::round(u) - u).detach() : at::round(u);
  const at::Tensor hi = at::full({}, std::pow(2.0, bits) - 1.0, r.options());
  const at::Tensor lo = at::zeros({}, r.options());
  at::Tensor c = at::where(q > hi, hi, q);
  c = at::where(c < lo, lo, c);
  if (ste && for_grad) c = q + (c - q).detach();
  return (c - z) * s;
}

// Brevitas's ScalarSignedClampMinSte on value: |v| >= lo with v's sign (zero counts as positive),
// straight through for the gradient.
at::Tensor ref_signed_clamp(const at::Tensor& v, double lo, bool for_grad = false) {
  const at::Tensor l = at::full({}, lo, v.options());
  const at::Tensor c = at::where(v >= 0, at::where(v.abs() < l, l, v.abs()), at::where(v > -l, -l, v));
  return for_grad ? v + (c - v).detach() : c;
}

at::Tensor input() {
  at::Tensor x = at::linspace(-3.0, 9.0, 60, at::kDouble).reshape({3, 4, 5});
  x.view({-1}).narrow(0, 0, 4).copy_(at::tensor({-0.0, 0.0, std::numeric_limits<double>::quiet_NaN(), 1e300}));
  return x;
}

// A per-channel value: one entry below min_val = 0.5, one at it, two above.
at::Tensor value() {
  return at::tensor({0.25, 0.5, 1.1, 2.6}, at::kDouble).reshape({1, 4, 1});
}

TEST(LearnedIntQuant, ForwardEqualsComposition) {
  const at::Tensor x = input();
  const at::Tensor t = at::full({}, 7.0, at::kDouble);
  const at::Tensor z = at::zeros({}, at::kDouble);
  for (const bool relu : {false, true}) {
    for (const bool ste : {false, true}) {
      const auto [y, s] =
          ops::learned_int_quant(x, value(), t, z, at::full({}, 3.0), false, false, 0.5, "round", ste, relu);
      const at::Tensor ws = ref_signed_clamp(value(), 0.5) / t;
      EXPECT_TRUE(bitwise_equal(s, ws)) << "relu " << relu;
      EXPECT_TRUE(bitwise_equal(y, ref_int_quant(relu ? at::relu(x) : x, ws, z, 3.0, ste))) << "relu " << relu;
    }
  }
}

TEST(LearnedIntQuant, GradientsEqualAutogradThroughComposition) {
  const at::Tensor x0 = at::where(at::isnan(input()), at::zeros({}, at::kDouble), input()).clamp(-1e3, 1e3);
  const at::Tensor g = at::linspace(-1.0, 1.0, 60, at::kDouble).reshape({3, 4, 5});
  const at::Tensor w = at::tensor({0.5, -1.0, 2.0, 0.25}, at::kDouble).reshape({1, 4, 1});
  const at::Tensor t = at::full({}, 7.0, at::kDouble);
  const at::Tensor z = at::zeros({}, at::kDouble);
  for (const bool relu : {false, true}) {
    for (const bool ste : {false, true}) {
      const at::Tensor x = x0.clone().set_requires_grad(true), v = value().set_requires_grad(true);
      const auto [y, s] = ops::learned_int_quant(x, v, t, z, at::full({}, 3.0), false, false, 0.5, "round", ste, relu);
      const auto got = torch::autograd::grad({(y * g).sum() + (s * w).sum()}, {x, v});
      const at::Tensor xr = x0.clone().set_requires_grad(true), vr = value().set_requires_grad(true);
      const at::Tensor sr = ref_signed_clamp(vr, 0.5, /*for_grad=*/true) / t;
      const at::Tensor yr = ref_int_quant(relu ? at::relu(xr) : xr, sr, z, 3.0, ste, /*for_grad=*/true);
      const auto want = torch::autograd::grad({(yr * g).sum() + (sr * w).sum()}, {xr, vr});
      EXPECT_TRUE(bitwise_equal(got[0], want[0])) << "dx, relu " << relu << " clamp_ste " << ste;
      EXPECT_TRUE(at::allclose(got[1], want[1], 1e-12, 1e-12)) << "dvalue, relu " << relu << " clamp_ste " << ste;
      // The backward op itself: y's gradient only, then the scale's only (x gets none).
      const auto [gx, gv] = ops::_learned_int_quant_backward(g, std::nullopt, x0, s.detach(), t, z, at::full({}, 3.0),
                                                             false, false, "round", ste, relu, {true, true});
      EXPECT_TRUE(bitwise_equal(gx, want[0]));
      EXPECT_EQ(gv.sizes(), s.sizes());
      const auto [gx2, gv2] = ops::_learned_int_quant_backward(std::nullopt, w, x0, s.detach(), t, z, at::full({}, 3.0),
                                                               false, false, "round", ste, relu, {true, true});
      EXPECT_FALSE(gx2.defined());
      EXPECT_TRUE(bitwise_equal(gv2, w / t));
    }
  }
}

TEST(LearnedIntQuant, BadInputsNameTheOpAndArgument) {
  const at::Tensor x = at::ones({3});
  auto expect_error = [](const std::function<void()>& call, const std::string& fragment) {
    try {
      call();
      ADD_FAILURE() << "no error, expected " << fragment;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error(
      [&] {
        ops::learned_int_quant(x, at::ones({2}), at::ones({}), at::zeros({}), at::full({}, 8.), true, false,
                               std::nullopt, "round", false, false);
      },
      "learned_int_quant: value of shape [2] does not broadcast");
  expect_error(
      [&] {
        ops::learned_int_quant(x, at::ones({}), at::ones({}), at::zeros({}), at::full({}, 8.), true, false,
                               std::numeric_limits<double>::quiet_NaN(), "round", false, false);
      },
      "learned_int_quant: min_val must be a finite number >= 0");
  expect_error(
      [&] {
        ops::learned_int_quant(x, at::ones({}), at::ones({}).set_requires_grad(true), at::zeros({}), at::full({}, 8.),
                               true, false, std::nullopt, "round", false, false);
      },
      "learned_int_quant: threshold must not require grad");
  expect_error(
      [&] {
        ops::_learned_int_quant_backward(at::ones({4}), std::nullopt, x, at::ones({}), at::ones({}), at::zeros({}),
                                         at::full({}, 8.), false, false, "round", false, false, {true, true});
      },
      "_learned_int_quant_backward: grad_y of shape");
}

}  // namespace
}  // namespace brevitas_cpp
