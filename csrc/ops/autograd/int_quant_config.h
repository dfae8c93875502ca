// The non-tensor arguments of the int_quant family (int_quant, relu_int_quant), kept in an
// autograd context between forward and backward.
#pragma once

#include <torch/autograd.h>

#include <string>

namespace brevitas_cpp::autograd {

struct IntQuantConfig {
  bool is_signed;
  bool narrow_range;
  std::string rounding_mode;
  bool clamp_ste;

  void save(torch::autograd::AutogradContext* ctx) const {
    ctx->saved_data["signed"] = is_signed;
    ctx->saved_data["narrow_range"] = narrow_range;
    ctx->saved_data["rounding_mode"] = rounding_mode;
    ctx->saved_data["clamp_ste"] = clamp_ste;
  }

  static IntQuantConfig load(torch::autograd::AutogradContext* ctx) {
    return {ctx->saved_data["signed"].toBool(), ctx->saved_data["narrow_range"].toBool(),
            ctx->saved_data["rounding_mode"].toStringRef(), ctx->saved_data["clamp_ste"].toBool()};
  }
};

// needs_input_grad of the four tensor inputs (x, scale, zero_point, bit_width).
inline std::array<bool, 4> int_quant_grad_mask(torch::autograd::AutogradContext* ctx) {
  return {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2), ctx->needs_input_grad(3)};
}

// Whether a call records a graph: grad mode on and a tensor input requiring grad.
inline bool int_quant_needs_graph(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                                  const at::Tensor& bit_width) {
  return at::GradMode::is_enabled() &&
         (x.requires_grad() || scale.requires_grad() || zero_point.requires_grad() || bit_width.requires_grad());
}

// backward's result: the four tensor inputs' gradients, none for the four other arguments.
inline torch::autograd::variable_list int_quant_grads(const at::Tensor& gx, const at::Tensor& gs, const at::Tensor& gz,
                                                      const at::Tensor& gb) {
  return {gx, gs, gz, gb, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
}

}  // namespace brevitas_cpp::autograd
