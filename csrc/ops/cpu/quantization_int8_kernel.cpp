#include "ops/common/checks.h"
#include "ops/common/int8_threshold.h"
#include "ops/common/quant_math.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/kernels.h"
#include "ops/quantization_int8.h"

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantization_int8_cpu(
    const at::Tensor& x, at::Tensor& threshold, at::Tensor& iteration, int64_t nbits, bool is_weight,
    std::optional<int64_t> channel_axis, double ema_decay, int64_t delay_quant, c10::string_view grad_mode,
    c10::string_view quant_mode, bool training) {
  const auto args = ops::detail::check_quantization_int8_args(x, threshold, iteration, nbits, channel_axis, ema_decay,
                                                              delay_quant, grad_mode, quant_mode);
  auto p =
      ops::detail::update_int8_threshold(x, threshold, iteration, args, is_weight, ema_decay, delay_quant, training);
  at::Tensor y = empty_output_like(x);
  if (x.numel() == 0) return {y, p.scale, p.clip_threshold};
  if (!p.quantize) {
    y.copy_(x);
    return {y, p.scale, p.clip_threshold};
  }
  const at::Tensor xd = with_layout_of(x, y);
  const ParamLayout L = make_param_layout(y, {p.scale}, x.scalar_type());
  BREVITAS_CPP_DISPATCH_FLOATING(x.scalar_type(), "quantization_int8_cpu", [&] {
    const auto quant_max = static_cast<scalar_t>(args.quant_max);
    scaled_forward_loop<scalar_t>(xd.const_data_ptr<scalar_t>(), y.mutable_data_ptr<scalar_t>(), L, x.numel(),
                                  [quant_max](const Vec<scalar_t>& xv, const Vec<scalar_t>& s) {
                                    return vec_math::symmetric_quant<scalar_t>(xv, s, quant_max);
                                  });
  });
  return {y, p.scale, p.clip_threshold};
}

// grad where !(|x| > t): the clip window [-t, t], NaN passing.
at::Tensor quantization_int8_backward_cpu(const at::Tensor& grad, const at::Tensor& x,
                                          const at::Tensor& clip_threshold) {
  ops::detail::check_quantization_int8_backward_args(grad, x, clip_threshold);
  at::Tensor gx = empty_output_like(x);
  if (x.numel() == 0) return gx;
  const at::Tensor gd = with_layout_of(grad, gx);
  const at::Tensor xd = with_layout_of(x, gx);
  const ParamLayout L = make_param_layout(gx, {clip_threshold}, x.scalar_type());
  BREVITAS_CPP_DISPATCH_FLOATING(x.scalar_type(), "quantization_int8_backward_cpu", [&] {
    using T = scalar_t;
    scaled_backward_loop<T>(gd.const_data_ptr<T>(), xd.const_data_ptr<T>(), gx.mutable_data_ptr<T>(), L, x.numel(),
                            /*want_scale=*/false, [](const Vec<T>& g, const Vec<T>& xv, const Vec<T>& t) {
                              return std::pair{vec_math::clip_window_grad<T>(g, xv, t), Vec<T>(T(0))};
                            });
  });
  return gx;
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
