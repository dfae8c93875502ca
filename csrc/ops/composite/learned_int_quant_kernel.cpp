// learned_int_quant as the composition it replaces, with the existing ops: the kernel of every
// device without its own (CompositeExplicitAutograd). It serves CUDA: each step runs on the
// device's own kernels (scalar_signed_clamp_min_ste's, aten div, int_quant's / relu_int_quant's
// and their backward ops), and no value is read on the host. A CUDA kernel that reads value and
// threshold inside int_quant's kernel (no scale round trip through memory, fewer launches) is
// future work.
#include "ops/clamp_ste.h"
#include "ops/int_quant.h"
#include "ops/learned_int_quant.h"
#include "ops/relu_int_quant.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace brevitas_cpp::composite {
namespace {

std::tuple<at::Tensor, at::Tensor> learned_int_quant(const at::Tensor& x, const at::Tensor& value,
                                                     const at::Tensor& threshold, const at::Tensor& zero_point,
                                                     const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                                     std::optional<double> min_val, c10::string_view rounding_mode,
                                                     bool clamp_ste, bool relu) {
  ops::detail::check_learned_int_quant_args(x, value, threshold, zero_point, bit_width, min_val, rounding_mode);
  const at::Tensor clamped = min_val.has_value() ? ops::scalar_signed_clamp_min_ste(value, *min_val) : value;
  at::Tensor scale = at::div(clamped, threshold);
  at::Tensor y =
      relu ? ops::relu_int_quant(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste)
           : ops::int_quant(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
  return {std::move(y), std::move(scale)};
}

// int_quant's (relu_int_quant's) backward for x and the scale, then autograd's steps through
// the composition: the scale's two gradients added, DivBackward's grad / threshold, the clamp
// straight through.
std::tuple<at::Tensor, at::Tensor> learned_int_quant_backward(
    const std::optional<at::Tensor>& grad_y, const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
    const at::Tensor& scale, const at::Tensor& threshold, const at::Tensor& zero_point, const at::Tensor& bit_width,
    bool is_signed, bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, bool relu,
    std::array<bool, 2> output_mask) {
  ops::detail::check_learned_int_quant_backward_args(grad_y, grad_scale, x, scale, threshold, zero_point, bit_width,
                                                     rounding_mode);
  const bool has_gy = grad_y.has_value() && grad_y->defined();
  at::Tensor gx, gs;
  if (has_gy && (output_mask[0] || output_mask[1])) {
    const std::array<bool, 4> mask{output_mask[0], output_mask[1], false, false};
    std::tie(gx, gs, std::ignore, std::ignore) =
        relu ? ops::_relu_int_quant_backward(*grad_y, x, scale, zero_point, bit_width, is_signed, narrow_range,
                                             rounding_mode, clamp_ste, mask)
             : ops::_int_quant_backward(*grad_y, x, std::nullopt, scale, zero_point, bit_width, is_signed, narrow_range,
                                        rounding_mode, clamp_ste, mask);
  }
  // gs is defined here when y got a gradient (output_mask[1] asked int_quant's backward for it).
  at::Tensor gv = output_mask[1] ? ops::detail::learned_value_grad(gs, grad_scale, threshold) : at::Tensor();
  return {output_mask[0] ? gx : at::Tensor(), gv};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("learned_int_quant", TORCH_FN(learned_int_quant));
  m.impl("_learned_int_quant_backward", TORCH_FN(learned_int_quant_backward));
}

}  // namespace brevitas_cpp::composite
