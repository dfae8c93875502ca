#include "ops/ternary_quant.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

namespace brevitas_cpp::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class TernaryQuantFunction : public torch::autograd::Function<TernaryQuantFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& scale, double threshold) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({x, scale});
    ctx->saved_data["threshold"] = threshold;
    return ops::ternary_quant(x, scale, threshold);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    if (!grad[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
    const auto saved = ctx->get_saved_variables();
    auto [gx, gs] = ops::_ternary_quant_backward(grad[0], saved[0], saved[1], ctx->saved_data["threshold"].toDouble(),
                                                 {ctx->needs_input_grad(0), ctx->needs_input_grad(1)});
    return {gx, gs, at::Tensor()};
  }
};

at::Tensor ternary_quant_autograd(const at::Tensor& x, const at::Tensor& scale, double threshold) {
  return TernaryQuantFunction::apply(x, scale, threshold);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("ternary_quant", TORCH_FN(ternary_quant_autograd));
  m.impl("_ternary_quant_backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace brevitas_cpp::autograd
