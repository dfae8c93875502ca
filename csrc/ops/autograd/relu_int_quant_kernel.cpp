#include "ops/autograd/int_quant_config.h"
#include "ops/relu_int_quant.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <string>

namespace brevitas_cpp::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Keeps x (ReLU's mask and the clamp's are recomputed from it): the one tensor that relu and
// int_quant, run apart, would keep between them (relu's output), so no more memory.
class ReluIntQuantFunction : public torch::autograd::Function<ReluIntQuantFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& scale,
                            const at::Tensor& zero_point, const at::Tensor& bit_width, bool is_signed,
                            bool narrow_range, c10::string_view rounding_mode, bool clamp_ste) {
    at::AutoDispatchBelowADInplaceOrView guard;
    IntQuantConfig{is_signed, narrow_range, std::string(rounding_mode), clamp_ste}.save(ctx);
    ctx->save_for_backward({x, scale, zero_point, bit_width});
    return ops::relu_int_quant(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& grad = grad_outputs[0];
    if (!grad.defined()) return variable_list(8);
    const IntQuantConfig c = IntQuantConfig::load(ctx);
    auto [gx, gs, gz, gb] =
        ops::_relu_int_quant_backward(grad, saved[0], saved[1], saved[2], saved[3], c.is_signed, c.narrow_range,
                                      c.rounding_mode, c.clamp_ste, int_quant_grad_mask(ctx));
    return int_quant_grads(gx, gs, gz, gb);
  }
};

at::Tensor relu_int_quant_autograd(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                                   const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                   c10::string_view rounding_mode, bool clamp_ste) {
  if (!int_quant_needs_graph(x, scale, zero_point, bit_width)) {  // Inference: plain forward, nothing saved.
    at::AutoDispatchBelowADInplaceOrView guard;
    return ops::relu_int_quant(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
  }
  return ReluIntQuantFunction::apply(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode,
                                     clamp_ste);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("relu_int_quant", TORCH_FN(relu_int_quant_autograd));
  m.impl("_relu_int_quant_backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace brevitas_cpp::autograd
