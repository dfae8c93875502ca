// learned_int_quant's CPU kernels: the scale as the composition computes it (the signed clamp's
// CPU kernel, then aten div), then int_quant's (relu_int_quant's) CPU loops and backward kernels
// of this instruction set, called directly: one dispatcher entry for the quantizer instead of
// three (and their autograd wrappers).
#include "ops/cpu/int_quant_loops.h"
#include "ops/cpu/kernels.h"
#include "ops/learned_int_quant.h"

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

using namespace int_quant_loops;

namespace {
constexpr const char* kOp = "learned_int_quant";
}  // namespace

std::tuple<at::Tensor, at::Tensor> learned_int_quant_cpu(const at::Tensor& x, const at::Tensor& value,
                                                         const at::Tensor& threshold, const at::Tensor& zero_point,
                                                         const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                                         std::optional<double> min_val, c10::string_view rounding_mode,
                                                         bool /*clamp_ste: backward only*/, bool relu) {
  ops::detail::check_learned_int_quant_args(x, value, threshold, zero_point, bit_width, min_val, rounding_mode);
  const at::Tensor clamped = min_val.has_value() ? scalar_signed_clamp_min_ste_cpu(value, *min_val) : value;
  at::Tensor scale = at::div(clamped, threshold);
  // forward<> checks the scale's values (normal, positive, finite) under this op's name.
  at::Tensor y = relu ? std::get<0>(forward<true>(x, scale, zero_point, bit_width, is_signed, narrow_range,
                                                  rounding_mode, false, kOp))
                      : std::get<0>(forward<false>(x, scale, zero_point, bit_width, is_signed, narrow_range,
                                                   rounding_mode, false, kOp));
  return {std::move(y), std::move(scale)};
}

std::tuple<at::Tensor, at::Tensor> learned_int_quant_backward_cpu(
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
        relu ? relu_int_quant_backward_cpu(*grad_y, x, scale, zero_point, bit_width, is_signed, narrow_range,
                                           rounding_mode, clamp_ste, mask)
             : int_quant_backward_cpu(*grad_y, x, std::nullopt, scale, zero_point, bit_width, is_signed, narrow_range,
                                      rounding_mode, clamp_ste, mask);
  }
  // gs is defined here when y got a gradient (output_mask[1] asked int_quant's backward for it).
  at::Tensor gv = output_mask[1] ? ops::detail::learned_value_grad(gs, grad_scale, threshold) : at::Tensor();
  return {output_mask[0] ? gx : at::Tensor(), gv};
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
