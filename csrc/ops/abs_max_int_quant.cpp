#include "ops/abs_max_int_quant.h"

#include "ops/common/bit_width_value.h"
#include "ops/common/checks.h"
#include "ops/common/op_handle.h"
#include "ops/common/rounding.h"

#include <ATen/Dispatch.h>
#include <c10/util/TypeCast.h>
#include <torch/library.h>

#include <cmath>

namespace brevitas_cpp::ops {

std::tuple<at::Tensor, at::Tensor> abs_max_int_quant(const at::Tensor& w, const at::Tensor& bit_width,
                                                     std::optional<int64_t> channel_dim, bool is_signed,
                                                     bool narrow_range, std::optional<double> scaling_min_val,
                                                     c10::string_view rounding_mode, bool clamp_ste) {
  static auto op = op_handle<decltype(abs_max_int_quant)>("brevitas_cpp::abs_max_int_quant");
  return op.call(w, bit_width, channel_dim, is_signed, narrow_range, scaling_min_val, rounding_mode, clamp_ste);
}

at::Tensor _abs_max_int_quant_backward(const at::Tensor& grad, const std::optional<at::Tensor>& grad_scale,
                                       const at::Tensor& w, const at::Tensor& scale, const at::Tensor& bit_width,
                                       std::optional<int64_t> channel_dim, bool is_signed, bool narrow_range,
                                       std::optional<double> scaling_min_val, c10::string_view rounding_mode,
                                       bool clamp_ste) {
  static auto op = op_handle<decltype(_abs_max_int_quant_backward)>("brevitas_cpp::_abs_max_int_quant_backward");
  return op.call(grad, grad_scale, w, scale, bit_width, channel_dim, is_signed, narrow_range, scaling_min_val,
                 rounding_mode, clamp_ste);
}

namespace detail {

int64_t check_abs_max_int_quant_args(const at::Tensor& w, const at::Tensor& bit_width,
                                     std::optional<int64_t> channel_dim, std::optional<double> scaling_min_val,
                                     c10::string_view rounding_mode, const char* op) {
  check_floating(w, op, "w");
  check_single_value(bit_width, op, "bit_width");
  check_bit_width_dtype(bit_width, op);
  check_same_device(w, {{&bit_width, "bit_width"}}, op);
  parse_rounding_mode(rounding_mode, op);
  TORCH_CHECK(w.sym_numel() != 0, "brevitas_cpp::", op, ": w must not be empty (its abs max is undefined), got shape ",
              w.sym_sizes());
  int64_t dim = -1;
  if (channel_dim.has_value()) {
    const int64_t n = w.dim();
    const int64_t d = *channel_dim;
    TORCH_CHECK(n >= 1 && d >= -n && d < n, "brevitas_cpp::", op, ": channel_dim must be in [", -n, ", ", n,
                ") for w of shape ", w.sym_sizes(), ", got ", d);
    dim = d < 0 ? d + n : d;
  }
  check_scaling_min_val(scaling_min_val, w, op, "w");
  return dim;
}

std::vector<c10::SymInt> abs_max_scale_shape(const at::Tensor& w, int64_t dim) {
  if (dim < 0) return {};
  std::vector<c10::SymInt> shape(static_cast<size_t>(w.dim()), c10::SymInt(1));
  shape[static_cast<size_t>(dim)] = w.sym_size(dim);
  return shape;
}

int64_t check_abs_max_int_quant_backward_args(const at::Tensor& grad, const std::optional<at::Tensor>& grad_scale,
                                              const at::Tensor& w, const at::Tensor& scale, const at::Tensor& bit_width,
                                              std::optional<int64_t> channel_dim, std::optional<double> scaling_min_val,
                                              c10::string_view rounding_mode) {
  constexpr const char* op = "_abs_max_int_quant_backward";
  const int64_t dim = check_abs_max_int_quant_args(w, bit_width, channel_dim, scaling_min_val, rounding_mode, op);
  check_same_dtype_as_input(grad, w, op, "grad");
  check_same_dtype_as_input(scale, w, op, "scale");
  check_same_device(w, {{&grad, "grad"}, {&scale, "scale"}}, op);
  if (grad_scale.has_value()) {
    check_same_dtype_as_input(*grad_scale, w, op, "grad_scale");
    check_same_device(w, {{&*grad_scale, "grad_scale"}}, op);
  }
  TORCH_CHECK(grad.sym_sizes() == w.sym_sizes(), "brevitas_cpp::", op, ": grad of shape ", grad.sym_sizes(),
              " must have the shape of w ", w.sym_sizes());
  const std::vector<c10::SymInt> shape = abs_max_scale_shape(w, dim);
  const c10::SymIntArrayRef want(shape);
  TORCH_CHECK(scale.sym_sizes() == want, "brevitas_cpp::", op, ": scale of shape ", scale.sym_sizes(),
              " must have the shape ", want, " (the forward's scale output)");
  TORCH_CHECK(!grad_scale.has_value() || grad_scale->sym_sizes() == want, "brevitas_cpp::", op,
              ": grad_scale of shape ", grad_scale.has_value() ? grad_scale->sym_sizes() : want,
              " must have the shape of scale ", want);
  return dim;
}

}  // namespace detail

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def(
      "abs_max_int_quant(Tensor w, Tensor bit_width, int? channel_dim, bool signed, bool narrow_range, "
      "float? scaling_min_val=None, str rounding_mode=\"round\", bool clamp_ste=False) -> (Tensor, Tensor)");
  m.def(
      "_abs_max_int_quant_backward(Tensor grad, Tensor? grad_scale, Tensor w, Tensor scale, Tensor bit_width, "
      "int? channel_dim, bool signed, bool narrow_range, float? scaling_min_val, str rounding_mode, "
      "bool clamp_ste) -> Tensor");
}

}  // namespace brevitas_cpp::ops
