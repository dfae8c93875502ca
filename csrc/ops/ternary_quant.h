#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>

namespace brevitas_cpp::ops {

// (mask * sign(x)) * scale with mask = |x| > threshold * scale (Brevitas's TernaryQuant);
// the sign is straight-through, the mask is not differentiated.
at::Tensor ternary_quant(const at::Tensor& x, const at::Tensor& scale, double threshold);

// Gradients (x, scale) selected by output_mask; unselected ones are undefined.
std::tuple<at::Tensor, at::Tensor> _ternary_quant_backward(const at::Tensor& grad, const at::Tensor& x,
                                                           const at::Tensor& scale, double threshold,
                                                           std::array<bool, 2> output_mask);

namespace detail {
void check_threshold(double threshold, const char* op);
}  // namespace detail

}  // namespace brevitas_cpp::ops
