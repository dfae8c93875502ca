#include "ops/binary_quant.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

namespace brevitas_cpp::autograd {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// binary_quant's x gradient is grad * scale: x is kept only when scale needs a gradient.
class BinaryQuantFunction : public torch::autograd::Function<BinaryQuantFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& scale) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({scale.requires_grad() ? x : at::Tensor(), scale});
    return ops::binary_quant(x, scale);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    if (!grad[0].defined()) return {at::Tensor(), at::Tensor()};
    const auto saved = ctx->get_saved_variables();
    const std::optional<at::Tensor> x = saved[0].defined() ? std::optional<at::Tensor>(saved[0]) : std::nullopt;
    auto [gx, gs] =
        ops::_binary_quant_backward(grad[0], x, saved[1], {ctx->needs_input_grad(0), ctx->needs_input_grad(1)});
    return {gx, gs};
  }
};

class ClampedBinaryQuantFunction : public torch::autograd::Function<ClampedBinaryQuantFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& scale) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({x, scale});
    return ops::clamped_binary_quant(x, scale);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    if (!grad[0].defined()) return {at::Tensor(), at::Tensor()};
    const auto saved = ctx->get_saved_variables();
    auto [gx, gs] = ops::_clamped_binary_quant_backward(grad[0], saved[0], saved[1],
                                                        {ctx->needs_input_grad(0), ctx->needs_input_grad(1)});
    return {gx, gs};
  }
};

at::Tensor binary_quant_autograd(const at::Tensor& x, const at::Tensor& scale) {
  return BinaryQuantFunction::apply(x, scale);
}
at::Tensor clamped_binary_quant_autograd(const at::Tensor& x, const at::Tensor& scale) {
  return ClampedBinaryQuantFunction::apply(x, scale);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("binary_quant", TORCH_FN(binary_quant_autograd));
  m.impl("clamped_binary_quant", TORCH_FN(clamped_binary_quant_autograd));
  m.impl("_binary_quant_backward", torch::autograd::autogradNotImplementedFallback());
  m.impl("_clamped_binary_quant_backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace brevitas_cpp::autograd
