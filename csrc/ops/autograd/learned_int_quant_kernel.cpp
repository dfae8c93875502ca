#include "ops/learned_int_quant.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <string>

namespace brevitas_cpp::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kOp = "brevitas_cpp::learned_int_quant";

// One node for the clamp, the division and the quantizer. Keeps x (the composition's int_quant
// keeps it too once the scale needs a gradient; relu_int_quant always), the scale output and
// the three constants: value itself is not needed (the clamp passes its gradient straight).
class LearnedIntQuantFunction : public torch::autograd::Function<LearnedIntQuantFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& value,
                               const at::Tensor& threshold, const at::Tensor& zero_point, const at::Tensor& bit_width,
                               bool is_signed, bool narrow_range, std::optional<double> min_val,
                               c10::string_view rounding_mode, bool clamp_ste, bool relu) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [y, scale] = ops::learned_int_quant(x, value, threshold, zero_point, bit_width, is_signed, narrow_range,
                                             min_val, rounding_mode, clamp_ste, relu);
    ctx->saved_data["signed"] = is_signed;
    ctx->saved_data["narrow_range"] = narrow_range;
    ctx->saved_data["rounding_mode"] = std::string(rounding_mode);
    ctx->saved_data["clamp_ste"] = clamp_ste;
    ctx->saved_data["relu"] = relu;
    ctx->save_for_backward({x, scale, threshold, zero_point, bit_width});
    // As in the composition, scale carries a gradient only when value needs one.
    if (!value.requires_grad()) ctx->mark_non_differentiable({scale});
    // An unused output (the scale, usually) brings no zeros: the backward op takes None.
    ctx->set_materialize_grads(false);
    return {y, scale};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list out(11);
    const std::array<bool, 2> mask{ctx->needs_input_grad(0), ctx->needs_input_grad(1)};
    auto opt = [](const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; };
    const std::optional<at::Tensor> grad_y = opt(grad_outputs[0]);
    const std::optional<at::Tensor> grad_scale = opt(grad_outputs[1]);
    if (!(mask[0] || mask[1]) || (!grad_y.has_value() && !grad_scale.has_value())) return out;
    const auto saved = ctx->get_saved_variables();
    std::tie(out[0], out[1]) = ops::_learned_int_quant_backward(
        grad_y, grad_scale, saved[0], saved[1], saved[2], saved[3], saved[4], ctx->saved_data["signed"].toBool(),
        ctx->saved_data["narrow_range"].toBool(), ctx->saved_data["rounding_mode"].toStringRef(),
        ctx->saved_data["clamp_ste"].toBool(), ctx->saved_data["relu"].toBool(), mask);
    return out;
  }
};

std::tuple<at::Tensor, at::Tensor> learned_int_quant_autograd(const at::Tensor& x, const at::Tensor& value,
                                                              const at::Tensor& threshold, const at::Tensor& zero_point,
                                                              const at::Tensor& bit_width, bool is_signed,
                                                              bool narrow_range, std::optional<double> min_val,
                                                              c10::string_view rounding_mode, bool clamp_ste,
                                                              bool relu) {
  const bool grad_mode = at::GradMode::is_enabled();
  if (grad_mode) {
    // The quantizer's constants: a gradient this op would drop silently is refused instead.
    for (const auto& [t, name] : {std::pair{&threshold, "threshold"}, std::pair{&zero_point, "zero_point"},
                                  std::pair{&bit_width, "bit_width"}}) {
      TORCH_CHECK(!t->requires_grad(), kOp, ": ", name,
                  " must not require grad (it is a constant of the quantizer and gets no gradient here; "
                  "detach it, or use the unfused composition to learn it)");
    }
  }
  if (!(grad_mode && (x.requires_grad() || value.requires_grad()))) {  // Inference: nothing saved.
    at::AutoDispatchBelowADInplaceOrView guard;
    return ops::learned_int_quant(x, value, threshold, zero_point, bit_width, is_signed, narrow_range, min_val,
                                  rounding_mode, clamp_ste, relu);
  }
  auto out = LearnedIntQuantFunction::apply(x, value, threshold, zero_point, bit_width, is_signed, narrow_range,
                                            min_val, rounding_mode, clamp_ste, relu);
  return {out[0], out[1]};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("learned_int_quant", TORCH_FN(learned_int_quant_autograd));
  m.impl("_learned_int_quant_backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace brevitas_cpp::autograd
