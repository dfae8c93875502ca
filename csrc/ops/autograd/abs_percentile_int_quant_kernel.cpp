#include "ops/abs_percentile_int_quant.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <string>

namespace brevitas_cpp::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keeps x and the scale and index outputs: the backward needs no second selection.
class AbsPercentileIntQuantFunction : public torch::autograd::Function<AbsPercentileIntQuantFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x,
                               const std::optional<at::Tensor>& zero_grad_param, const at::Tensor& bit_width, int64_t k,
                               bool is_signed, bool narrow_range, std::optional<double> scaling_min_val,
                               c10::string_view rounding_mode, bool clamp_ste, bool relu) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [y, scale, stat, index] = ops::abs_percentile_int_quant(
        x, zero_grad_param, bit_width, k, is_signed, narrow_range, scaling_min_val, rounding_mode, clamp_ste, relu);
    ctx->saved_data["signed"] = is_signed;
    ctx->saved_data["narrow_range"] = narrow_range;
    ctx->saved_data["rounding_mode"] = std::string(rounding_mode);
    ctx->saved_data["clamp_ste"] = clamp_ste;
    ctx->saved_data["relu"] = relu;
    ctx->save_for_backward({x, scale, index, bit_width});
    // Only the parameter's metadata: it is never read, and the learned scale it stands for may
    // be initialised in place before this backward runs (a quantizer called twice per step).
    if (zero_grad_param.has_value() && zero_grad_param->defined()) {
      ctx->saved_data["param_sizes"] = zero_grad_param->sizes().vec();
      ctx->saved_data["param_dtype"] = zero_grad_param->scalar_type();
      ctx->saved_data["param_device"] = zero_grad_param->device();
    }
    ctx->mark_non_differentiable({stat, index});
    // An unused scale output (the usual case) brings no zeros: the backward op takes None.
    ctx->set_materialize_grads(false);
    return {y, scale, stat, index};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    variable_list out(10);
    // The learned scale waiting for the statistics: an exact zero (zero_grad_link's). Its edge
    // is the second when given (the edges count the tensors given).
    if (ctx->saved_data.count("param_sizes") != 0 && ctx->needs_input_grad(1)) {
      out[1] = at::zeros(ctx->saved_data["param_sizes"].toIntVector(),
                         at::TensorOptions()
                             .dtype(ctx->saved_data["param_dtype"].toScalarType())
                             .device(ctx->saved_data["param_device"].toDevice()));
    }
    if (!ctx->needs_input_grad(0)) return out;
    const at::Tensor& grad_scale_out = grad_outputs[1];
    if (!grad_outputs[0].defined() && !grad_scale_out.defined()) return out;
    const std::optional<at::Tensor> grad =
        grad_outputs[0].defined() ? std::optional<at::Tensor>(grad_outputs[0]) : std::nullopt;
    const std::optional<at::Tensor> grad_scale =
        grad_scale_out.defined() ? std::optional<at::Tensor>(grad_scale_out) : std::nullopt;
    out[0] = ops::_abs_percentile_int_quant_backward(
        grad, grad_scale, saved[0], saved[1], saved[2], saved[3], ctx->saved_data["signed"].toBool(),
        ctx->saved_data["narrow_range"].toBool(), ctx->saved_data["rounding_mode"].toStringRef(),
        ctx->saved_data["clamp_ste"].toBool(), ctx->saved_data["relu"].toBool());
    return out;
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> abs_percentile_int_quant_autograd(
    const at::Tensor& x, const std::optional<at::Tensor>& zero_grad_param, const at::Tensor& bit_width, int64_t k,
    bool is_signed, bool narrow_range, std::optional<double> scaling_min_val, c10::string_view rounding_mode,
    bool clamp_ste, bool relu) {
  TORCH_CHECK(!(at::GradMode::is_enabled() && bit_width.requires_grad()), "brevitas_cpp::abs_percentile_int_quant: ",
              "bit_width must not require grad (it gets no gradient here; a learned bit width takes the ",
              "unfused quantizer)");
  const at::Tensor param = zero_grad_param.has_value() ? *zero_grad_param : at::Tensor();
  const bool param_grad = param.defined() && param.requires_grad();
  if (!(at::GradMode::is_enabled() && (x.requires_grad() || param_grad))) {  // Inference: nothing saved.
    at::AutoDispatchBelowADInplaceOrView guard;
    return ops::abs_percentile_int_quant(x, zero_grad_param, bit_width, k, is_signed, narrow_range, scaling_min_val,
                                         rounding_mode, clamp_ste, relu);
  }
  auto out = AbsPercentileIntQuantFunction::apply(x, zero_grad_param, bit_width, k, is_signed, narrow_range,
                                                  scaling_min_val, rounding_mode, clamp_ste, relu);
  return {out[0], out[1], out[2], out[3]};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("abs_percentile_int_quant", TORCH_FN(abs_percentile_int_quant_autograd));
  m.impl("_abs_percentile_int_quant_backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace brevitas_cpp::autograd
