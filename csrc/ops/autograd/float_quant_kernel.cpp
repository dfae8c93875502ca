// Autograd of float_quant: both gradients from _float_quant_backward, which recomputes the
// forward from x (nothing but x and scale is saved).
#include "ops/float_quant.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <string>

namespace brevitas_cpp::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class FloatQuantFunction : public torch::autograd::Function<FloatQuantFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& scale,
                            int64_t exponent_bit_width, int64_t mantissa_bit_width, int64_t exponent_bias,
                            double max_value, bool is_signed, bool saturating, bool inf_values, bool nan_values,
                            const std::string& rounding_mode) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["e"] = exponent_bit_width;
    ctx->saved_data["m"] = mantissa_bit_width;
    ctx->saved_data["bias"] = exponent_bias;
    ctx->saved_data["max_value"] = max_value;
    ctx->saved_data["signed"] = is_signed;
    ctx->saved_data["saturating"] = saturating;
    ctx->saved_data["inf_values"] = inf_values;
    ctx->saved_data["nan_values"] = nan_values;
    ctx->saved_data["rounding_mode"] = rounding_mode;
    ctx->save_for_backward({x, scale});
    return ops::float_quant(x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value, is_signed,
                            saturating, inf_values, nan_values, rounding_mode);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list out(11);
    const at::Tensor& grad = grad_outputs[0];
    if (!grad.defined()) return out;
    const auto saved = ctx->get_saved_variables();
    const auto& d = ctx->saved_data;
    auto [gx, gs] = ops::_float_quant_backward(
        grad, saved[0], saved[1], d.at("e").toInt(), d.at("m").toInt(), d.at("bias").toInt(),
        d.at("max_value").toDouble(), d.at("signed").toBool(), d.at("saturating").toBool(), d.at("inf_values").toBool(),
        d.at("nan_values").toBool(), d.at("rounding_mode").toStringRef(),
        {ctx->needs_input_grad(0), ctx->needs_input_grad(1)});
    out[0] = gx;
    out[1] = gs;
    return out;
  }
};

at::Tensor float_quant_autograd(const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
                                int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed,
                                bool saturating, bool inf_values, bool nan_values, c10::string_view rounding_mode) {
  if (!(at::GradMode::is_enabled() && (x.requires_grad() || scale.requires_grad()))) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return ops::float_quant(x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value, is_signed,
                            saturating, inf_values, nan_values, rounding_mode);
  }
  return FloatQuantFunction::apply(x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value,
                                   is_signed, saturating, inf_values, nan_values, std::string(rounding_mode));
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("float_quant", TORCH_FN(float_quant_autograd));
  m.impl("_float_quant_backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace brevitas_cpp::autograd
