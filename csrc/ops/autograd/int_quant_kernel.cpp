#include "ops/autograd/int_quant_config.h"
#include "ops/int_quant.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <string>

namespace brevitas_cpp::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What forward keeps for backward. Only x needs a gradient: the clamp's pass mask, one
// byte per element (nothing at all with clamp_ste). Any parameter needs one: x itself,
// from which backward recomputes the forward.
class IntQuantFunction : public torch::autograd::Function<IntQuantFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& scale,
                            const at::Tensor& zero_point, const at::Tensor& bit_width, bool is_signed,
                            bool narrow_range, c10::string_view rounding_mode, bool clamp_ste) {
    at::AutoDispatchBelowADInplaceOrView guard;
    IntQuantConfig{is_signed, narrow_range, std::string(rounding_mode), clamp_ste}.save(ctx);
    const bool params_need_grad = scale.requires_grad() || zero_point.requires_grad() || bit_width.requires_grad();
    if (params_need_grad) {
      ctx->save_for_backward({x, at::Tensor(), scale, zero_point, bit_width});
      return ops::int_quant(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
    }
    if (clamp_ste) {
      ctx->save_for_backward({at::Tensor(), at::Tensor(), scale, zero_point, bit_width});
      return ops::int_quant(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
    }
    auto [y, mask] = ops::_int_quant_with_mask(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode);
    ctx->save_for_backward({at::Tensor(), mask, scale, zero_point, bit_width});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& grad = grad_outputs[0];
    if (!grad.defined()) return variable_list(8);
    auto opt = [](const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; };
    const IntQuantConfig c = IntQuantConfig::load(ctx);
    auto [gx, gs, gz, gb] =
        ops::_int_quant_backward(grad, opt(saved[0]), opt(saved[1]), saved[2], saved[3], saved[4], c.is_signed,
                                 c.narrow_range, c.rounding_mode, c.clamp_ste, int_quant_grad_mask(ctx));
    return int_quant_grads(gx, gs, gz, gb);
  }
};

at::Tensor int_quant_autograd(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                              const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                              c10::string_view rounding_mode, bool clamp_ste) {
  if (!int_quant_needs_graph(x, scale, zero_point, bit_width)) {  // Inference: plain forward, nothing saved.
    at::AutoDispatchBelowADInplaceOrView guard;
    return ops::int_quant(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
  }
  return IntQuantFunction::apply(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("int_quant", TORCH_FN(int_quant_autograd));
  m.impl("_int_quant_with_mask", torch::autograd::autogradNotImplementedFallback());
  m.impl("_int_quant_backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace brevitas_cpp::autograd
