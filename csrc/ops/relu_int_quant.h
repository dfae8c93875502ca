#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <array>
#include <tuple>

namespace brevitas_cpp::ops {

// int_quant(relu(x), ...) in one pass: QuantReLU's activation and quantizer, without the
// intermediate relu(x) (a full write and read forward, and ReLU's own backward pass). The
// same numbers as torch.relu followed by int_quant, gradients included.
at::Tensor relu_int_quant(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                          const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                          c10::string_view rounding_mode, bool clamp_ste);

// Gradients (x, scale, zero_point, bit_width) of relu_int_quant for the outputs selected by
// output_mask (unselected ones undefined): int_quant's at relu(x), then ReLU's backward for x.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> _relu_int_quant_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
    const at::Tensor& bit_width, bool is_signed, bool narrow_range, c10::string_view rounding_mode, bool clamp_ste,
    std::array<bool, 4> output_mask);

namespace detail {
// _relu_int_quant_backward's arguments, as every kernel needs them (int_quant's checks with x
// given, and grad of x's shape and dtype).
void check_relu_int_quant_backward_args(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale,
                                        const at::Tensor& zero_point, const at::Tensor& bit_width,
                                        c10::string_view rounding_mode, bool clamp_ste,
                                        std::array<bool, 4> output_mask);
}  // namespace detail

}  // namespace brevitas_cpp::ops
