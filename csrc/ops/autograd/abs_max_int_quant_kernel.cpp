#include "ops/abs_max_int_quant.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <string>

namespace brevitas_cpp::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keeps w and the scale output; backward recomputes the statistics from w.
class AbsMaxIntQuantFunction : public torch::autograd::Function<AbsMaxIntQuantFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& w, const at::Tensor& bit_width,
                               std::optional<int64_t> channel_dim, bool is_signed, bool narrow_range,
                               std::optional<double> scaling_min_val, c10::string_view rounding_mode, bool clamp_ste) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [y, scale] = ops::abs_max_int_quant(w, bit_width, channel_dim, is_signed, narrow_range, scaling_min_val,
                                             rounding_mode, clamp_ste);
    ctx->saved_data["channel_dim"] = channel_dim;
    ctx->saved_data["signed"] = is_signed;
    ctx->saved_data["narrow_range"] = narrow_range;
    ctx->saved_data["scaling_min_val"] = scaling_min_val;
    ctx->saved_data["rounding_mode"] = std::string(rounding_mode);
    ctx->saved_data["clamp_ste"] = clamp_ste;
    ctx->save_for_backward({w, scale, bit_width});
    // An unused scale output (the usual case) brings no zeros: the backward op takes None.
    ctx->set_materialize_grads(false);
    return {y, scale};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    variable_list out(8);
    if (!ctx->needs_input_grad(0)) return out;
    const at::Tensor& grad_scale_out = grad_outputs[1];
    if (!grad_outputs[0].defined() && !grad_scale_out.defined()) return out;
    const at::Tensor grad = grad_outputs[0].defined() ? grad_outputs[0] : at::zeros_like(saved[0]);
    const std::optional<at::Tensor> grad_scale =
        grad_scale_out.defined() ? std::optional<at::Tensor>(grad_scale_out) : std::nullopt;
    const auto& cd = ctx->saved_data["channel_dim"];
    const auto& mv = ctx->saved_data["scaling_min_val"];
    out[0] = ops::_abs_max_int_quant_backward(
        grad, grad_scale, saved[0], saved[1], saved[2], cd.isNone() ? std::nullopt : std::optional<int64_t>(cd.toInt()),
        ctx->saved_data["signed"].toBool(), ctx->saved_data["narrow_range"].toBool(),
        mv.isNone() ? std::nullopt : std::optional<double>(mv.toDouble()),
        ctx->saved_data["rounding_mode"].toStringRef(), ctx->saved_data["clamp_ste"].toBool());
    return out;
  }
};

std::tuple<at::Tensor, at::Tensor> abs_max_int_quant_autograd(const at::Tensor& w, const at::Tensor& bit_width,
                                                              std::optional<int64_t> channel_dim, bool is_signed,
                                                              bool narrow_range, std::optional<double> scaling_min_val,
                                                              c10::string_view rounding_mode, bool clamp_ste) {
  TORCH_CHECK(!(at::GradMode::is_enabled() && bit_width.requires_grad()), "brevitas_cpp::abs_max_int_quant: ",
              "bit_width must not require grad (it gets no gradient here; a learned bit width takes the ",
              "unfused quantizer)");
  if (!(at::GradMode::is_enabled() && w.requires_grad())) {  // Inference: plain forward, nothing saved.
    at::AutoDispatchBelowADInplaceOrView guard;
    return ops::abs_max_int_quant(w, bit_width, channel_dim, is_signed, narrow_range, scaling_min_val, rounding_mode,
                                  clamp_ste);
  }
  auto out = AbsMaxIntQuantFunction::apply(w, bit_width, channel_dim, is_signed, narrow_range, scaling_min_val,
                                           rounding_mode, clamp_ste);
  return {out[0], out[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("abs_max_int_quant", TORCH_FN(abs_max_int_quant_autograd));
  m.impl("_abs_max_int_quant_backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace brevitas_cpp::autograd
