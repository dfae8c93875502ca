#include "ops/abs_percentile_int_quant.h"

#include "ops/common/checks.h"
#include "ops/common/op_handle.h"
#include "ops/common/rounding.h"

#include <torch/library.h>

namespace brevitas_cpp::ops {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> abs_percentile_int_quant(
    const at::Tensor& x, const std::optional<at::Tensor>& zero_grad_param, const at::Tensor& bit_width, int64_t k,
    bool is_signed, bool narrow_range, std::optional<double> scaling_min_val, c10::string_view rounding_mode,
    bool clamp_ste, bool relu) {
  static auto op = op_handle<decltype(abs_percentile_int_quant)>("brevitas_cpp::abs_percentile_int_quant");
  return op.call(x, zero_grad_param, bit_width, k, is_signed, narrow_range, scaling_min_val, rounding_mode, clamp_ste,
                 relu);
}

at::Tensor _abs_percentile_int_quant_backward(const std::optional<at::Tensor>& grad,
                                              const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
                                              const at::Tensor& scale, const at::Tensor& index,
                                              const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                              c10::string_view rounding_mode, bool clamp_ste, bool relu) {
  static auto op =
      op_handle<decltype(_abs_percentile_int_quant_backward)>("brevitas_cpp::_abs_percentile_int_quant_backward");
  return op.call(grad, grad_scale, x, scale, index, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste, relu);
}

namespace detail {

void check_abs_percentile_int_quant_args(const at::Tensor& x, const at::Tensor& bit_width, int64_t k,
                                         std::optional<double> scaling_min_val, c10::string_view rounding_mode,
                                         const char* op) {
  check_floating(x, op, "x");
  check_single_value(bit_width, op, "bit_width");
  check_bit_width_dtype(bit_width, op);
  check_same_device(x, {{&bit_width, "bit_width"}}, op);
  parse_rounding_mode(rounding_mode, op);
  TORCH_CHECK(x.sym_numel() != 0, "brevitas_cpp::", op,
              ": x must not be empty (its percentile is undefined), got shape ", x.sym_sizes());
  TORCH_CHECK(k >= 1 && x.sym_numel() >= k, "brevitas_cpp::", op, ": k must be in [1, x.numel()] = [1, ", x.sym_numel(),
              "], got ", k);
  check_scaling_min_val(scaling_min_val, x, op, "x");
}

void check_abs_percentile_int_quant_backward_args(const std::optional<at::Tensor>& grad,
                                                  const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
                                                  const at::Tensor& scale, const at::Tensor& index,
                                                  const at::Tensor& bit_width, c10::string_view rounding_mode) {
  constexpr const char* op = "_abs_percentile_int_quant_backward";
  check_abs_percentile_int_quant_args(x, bit_width, 1, std::nullopt, rounding_mode, op);
  check_same_dtype_as_input(scale, x, op, "scale");
  check_same_device(x, {{&scale, "scale"}, {&index, "index"}}, op);
  if (grad.has_value()) {
    check_same_dtype_as_input(*grad, x, op, "grad");
    check_same_device(x, {{&*grad, "grad"}}, op);
    TORCH_CHECK(grad->sym_sizes() == x.sym_sizes(), "brevitas_cpp::", op, ": grad of shape ", grad->sym_sizes(),
                " must have the shape of x ", x.sym_sizes());
  }
  TORCH_CHECK(scale.dim() == 0, "brevitas_cpp::", op, ": scale must be 0-dim (the forward's scale output), got shape ",
              scale.sym_sizes());
  TORCH_CHECK(index.dim() == 0 && index.scalar_type() == at::kLong, "brevitas_cpp::", op,
              ": index must be a 0-dim int64 tensor (the forward's index output), got shape ", index.sym_sizes(),
              " and dtype ", index.scalar_type());
  if (grad_scale.has_value()) {
    check_same_dtype_as_input(*grad_scale, x, op, "grad_scale");
    check_same_device(x, {{&*grad_scale, "grad_scale"}}, op);
    TORCH_CHECK(grad_scale->dim() == 0, "brevitas_cpp::", op, ": grad_scale must be 0-dim (like scale), got shape ",
                grad_scale->sym_sizes());
  }
}

}  // namespace detail

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def(
      "abs_percentile_int_quant(Tensor x, Tensor? zero_grad_param, Tensor bit_width, int k, bool signed, "
      "bool narrow_range, float? scaling_min_val=None, str rounding_mode=\"round\", bool clamp_ste=False, "
      "bool relu=False) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "_abs_percentile_int_quant_backward(Tensor? grad, Tensor? grad_scale, Tensor x, Tensor scale, Tensor index, "
      "Tensor bit_width, bool signed, bool narrow_range, str rounding_mode, bool clamp_ste, bool relu) -> Tensor");
}

}  // namespace brevitas_cpp::ops
