// abs_percentile_int_quant (+ _abs_percentile_int_quant_backward) from C++ through the
// dispatcher, against the statistics phase spelled out with ATen ops: the k-th smallest |x|
// (torch.kthvalue's element on ties), clamped, / IntScaling's threshold, then the IntQuant composition;
// and its gradient against autograd through that composition.
#include "ops/abs_percentile_int_quant.h"

#include "../test_utils.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

// Signed `bits`-bit IntQuant of x, round half to even (straight-through round for_grad).
at::Tensor ref_int_quant(const at::Tensor& x, const at::Tensor& s, double bits, bool for_grad) {
  const at::Tensor u = x / s;
  const at::Tensor q = for_grad ? u + (at::round(u) - u).detach() : at::round(u);
  const at::Tensor hi = at::full({}, std::pow(2.0, bits - 1) - 1.0, x.options());
  const at::Tensor lo = at::full({}, -std::pow(2.0, bits - 1), x.options());
  at::Tensor c = at::where(q > hi, hi, q);
  c = at::where(c < lo, lo, c);
  return c * s;
}

// x with ties at the top: |x| = 2.5 at flat indices 3 and 7 (the max), 2.0 at 1 and 9.
at::Tensor input() {
  return at::tensor({0.5, -2.0, 1.0, -2.5, 0.25, 1.5, -1.0, 2.5, 0.75, 2.0, -0.5, 1.25}, at::kDouble).reshape({3, 4});
}

TEST(AbsPercentileIntQuant, SelectsTheElementOfKthvalue) {
  const at::Tensor x = input();
  const at::Tensor b = at::full({}, 4.0, at::kDouble);
  // k = 12 and 11: the max 2.5 (indices 3 and 7); k = 10 and 9: 2.0 (indices 1 and 9); k = 8:
  // 1.5 (index 5 alone). Among equal values, the element torch.kthvalue picks (Brevitas's).
  for (const auto& [k, value] : {std::pair{12, 2.5}, {11, 2.5}, {10, 2.0}, {9, 2.0}, {8, 1.5}}) {
    const auto [y, scale, stat, i] =
        ops::abs_percentile_int_quant(x, std::nullopt, b, k, true, false, std::nullopt, "round", false, false);
    const int64_t want = std::get<1>(at::kthvalue(x.abs().reshape({-1}), k)).item<int64_t>();
    EXPECT_EQ(i.item<int64_t>(), want) << "k " << k;
    EXPECT_EQ(stat.item<double>(), value) << "k " << k;
    const at::Tensor s = at::full({}, value / 8.0, at::kDouble);  // threshold 2^(4-1)
    EXPECT_TRUE(bitwise_equal(scale, s)) << "k " << k;
    EXPECT_TRUE(bitwise_equal(y, ref_int_quant(x, s, 4.0, false))) << "k " << k;
  }
}

TEST(AbsPercentileIntQuant, GradientEqualsAutogradThroughTheComposition) {
  const at::Tensor g = at::linspace(-1.0, 1.0, 12, at::kDouble).reshape({3, 4});
  const at::Tensor b = at::full({}, 4.0, at::kDouble);
  const at::Tensor x = input().set_requires_grad(true);
  const auto out =
      ops::abs_percentile_int_quant(x, std::nullopt, b, 10, true, false, std::nullopt, "round", false, false);
  const at::Tensor got = torch::autograd::grad({std::get<0>(out)}, {x}, {g})[0];
  // The reference: index_select of kthvalue's element, |.|, / 8, quantized.
  const at::Tensor at_k = std::get<1>(at::kthvalue(input().abs().reshape({-1}), 10)).reshape({1});
  const at::Tensor xr = input().set_requires_grad(true);
  const at::Tensor s = xr.reshape({-1}).index_select(0, at_k).abs().squeeze(0) / 8.0;
  const at::Tensor want = torch::autograd::grad({ref_int_quant(xr, s, 4.0, true)}, {xr}, {g})[0];
  EXPECT_TRUE(at::allclose(got, want, 1e-12, 1e-12)) << got << want;
  // The backward op alone gives the same.
  const at::Tensor gx = ops::_abs_percentile_int_quant_backward(
      g, std::nullopt, input(), std::get<1>(out), std::get<3>(out), b, true, false, "round", false, false);
  EXPECT_TRUE(bitwise_equal(gx, got));
}

TEST(AbsPercentileIntQuant, BadInputsNameTheArgument) {
  const at::Tensor x = input();
  const at::Tensor b = at::full({}, 8.0);
  try {
    ops::abs_percentile_int_quant(x, std::nullopt, b, 13, true, false, std::nullopt, "round", false, false);
    FAIL() << "k above numel was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("abs_percentile_int_quant: k must be in"), std::string::npos) << e.what();
  }
  try {
    ops::abs_percentile_int_quant(at::zeros({4}), std::nullopt, b, 2, true, false, std::nullopt, "round", false, false);
    FAIL() << "a zero scale was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be a normal positive finite number"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace brevitas_cpp
