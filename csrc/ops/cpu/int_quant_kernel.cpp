#include "ops/cpu/int_quant_loops.h"
#include "ops/cpu/kernels.h"

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

using namespace int_quant_loops;

namespace {
constexpr const char* kOp = "int_quant";
}  // namespace

at::Tensor int_quant_cpu(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                         const at::Tensor& bit_width, bool is_signed, bool narrow_range, c10::string_view rounding_mode,
                         bool /*clamp_ste: backward only*/) {
  return std::get<0>(
      forward<false>(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, false, kOp));
}

std::tuple<at::Tensor, at::Tensor> int_quant_with_mask_cpu(const at::Tensor& x, const at::Tensor& scale,
                                                           const at::Tensor& zero_point, const at::Tensor& bit_width,
                                                           bool is_signed, bool narrow_range,
                                                           c10::string_view rounding_mode) {
  return forward<false>(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, true, kOp);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> int_quant_backward_cpu(
    const at::Tensor& grad, const std::optional<at::Tensor>& x_opt, const std::optional<at::Tensor>& mask_opt,
    const at::Tensor& scale, const at::Tensor& zero_point, const at::Tensor& bit_width, bool is_signed,
    bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, std::array<bool, 4> output_mask) {
  const auto args = ops::detail::check_int_quant_backward_args(grad, x_opt, mask_opt, scale, zero_point, bit_width,
                                                               rounding_mode, clamp_ste, output_mask);
  const at::Tensor& ref = args.ref;
  const bool has_mask = args.has_mask, want_params = args.want_params;
  const RoundingMode mode = args.mode;
  const int64_t b = check_bit_width(bit_width, "_int_quant_backward");
  check_scale(scale, ScaleRange::kNormal, "_int_quant_backward");  // the forward's check, for direct calls

  at::Tensor gx = output_mask[0] ? empty_output_like(ref, grad.scalar_type()) : at::Tensor();
  at::Tensor gs, gz, gb;  // With clamp_ste, bit_width gets no gradient (TensorClampSte).
  if (!output_mask[0] && !want_params) return {gx, gs, gz, gb};
  const int64_t n = grad.numel();
  // The memory order every tensor is walked in: dx's, else that of x (made dense if need be).
  const at::Tensor layout = gx.defined() ? gx : dense_or_contiguous(ref);
  const at::Tensor gd = with_layout_of(grad, layout);

  // Only dx, and no x needed for it: from the saved mask, or straight through (clamp_ste).
  if (!want_params && (clamp_ste || has_mask)) {
    if (gx.defined() && n > 0) {
      const ParamLayout L = make_param_layout(gx, {scale}, grad.scalar_type());
      const at::Tensor md = clamp_ste ? at::Tensor() : with_layout_of(*mask_opt, gx);
      BREVITAS_CPP_DISPATCH_FLOATING(grad.scalar_type(), "_int_quant_backward", [&] {
        grad_input_loop<scalar_t>(gd.const_data_ptr<scalar_t>(), md.defined() ? md.const_data_ptr<bool>() : nullptr,
                                  gx.mutable_data_ptr<scalar_t>(), L, n);
      });
    }
    return {gx, gs, gz, gb};
  }

  return backward_from_x<false>(gd, *x_opt, layout, gx, scale, zero_point, bit_width, is_signed, narrow_range, mode,
                                clamp_ste, output_mask, b);
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
