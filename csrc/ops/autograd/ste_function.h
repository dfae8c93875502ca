// Autograd of the straight-through estimators: the op's forward, an identity backward.
#pragma once

#include <torch/autograd.h>

namespace brevitas_cpp::autograd {

// Forward y = Fwd(x); backward passes the incoming gradient to x unchanged and gives none
// to the remaining (non-tensor or bound) arguments.
template <auto Fwd>
class SteFunction : public torch::autograd::Function<SteFunction<Fwd>> {
 public:
  template <typename... Rest>
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, Rest... rest) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->saved_data["num_rest"] = static_cast<int64_t>(sizeof...(Rest));
    return Fwd(x, rest...);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    torch::autograd::variable_list out{grad[0]};
    out.resize(1 + ctx->saved_data["num_rest"].toInt());
    return out;
  }
};

// The Autograd-key kernel of a straight-through op with forward Fwd.
template <auto Fwd, typename... Args>
at::Tensor ste_autograd(const at::Tensor& x, Args... args) {
  return SteFunction<Fwd>::apply(x, args...);
}

}  // namespace brevitas_cpp::autograd
