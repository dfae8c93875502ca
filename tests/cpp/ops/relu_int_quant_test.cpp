// relu_int_quant (+ _relu_int_quant_backward) from C++ through the dispatcher, against at::relu
// followed by the spelled-out IntQuant composition, and its gradients against autograd through
// that composition (round and clamp as straight-through estimators, ReLU's own backward).
#include "ops/relu_int_quant.h"

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

at::Tensor input() {
  at::Tensor x = at::linspace(-3.0, 9.0, 60, at::kDouble).reshape({3, 4, 5});
  x.view({-1}).narrow(0, 0, 4).copy_(at::tensor({-0.0, 0.0, std::numeric_limits<double>::quiet_NaN(), 1e300}));
  return x;
}

TEST(ReluIntQuant, ForwardEqualsReluThenComposition) {
  const at::Tensor x = input();
  const at::Tensor s = at::full({1, 4, 1}, 0.37, at::kDouble);
  const at::Tensor z = at::zeros({}, at::kDouble);
  for (const bool ste : {false, true}) {
    const at::Tensor y = ops::relu_int_quant(x, s, z, at::full({}, 3.0), false, false, "round", ste);
    EXPECT_TRUE(bitwise_equal(y, ref_int_quant(at::relu(x), s, z, 3.0, ste))) << "clamp_ste " << ste;
  }
}

TEST(ReluIntQuant, GradientsEqualAutogradThroughReluAndComposition) {
  const at::Tensor x0 = at::where(at::isnan(input()), at::zeros({}, at::kDouble), input());
  const at::Tensor g = at::linspace(-1.0, 1.0, 60, at::kDouble).reshape({3, 4, 5});
  for (const bool ste : {false, true}) {
    const at::Tensor x = x0.clone().set_requires_grad(true), s = at::full({1, 4, 1}, 0.37, at::kDouble);
    const at::Tensor sr = s.clone().set_requires_grad(true), xr = x0.clone().set_requires_grad(true);
    const at::Tensor sl = s.clone().set_requires_grad(true);
    const at::Tensor z = at::zeros({}, at::kDouble);
    const at::Tensor y = ops::relu_int_quant(x, sl, z, at::full({}, 3.0), false, false, "round", ste);
    const auto got = torch::autograd::grad({y}, {x, sl}, {g});
    const at::Tensor yr = ref_int_quant(at::relu(xr), sr, z, 3.0, ste, /*for_grad=*/true);
    const auto want = torch::autograd::grad({yr}, {xr, sr}, {g});
    EXPECT_TRUE(bitwise_equal(got[0], want[0])) << "dx, clamp_ste " << ste;
    EXPECT_TRUE(at::allclose(got[1], want[1], 1e-12, 1e-12)) << "ds, clamp_ste " << ste;
    // The backward op itself, every gradient asked for.
    const auto [gx, gs, gz, gb] = ops::_relu_int_quant_backward(g, x0, s, z, at::full({}, 3.0), false, false, "round",
                                                                ste, {true, true, true, true});
    EXPECT_TRUE(bitwise_equal(gx, want[0]));
    EXPECT_TRUE(gz.defined() && gz.sizes() == z.sizes());
    EXPECT_EQ(gb.defined(), !ste);  // TensorClampSte: no bit width gradient
  }
}

TEST(ReluIntQuant, BadInputsNameTheOp) {
  const at::Tensor x = at::ones({3});
  EXPECT_THROW(ops::relu_int_quant(x, at::zeros({}), at::zeros({}), at::full({}, 8.), false, false, "round", false),
               c10::Error);
  try {
    ops::_relu_int_quant_backward(at::ones({4}), x, at::ones({}), at::zeros({}), at::full({}, 8.), false, false,
                                  "round", false, {true, true, false, false});
    FAIL() << "a grad of another shape was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("_relu_int_quant_backward"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace brevitas_cpp
