#include "ops/common/checks.h"
#include "ops/common/param_layout.h"
#include "ops/int_quant.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace brevitas_cpp::meta {
namespace {

at::Tensor int_quant_meta(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                          const at::Tensor& bit_width, bool, bool, c10::string_view rounding_mode, bool) {
  ops::detail::check_int_quant_args(x, scale, zero_point, bit_width, rounding_mode, "int_quant");
  return empty_output_like(x);
}

std::tuple<at::Tensor, at::Tensor> int_quant_with_mask_meta(const at::Tensor& x, const at::Tensor& scale,
                                                            const at::Tensor& zero_point, const at::Tensor& bit_width,
                                                            bool, bool, c10::string_view rounding_mode) {
  ops::detail::check_int_quant_args(x, scale, zero_point, bit_width, rounding_mode, "int_quant");
  return {empty_output_like(x), empty_output_like(x, at::kBool)};
}

// Parameter gradients are contiguous tensors of the parameter's shape (see ParamLayout::fold_to).
at::Tensor empty_param_grad(const at::Tensor& p) {
  return at::empty_symint(p.sym_sizes(), p.options());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> int_quant_backward_meta(
    const at::Tensor& grad, const std::optional<at::Tensor>& x, const std::optional<at::Tensor>& mask,
    const at::Tensor& scale, const at::Tensor& zero_point, const at::Tensor& bit_width, bool, bool,
    c10::string_view rounding_mode, bool clamp_ste, std::array<bool, 4> output_mask) {
  const at::Tensor& ref = ops::detail::check_int_quant_backward_args(grad, x, mask, scale, zero_point, bit_width,
                                                                     rounding_mode, clamp_ste, output_mask)
                              .ref;
  return {output_mask[0] ? empty_output_like(ref, grad.scalar_type()) : at::Tensor(),
          output_mask[1] ? empty_param_grad(scale) : at::Tensor(),
          output_mask[2] ? empty_param_grad(zero_point) : at::Tensor(),
          output_mask[3] && !clamp_ste ? empty_param_grad(bit_width) : at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("int_quant", TORCH_FN(int_quant_meta));
  m.impl("_int_quant_with_mask", TORCH_FN(int_quant_with_mask_meta));
  m.impl("_int_quant_backward", TORCH_FN(int_quant_backward_meta));
}

}  // namespace brevitas_cpp::meta
