// Autograd of the collective mean over ranks. Every rank's output is the same mean
// m = (x_0 + ... + x_{R-1}) / R, so dL/dx_r = sum over ranks q of (dL_q/dm) / R: the mean over
// the ranks of the incoming gradients, i.e. the op itself on the gradient. (The public
// stats_all_reduce_mean is differentiable through the ops it calls, see
// ops/distributed/stats_all_reduce_kernel.cpp.)
#include "ops/stats_all_reduce.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

#include <string>

namespace brevitas_cpp::autograd {
namespace {

class AllReduceMeanFunction : public torch::autograd::Function<AllReduceMeanFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const std::string& group_name) {
    at::AutoDispatchBelowADInplaceOrView guard;
    // The backward reduces over the ranks the forward did, even if the setting changes since.
    ctx->saved_data["group_name"] = group_name;
    return ops::_all_reduce_mean(x, group_name);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    // grad[0] is defined (materialised zeros if unused): every rank must join the collective.
    const std::string group_name = ctx->saved_data["group_name"].toStringRef();
    return {ops::_all_reduce_mean(grad[0], group_name), at::Tensor()};
  }
};

at::Tensor all_reduce_mean_autograd(const at::Tensor& x, c10::string_view group_name) {
  return AllReduceMeanFunction::apply(x, std::string(group_name));
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("_all_reduce_mean", TORCH_FN(all_reduce_mean_autograd));
  // A maximum of statistics: no gradient flows through it (an error if one is asked for).
  m.impl("_all_reduce_max", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace brevitas_cpp::autograd
