// quantization_int8 (+ _quantization_int8_backward) from C++ through the dispatcher, against
// seed 003's formulas written out here:
//   QL = 2^(nbits-1) - 1;  weights t = max|w|;  activations t <- t * (1 - d) + max|x| * d
//   unit = t / QL;  y = clamp(round(x / unit), -QL, QL) * unit
#include "ops/quantization_int8.h"

#include "../test_utils.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>

#include <cmath>

namespace brevitas_cpp {
namespace {

using test::bitwise_equal;

at::Tensor ref_quant(const at::Tensor& x, const at::Tensor& unit, double quant_max) {
  return at::clamp(at::round(x / unit), -quant_max, quant_max) * unit;
}

struct Buffers {
  at::Tensor threshold = at::zeros({});
  at::Tensor iteration = at::zeros({}, at::kLong);
};

TEST(QuantizationInt8, SchemasAreRegistered) {
  auto& d = c10::Dispatcher::singleton();
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::quantization_int8", "").schema()),
            "brevitas_cpp::quantization_int8(Tensor x, Tensor(a!) threshold, Tensor(b!) iteration, int nbits=8, "
            "bool is_weight=False, int? channel_axis=None, float ema_decay=0.01, int delay_quant=0, "
            "str grad_mode=\"ste\", str quant_mode=\"minmax\", bool training=True) -> (Tensor output, Tensor scale, "
            "Tensor clip_threshold)");
  EXPECT_EQ(c10::str(d.findSchemaOrThrow("brevitas_cpp::_quantization_int8_backward", "").schema()),
            "brevitas_cpp::_quantization_int8_backward(Tensor grad, Tensor x, Tensor clip_threshold) -> Tensor");
}

TEST(QuantizationInt8, WeightPerTensorIsTheSeedsFormula) {
  const at::Tensor w = at::randn({8, 3, 3, 3});
  Buffers b;
  const auto [y, scale, clip] = ops::quantization_int8(w, b.threshold, b.iteration, 8, /*is_weight=*/true, std::nullopt,
                                                       0.01, 0, "ste", "minmax", true);
  const at::Tensor t = w.abs().max();
  const at::Tensor unit = t / 127.0;
  EXPECT_TRUE(bitwise_equal(y, ref_quant(w, unit, 127.0)));
  EXPECT_TRUE(bitwise_equal(scale, unit));
  EXPECT_TRUE(bitwise_equal(clip, t));
  EXPECT_TRUE(bitwise_equal(b.threshold, t));
  EXPECT_EQ(b.iteration.item<int64_t>(), 1);
}

TEST(QuantizationInt8, ActivationEmaDelayAndEval) {
  Buffers b;
  const double d = 0.01;
  at::Tensor expected_t;
  for (int step = 0; step < 4; ++step) {
    const at::Tensor x = at::randn({4, 5}) * (step + 1);
    const auto [y, scale, clip] = ops::quantization_int8(x, b.threshold, b.iteration, 8, false, std::nullopt, d,
                                                         /*delay_quant=*/2, "ste", "minmax", /*training=*/true);
    const at::Tensor cur = x.abs().max();
    expected_t = step == 0 ? cur : expected_t * (1.0 - d) + cur * d;
    EXPECT_TRUE(bitwise_equal(b.threshold, expected_t)) << step;
    EXPECT_EQ(b.iteration.item<int64_t>(), step + 1);
    if (step < 2) {  // the first delay_quant calls copy x
      EXPECT_TRUE(bitwise_equal(y, x)) << step;
      EXPECT_TRUE(std::isinf(clip.item<float>()));
    } else {
      EXPECT_TRUE(bitwise_equal(y, ref_quant(x, expected_t / 127.0, 127.0))) << step;
    }
  }
  // Eval: the stored threshold, no writes.
  const at::Tensor x = at::randn({4, 5}) * 10;
  const auto [y, scale, clip] = ops::quantization_int8(x, b.threshold, b.iteration, 8, false, std::nullopt, d, 2, "ste",
                                                       "minmax", /*training=*/false);
  EXPECT_TRUE(bitwise_equal(y, ref_quant(x, expected_t / 127.0, 127.0)));
  EXPECT_TRUE(bitwise_equal(b.threshold, expected_t));
  EXPECT_EQ(b.iteration.item<int64_t>(), 4);
}

TEST(QuantizationInt8, PerChannelPower2AndClipGradient) {
  const at::Tensor w = at::randn({6, 4}).requires_grad_();
  at::Tensor threshold = at::zeros({4});
  at::Tensor iteration = at::zeros({}, at::kLong);
  const auto [y, scale, clip] =
      ops::quantization_int8(w, threshold, iteration, 4, true, /*channel_axis=*/-1, 0.01, 0, "clip", "power2", true);
  const at::Tensor t = std::get<0>(w.detach().abs().max(0));
  const at::Tensor t_eff = at::exp2(at::ceil(at::log2(t.to(at::kDouble)))).to(at::kFloat);
  EXPECT_TRUE(bitwise_equal(threshold, t));
  EXPECT_TRUE(bitwise_equal(clip, t_eff.view({1, 4})));
  EXPECT_TRUE(bitwise_equal(y.detach(), ref_quant(w.detach(), (t_eff / 7.0).view({1, 4}), 7.0)));
  // Every |w| <= max|w| <= t_eff: the clip window passes the whole gradient.
  const at::Tensor g = at::randn({6, 4});
  y.backward(g);
  EXPECT_TRUE(bitwise_equal(w.grad(), g));
  // The backward op itself: zero where |x| > t.
  const at::Tensor x = test::values({-2.0, -1.0, 1.0, 1.5, test::nan()});
  const at::Tensor gx = ops::_quantization_int8_backward(at::ones({5}), x, at::full({}, 1.0));
  EXPECT_TRUE(bitwise_equal(gx, test::values({0.0, 1.0, 1.0, 0.0, 1.0})));
}

TEST(QuantizationInt8, BadInputNamesTheArgument) {
  Buffers b;
  const at::Tensor x = at::randn({3});
  auto call = [&](int64_t nbits, double d, int64_t delay, const char* gm, const char* qm) {
    return ops::quantization_int8(x, b.threshold, b.iteration, nbits, false, std::nullopt, d, delay, gm, qm, true);
  };
  EXPECT_THROW(
      {
        try {
          call(1, 0.01, 0, "ste", "minmax");
        } catch (const c10::Error& e) {
          EXPECT_NE(std::string(e.what_without_backtrace()).find("nbits"), std::string::npos);
          throw;
        }
      },
      c10::Error);
  EXPECT_THROW(call(8, 1.0, 0, "ste", "minmax"), c10::Error);
  EXPECT_THROW(call(8, 0.01, -1, "ste", "minmax"), c10::Error);
  EXPECT_THROW(call(8, 0.01, 0, "STE", "minmax"), c10::Error);
  EXPECT_THROW(call(8, 0.01, 0, "ste", "log"), c10::Error);
  EXPECT_EQ(b.iteration.item<int64_t>(), 0);  // nothing was written
}

}  // namespace
}  // namespace brevitas_cpp
