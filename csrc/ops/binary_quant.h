#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace brevitas_cpp::ops {

// binary_sign(x) * scale (Brevitas's BinaryQuant); the sign is straight-through.
at::Tensor binary_quant(const at::Tensor& x, const at::Tensor& scale);
// binary_sign(tensor_clamp(x, -scale, scale)) * scale (Brevitas's ClampedBinaryQuant).
at::Tensor clamped_binary_quant(const at::Tensor& x, const at::Tensor& scale);

// Gradients (x, scale) selected by output_mask; unselected ones are undefined.
// binary_quant's backward needs x only for the scale gradient.
std::tuple<at::Tensor, at::Tensor> _binary_quant_backward(const at::Tensor& grad, const std::optional<at::Tensor>& x,
                                                          const at::Tensor& scale, std::array<bool, 2> output_mask);
std::tuple<at::Tensor, at::Tensor> _clamped_binary_quant_backward(const at::Tensor& grad, const at::Tensor& x,
                                                                  const at::Tensor& scale,
                                                                  std::array<bool, 2> output_mask);

namespace detail {
// Checks shared by the CPU and Meta kernels of every op quantizing x with a scale.
void check_scaled_quant_args(const at::Tensor& x, const at::Tensor& scale, const char* op);

// The checks of a scaled op's backward: those of the forward, and grad with x's dtype and shape.
void check_scaled_quant_backward_args(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale,
                                      const char* op);

// What _binary_quant_backward computes with: x, or grad standing in for it when only x's
// gradient (which does not depend on x) is asked; raises when the scale's is asked without x.
const at::Tensor& binary_quant_backward_input(const at::Tensor& grad, const std::optional<at::Tensor>& x,
                                              std::array<bool, 2> output_mask);
}  // namespace detail

}  // namespace brevitas_cpp::ops
