#pragma once

#include "ops/common/rounding.h"

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <array>
#include <optional>
#include <tuple>

namespace brevitas_cpp::ops {

// y = (clamp(round_mode(x / scale + zero_point), min_int, max_int) - zero_point) * scale,
// one pass over x. scale and zero_point broadcast to x (per tensor, per channel along any
// dim, per group through a view); bit_width holds one integer in [1, 32]. With clamp_ste the
// clamp passes x's gradient straight through (TensorClampSte); without it the clamp masks
// x's gradient and is differentiable in its bounds (TensorClamp), hence in bit_width.
at::Tensor int_quant(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                     const at::Tensor& bit_width, bool is_signed, bool narrow_range, c10::string_view rounding_mode,
                     bool clamp_ste);

// Forward that also returns the bool mask of elements the clamp let through (the only
// thing backward needs when just x requires grad): one byte per element.
std::tuple<at::Tensor, at::Tensor> _int_quant_with_mask(const at::Tensor& x, const at::Tensor& scale,
                                                        const at::Tensor& zero_point, const at::Tensor& bit_width,
                                                        bool is_signed, bool narrow_range,
                                                        c10::string_view rounding_mode);

// Gradients (x, scale, zero_point, bit_width) of int_quant for the outputs selected by
// output_mask; unselected ones are undefined. Needs x for any parameter gradient; with only
// x's gradient it uses `mask` (clamp_ste = false) or nothing (clamp_ste = true).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> _int_quant_backward(
    const at::Tensor& grad, const std::optional<at::Tensor>& x, const std::optional<at::Tensor>& mask,
    const at::Tensor& scale, const at::Tensor& zero_point, const at::Tensor& bit_width, bool is_signed,
    bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, std::array<bool, 4> output_mask);

namespace detail {
// Shape, dtype and device checks shared by the CPU and Meta kernels.
void check_int_quant_args(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                          const at::Tensor& bit_width, c10::string_view rounding_mode, const char* op);
// _int_quant_backward's arguments, checked as every kernel (CPU, CUDA, composite, Meta) needs
// them: shapes, dtypes, devices, the rounding mode, the bit width's dtype, and that x or mask
// is there for the gradients output_mask asks for.
struct IntQuantBackwardArgs {
  const at::Tensor& ref;  // gives dx's layout: x, else mask, else grad
  bool has_x;
  bool has_mask;
  bool want_params;  // a gradient of scale, zero_point or (without clamp_ste) bit_width
  RoundingMode mode;
};
IntQuantBackwardArgs check_int_quant_backward_args(const at::Tensor& grad, const std::optional<at::Tensor>& x,
                                                   const std::optional<at::Tensor>& mask, const at::Tensor& scale,
                                                   const at::Tensor& zero_point, const at::Tensor& bit_width,
                                                   c10::string_view rounding_mode, bool clamp_ste,
                                                   std::array<bool, 4> output_mask,
                                                   const char* op = "_int_quant_backward");
}  // namespace detail

}  // namespace brevitas_cpp::ops
