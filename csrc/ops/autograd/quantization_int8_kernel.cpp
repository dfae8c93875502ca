// Autograd of quantization_int8: x's gradient only (the threshold and the counter are
// statistics). "ste" passes it; "clip" is _quantization_int8_backward on x and the threshold
// the forward used (+inf while the op was the identity). The backward op is linear in grad, so
// its own backward is itself.
#include "ops/quantization_int8.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/library.h>

#include <string>

namespace brevitas_cpp::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What ADInplaceOrView would do for the buffers written below it.
void bump_versions(at::Tensor& threshold, at::Tensor& iteration) {
  torch::autograd::increment_version(threshold);
  torch::autograd::increment_version(iteration);
}

class QuantizationInt8Function : public torch::autograd::Function<QuantizationInt8Function> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::Tensor threshold, at::Tensor iteration,
                               int64_t nbits, bool is_weight, std::optional<int64_t> channel_axis, double ema_decay,
                               int64_t delay_quant, const std::string& grad_mode, const std::string& quant_mode,
                               bool training) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [y, scale, clip] = ops::quantization_int8(x, threshold, iteration, nbits, is_weight, channel_axis, ema_decay,
                                                   delay_quant, grad_mode, quant_mode, training);
    bump_versions(threshold, iteration);
    const bool clip_grad = grad_mode == "clip";
    ctx->saved_data["clip"] = clip_grad;
    if (clip_grad) ctx->save_for_backward({x, clip});
    ctx->mark_non_differentiable({scale, clip});
    return {y, scale, clip};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list out(11);
    const at::Tensor& grad = grad_outputs[0];
    if (!grad.defined()) return out;
    if (ctx->saved_data["clip"].toBool()) {
      const auto saved = ctx->get_saved_variables();
      out[0] = ops::_quantization_int8_backward(grad, saved[0], saved[1]);
    } else {
      out[0] = grad;
    }
    return out;
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantization_int8_autograd(
    const at::Tensor& x, at::Tensor& threshold, at::Tensor& iteration, int64_t nbits, bool is_weight,
    std::optional<int64_t> channel_axis, double ema_decay, int64_t delay_quant, c10::string_view grad_mode,
    c10::string_view quant_mode, bool training) {
  TORCH_CHECK(!threshold.requires_grad() && !iteration.requires_grad(), "brevitas_cpp::quantization_int8: ",
              "threshold and iteration are statistics buffers updated in place and must not require grad");
  if (!(at::GradMode::is_enabled() && x.requires_grad())) {  // Inference: plain forward, nothing saved.
    at::AutoDispatchBelowADInplaceOrView guard;
    auto result = ops::quantization_int8(x, threshold, iteration, nbits, is_weight, channel_axis, ema_decay,
                                         delay_quant, grad_mode, quant_mode, training);
    bump_versions(threshold, iteration);
    return result;
  }
  const auto out =
      QuantizationInt8Function::apply(x, threshold, iteration, nbits, is_weight, channel_axis, ema_decay, delay_quant,
                                      std::string(grad_mode), std::string(quant_mode), training);
  return {out[0], out[1], out[2]};
}

class QuantizationInt8BackwardFunction : public torch::autograd::Function<QuantizationInt8BackwardFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& grad, const at::Tensor& x,
                            const at::Tensor& clip_threshold) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({x, clip_threshold});
    return ops::_quantization_int8_backward(grad, x, clip_threshold);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& gg = grad_outputs[0];
    // The mask is piecewise constant in x and clip_threshold: zero gradient (undefined) for both.
    return {gg.defined() ? ops::_quantization_int8_backward(gg, saved[0], saved[1]) : at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

at::Tensor quantization_int8_backward_autograd(const at::Tensor& grad, const at::Tensor& x,
                                               const at::Tensor& clip_threshold) {
  if (!(at::GradMode::is_enabled() && (grad.requires_grad() || x.requires_grad() || clip_threshold.requires_grad()))) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return ops::_quantization_int8_backward(grad, x, clip_threshold);
  }
  return QuantizationInt8BackwardFunction::apply(grad, x, clip_threshold);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("quantization_int8", TORCH_FN(quantization_int8_autograd));
  m.impl("_quantization_int8_backward", TORCH_FN(quantization_int8_backward_autograd));
}

}  // namespace brevitas_cpp::autograd
