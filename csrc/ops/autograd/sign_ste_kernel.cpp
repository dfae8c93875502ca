#include "ops/autograd/ste_function.h"
#include "ops/sign_ste.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

namespace brevitas_cpp::autograd {
namespace {

// Forward |x|, backward grad * binary_sign(x), itself the op _abs_binary_sign_grad_backward.
class AbsBinarySignGradFunction : public torch::autograd::Function<AbsBinarySignGradFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({x});
    return ops::abs_binary_sign_grad(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    if (!grad[0].defined()) return {at::Tensor()};
    return {ops::_abs_binary_sign_grad_backward(grad[0], ctx->get_saved_variables()[0])};
  }
};

at::Tensor abs_binary_sign_grad_autograd(const at::Tensor& x) {
  return AbsBinarySignGradFunction::apply(x);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("binary_sign_ste", TORCH_FN((ste_autograd<ops::binary_sign_ste>)));
  m.impl("ternary_sign_ste", TORCH_FN((ste_autograd<ops::ternary_sign_ste>)));
  m.impl("abs_binary_sign_grad", TORCH_FN(abs_binary_sign_grad_autograd));
  // Backward ops are not differentiable again: say so instead of returning wrong zeros.
  m.impl("_abs_binary_sign_grad_backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace brevitas_cpp::autograd
