// abs_max_int_quant (+ _abs_max_int_quant_backward) from C++ through the dispatcher.
// Forward: bit for bit the stock weight quantizer's composition
//   m = max|w| (over w, or per channel); c = |max(m, min_val)|; scale = |c / threshold|;
//   y = int_quant(w, scale, 0, bit_width, ...)
// Backward: w's gradient through int_quant and through the scale into the maxima.
#include "ops/abs_max_int_quant.h"

#include "ops/int_quant.h"

#include "../test_utils.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

at::Tensor ref_scale(const at::Tensor& w, std::optional<int64_t> dim, double min_val, double threshold) {
  at::Tensor m =
      dim ? std::get<0>(at::abs(w).reshape({w.size(0), -1}).max(1)).reshape({w.size(0), 1, 1}) : at::max(at::abs(w));
  const at::Tensor lo = at::scalar_tensor(min_val, w.options());
  m = at::where(m < lo, lo, m);
  return at::abs(at::abs(m) / at::scalar_tensor(threshold, w.options()));
}

TEST(AbsMaxIntQuant, ForwardEqualsComposition) {
  for (auto dtype : {at::kFloat, at::kDouble}) {
    const at::Tensor w = at::randn({6, 4, 3}, at::TensorOptions().dtype(dtype));
    const at::Tensor b = at::scalar_tensor(8.0, at::TensorOptions().dtype(dtype));
    for (std::optional<int64_t> dim : {std::optional<int64_t>(), std::optional<int64_t>(0)}) {
      auto [y, s] = ops::abs_max_int_quant(w, b, dim, true, true, 1e-10, "round", true);
      const at::Tensor want_s = ref_scale(w, dim, 1e-10, 127.0);
      EXPECT_TRUE(bitwise_equal(s, want_s));
      const at::Tensor zero = at::zeros({}, w.options());
      EXPECT_TRUE(bitwise_equal(y, ops::int_quant(w, want_s, zero, b, true, true, "round", true)));
    }
  }
}

TEST(AbsMaxIntQuant, GradientThroughTheScaleReachesTheMaximum) {
  const at::Tensor w = test::values({0.5, -2.0, 1.0, 2.0}, at::kDouble).reshape({2, 2}).set_requires_grad(true);
  const at::Tensor b = at::scalar_tensor(8.0, at::kDouble);
  auto [y, s] = ops::abs_max_int_quant(w, b, std::nullopt, true, false, std::nullopt, "round", true);
  const auto g = torch::autograd::grad({s}, {w});
  // torch.max over everything: the two tied maxima share the gradient 1 / 128.
  const double share = 1.0 / 128.0 / 2.0;
  EXPECT_TRUE(bitwise_equal(g[0], test::values({0.0, -share, 0.0, share}, at::kDouble).reshape({2, 2})));
}

TEST(AbsMaxIntQuant, BackwardOpEqualsComposite) {
  const at::Tensor w = at::randn({5, 7}, at::kDouble);
  const at::Tensor b = at::scalar_tensor(4.0, at::kDouble);
  auto [y, s] = ops::abs_max_int_quant(w, b, 0, true, true, std::nullopt, "round", false);
  const at::Tensor g = at::randn({5, 7}, at::kDouble);
  const at::Tensor gs = at::randn({5, 1}, at::kDouble);
  const at::Tensor got = ops::_abs_max_int_quant_backward(g, gs, w, s, b, 0, true, true, std::nullopt, "round", false);
  // Autograd of the op equals the backward op.
  const at::Tensor wr = w.clone().set_requires_grad(true);
  auto [yr, sr] = ops::abs_max_int_quant(wr, b, 0, true, true, std::nullopt, "round", false);
  const auto want = torch::autograd::grad({yr, sr}, {wr}, {g, gs});
  EXPECT_TRUE(bitwise_equal(got, want[0]));
}

TEST(AbsMaxIntQuant, BadInputNamesTheArgument) {
  const at::Tensor w = at::randn({3, 4});
  const at::Tensor b = at::scalar_tensor(8.0);
  EXPECT_THROW(
      {
        try {
          ops::abs_max_int_quant(w, b, 2, true, true, std::nullopt, "round", false);
        } catch (const c10::Error& e) {
          EXPECT_NE(std::string(e.what()).find("channel_dim"), std::string::npos);
          throw;
        }
      },
      c10::Error);
  EXPECT_THROW(ops::abs_max_int_quant(at::zeros({3, 4}), b, std::nullopt, true, true, std::nullopt, "round", false),
               c10::Error);
  EXPECT_THROW(ops::abs_max_int_quant(w, b, 0, true, true, -1.0, "round", false), c10::Error);
}

}  // namespace
}  // namespace brevitas_cpp
