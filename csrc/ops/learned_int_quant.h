#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <array>
#include <optional>
#include <tuple>

namespace brevitas_cpp::ops {

// The learned phase of the stock activation quantizer (ParameterFromRuntimeStatsScaling once
// its statistics are collected, IntScaling, zero point, IntQuant) in one op and one autograd node:
//   clamped = scalar_signed_clamp_min_ste(value, min_val)   (value itself when min_val is None)
//   scale   = clamped / threshold                            (aten div, x's dtype)
//   y       = relu ? relu_int_quant(x, scale, zero_point, bit_width, ...)
//                  : int_quant(x, scale, zero_point, bit_width, ...)
// Returns (y, scale): the composition's values bit for bit. value and threshold have x's dtype
// and each broadcasts to x as int_quant's scale does (so scale, their broadcast, does too).
// Only x and value are differentiable; threshold, zero_point and bit_width are the
// quantizer's constants and must not require grad (the op raises rather than drop a gradient).
std::tuple<at::Tensor, at::Tensor> learned_int_quant(const at::Tensor& x, const at::Tensor& value,
                                                     const at::Tensor& threshold, const at::Tensor& zero_point,
                                                     const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                                     std::optional<double> min_val, c10::string_view rounding_mode,
                                                     bool clamp_ste, bool relu);

// Gradients (x, value) of learned_int_quant for the outputs selected by output_mask (unselected
// ones undefined), given the gradients of y (grad_y) and of scale (grad_scale), each None when
// that output got none, and the forward's x and scale output:
//   grad_x     = int_quant's (relu_int_quant's) gradient of x, from grad_y;
//   grad_value = (int_quant's gradient of scale from grad_y + grad_scale) / threshold
// with the clamp straight through, the float operations of autograd through the composition.
// grad_value has scale's shape (the broadcast of value and threshold): autograd reduces it to
// value's shape as it reduces the composition's DivBackward output.
std::tuple<at::Tensor, at::Tensor> _learned_int_quant_backward(
    const std::optional<at::Tensor>& grad_y, const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
    const at::Tensor& scale, const at::Tensor& threshold, const at::Tensor& zero_point, const at::Tensor& bit_width,
    bool is_signed, bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, bool relu,
    std::array<bool, 2> output_mask);

namespace detail {
// learned_int_quant's arguments, as every kernel needs them: x floating; value, threshold and
// zero_point of x's dtype, broadcasting to x; bit_width one value of a real dtype; one device;
// the rounding mode; min_val None or finite, >= 0 and representable in x's dtype (the checks of
// scalar_signed_clamp_min_ste). Metadata only: no tensor value is read.
void check_learned_int_quant_args(const at::Tensor& x, const at::Tensor& value, const at::Tensor& threshold,
                                  const at::Tensor& zero_point, const at::Tensor& bit_width,
                                  std::optional<double> min_val, c10::string_view rounding_mode);
// _learned_int_quant_backward's arguments: int_quant's checks on (x, scale, zero_point,
// bit_width); threshold of x's dtype broadcasting to scale; grad_y like x and grad_scale like
// scale (dtype, shape, device) where given.
void check_learned_int_quant_backward_args(const std::optional<at::Tensor>& grad_y,
                                           const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
                                           const at::Tensor& scale, const at::Tensor& threshold,
                                           const at::Tensor& zero_point, const at::Tensor& bit_width,
                                           c10::string_view rounding_mode);
// value's gradient from the scale's: int_quant's through y (grad_scale_from_y, undefined when y
// got no gradient) plus the scale output's (grad_scale), then DivBackward's grad / threshold,
// the clamp straight through: autograd's float operations through the composition, shared by
// the CPU and composite kernels. Undefined when neither gradient is.
at::Tensor learned_value_grad(const at::Tensor& grad_scale_from_y, const std::optional<at::Tensor>& grad_scale,
                              const at::Tensor& threshold);
}  // namespace detail

}  // namespace brevitas_cpp::ops
