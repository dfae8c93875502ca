#include "ops/cpu/int_quant_loops.h"
#include "ops/cpu/kernels.h"
#include "ops/relu_int_quant.h"

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

using namespace int_quant_loops;

at::Tensor relu_int_quant_cpu(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                              const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                              c10::string_view rounding_mode, bool /*clamp_ste: backward only*/) {
  return std::get<0>(
      forward<true>(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, false, "relu_int_quant"));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> relu_int_quant_backward_cpu(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
    const at::Tensor& bit_width, bool is_signed, bool narrow_range, c10::string_view rounding_mode, bool clamp_ste,
    std::array<bool, 4> output_mask) {
  constexpr const char* kOp = "_relu_int_quant_backward";
  ops::detail::check_relu_int_quant_backward_args(grad, x, scale, zero_point, bit_width, rounding_mode, clamp_ste,
                                                  output_mask);
  const RoundingMode mode = parse_rounding_mode(rounding_mode, kOp);
  const int64_t b = check_bit_width(bit_width, kOp);
  check_scale(scale, ScaleRange::kNormal, kOp);  // the forward's check, for direct calls
  at::Tensor gx = output_mask[0] ? empty_output_like(x, grad.scalar_type()) : at::Tensor();
  const bool want_params = output_mask[1] || output_mask[2] || (output_mask[3] && !clamp_ste);
  if (!gx.defined() && !want_params) return {gx, at::Tensor(), at::Tensor(), at::Tensor()};
  // Every gradient reads x (ReLU's mask, the clamp's, the parameters' sums): one pass.
  const at::Tensor layout = gx.defined() ? gx : dense_or_contiguous(x);
  return backward_from_x<true>(with_layout_of(grad, layout), x, layout, gx, scale, zero_point, bit_width, is_signed,
                               narrow_range, mode, clamp_ste, output_mask, b);
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
