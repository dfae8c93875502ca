// quantization_int8 as ATen ops. Unlike the other compositions it reads the iteration counter on
// the host: the delay and the EMA's first batch are decisions, made once per call.
#include "ops/common/int8_threshold.h"
#include "ops/composite/compositions.h"
#include "ops/quantization_int8.h"

#include <torch/library.h>

namespace brevitas_cpp::composite {
namespace {

// clamp(round(x / s), -q, q) * s with the clamp keeping NaN; 0 where s == 0, NaN staying NaN.
at::Tensor symmetric_quant(const at::Tensor& x, const at::Tensor& s, int64_t quant_max) {
  const at::Tensor hi = scalar_in_dtype_of(static_cast<double>(quant_max), x);
  const at::Tensor lo = scalar_in_dtype_of(-static_cast<double>(quant_max), x);
  const at::Tensor r = at::round(x / s);
  const at::Tensor c1 = at::where(r > hi, hi, r);
  const at::Tensor q = at::where(c1 < lo, lo, c1) * s;
  const at::Tensor zero = at::zeros({}, x.options());
  return at::where(s == 0, at::where(at::isnan(x), x, zero), q);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantization_int8(const at::Tensor& x, at::Tensor& threshold,
                                                                 at::Tensor& iteration, int64_t nbits, bool is_weight,
                                                                 std::optional<int64_t> channel_axis, double ema_decay,
                                                                 int64_t delay_quant, c10::string_view grad_mode,
                                                                 c10::string_view quant_mode, bool training) {
  const auto args = ops::detail::check_quantization_int8_args(x, threshold, iteration, nbits, channel_axis, ema_decay,
                                                              delay_quant, grad_mode, quant_mode);
  auto p =
      ops::detail::update_int8_threshold(x, threshold, iteration, args, is_weight, ema_decay, delay_quant, training);
  at::Tensor y = p.quantize ? symmetric_quant(x, p.scale, args.quant_max) : x.clone();
  return {as_output_like(y, x), p.scale, p.clip_threshold};
}

at::Tensor quantization_int8_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& clip_threshold) {
  ops::detail::check_quantization_int8_backward_args(grad, x, clip_threshold);
  return as_output_like(at::where(at::abs(x) > clip_threshold, at::zeros({}, grad.options()), grad), x);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("quantization_int8", TORCH_FN(quantization_int8));
  m.impl("_quantization_int8_backward", TORCH_FN(quantization_int8_backward));
}

}  // namespace brevitas_cpp::composite
