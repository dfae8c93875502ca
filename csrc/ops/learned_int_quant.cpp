#include "ops/learned_int_quant.h"

#include "ops/clamp_ste.h"
#include "ops/common/checks.h"
#include "ops/common/op_handle.h"
#include "ops/common/rounding.h"
#include "ops/int_quant.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>

namespace brevitas_cpp::ops {

std::tuple<at::Tensor, at::Tensor> learned_int_quant(const at::Tensor& x, const at::Tensor& value,
                                                     const at::Tensor& threshold, const at::Tensor& zero_point,
                                                     const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                                     std::optional<double> min_val, c10::string_view rounding_mode,
                                                     bool clamp_ste, bool relu) {
  static auto op = op_handle<decltype(learned_int_quant)>("brevitas_cpp::learned_int_quant");
  return op.call(x, value, threshold, zero_point, bit_width, is_signed, narrow_range, min_val, rounding_mode, clamp_ste,
                 relu);
}

std::tuple<at::Tensor, at::Tensor> _learned_int_quant_backward(
    const std::optional<at::Tensor>& grad_y, const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
    const at::Tensor& scale, const at::Tensor& threshold, const at::Tensor& zero_point, const at::Tensor& bit_width,
    bool is_signed, bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, bool relu,
    std::array<bool, 2> output_mask) {
  static auto op = op_handle<decltype(_learned_int_quant_backward)>("brevitas_cpp::_learned_int_quant_backward");
  return op.call(grad_y, grad_scale, x, scale, threshold, zero_point, bit_width, is_signed, narrow_range, rounding_mode,
                 clamp_ste, relu, output_mask);
}

namespace detail {

void check_learned_int_quant_args(const at::Tensor& x, const at::Tensor& value, const at::Tensor& threshold,
                                  const at::Tensor& zero_point, const at::Tensor& bit_width,
                                  std::optional<double> min_val, c10::string_view rounding_mode) {
  constexpr const char* op = "learned_int_quant";
  // int_quant's checks, with value and threshold where int_quant has scale: each broadcasting
  // to x, their broadcast (the scale) does too.
  check_floating(x, op, "x");
  check_same_dtype_as_input(value, x, op, "value");
  check_same_dtype_as_input(threshold, x, op, "threshold");
  check_same_dtype_as_input(zero_point, x, op, "zero_point");
  check_broadcasts_to_input(value, x, op, "value");
  check_broadcasts_to_input(threshold, x, op, "threshold");
  check_broadcasts_to_input(zero_point, x, op, "zero_point");
  check_single_value(bit_width, op, "bit_width");
  check_bit_width_dtype(bit_width, op);
  check_same_device(
      x, {{&value, "value"}, {&threshold, "threshold"}, {&zero_point, "zero_point"}, {&bit_width, "bit_width"}}, op);
  parse_rounding_mode(rounding_mode, op);
  if (min_val.has_value()) {
    // scalar_signed_clamp_min_ste's checks (a magnitude: >= 0, not NaN, held by x's dtype, which
    // is value's), and finite: an infinite bound would make every scale infinite.
    TORCH_CHECK(std::isfinite(*min_val) && *min_val >= 0.0, "brevitas_cpp::", op,
                ": min_val must be a finite number >= 0 (or None), got ", *min_val);
    check_scalar_clamp_args(x, *min_val, std::nullopt, op);
  }
}

void check_learned_int_quant_backward_args(const std::optional<at::Tensor>& grad_y,
                                           const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
                                           const at::Tensor& scale, const at::Tensor& threshold,
                                           const at::Tensor& zero_point, const at::Tensor& bit_width,
                                           c10::string_view rounding_mode) {
  constexpr const char* op = "_learned_int_quant_backward";
  check_int_quant_args(x, scale, zero_point, bit_width, rounding_mode, op);
  check_bit_width_dtype(bit_width, op);
  check_same_dtype_as_input(threshold, x, op, "threshold");
  check_same_device(x, {{&threshold, "threshold"}}, op);
  // grad_value = grad / threshold must keep scale's shape.
  const auto ts = threshold.sym_sizes();
  const auto ss = scale.sym_sizes();
  bool ok = ts.size() <= ss.size();
  for (size_t i = 0; ok && i < ts.size(); ++i)
    ok = ts[ts.size() - 1 - i] == 1 || ts[ts.size() - 1 - i] == ss[ss.size() - 1 - i];
  TORCH_CHECK(ok, "brevitas_cpp::", op, ": threshold of shape ", ts, " does not broadcast to scale of shape ", ss,
              " (scale is the forward's value / threshold)");
  if (grad_y.has_value() && grad_y->defined()) {
    check_same_dtype_as_input(*grad_y, x, op, "grad_y");
    check_same_device(x, {{&*grad_y, "grad_y"}}, op);
    TORCH_CHECK(grad_y->sym_sizes() == x.sym_sizes(), "brevitas_cpp::", op, ": grad_y of shape ", grad_y->sym_sizes(),
                " must have the shape of x ", x.sym_sizes());
  }
  if (grad_scale.has_value() && grad_scale->defined()) {
    check_same_dtype_as_input(*grad_scale, x, op, "grad_scale");
    check_same_device(x, {{&*grad_scale, "grad_scale"}}, op);
    TORCH_CHECK(grad_scale->sym_sizes() == ss, "brevitas_cpp::", op, ": grad_scale of shape ", grad_scale->sym_sizes(),
                " must have the shape of scale ", ss);
  }
}

at::Tensor learned_value_grad(const at::Tensor& grad_scale_from_y, const std::optional<at::Tensor>& grad_scale,
                              const at::Tensor& threshold) {
  const bool has_gs = grad_scale.has_value() && grad_scale->defined();
  if (!grad_scale_from_y.defined() && !has_gs) return at::Tensor();
  // The two summed first, as the engine's input buffer sums them.
  const at::Tensor g =
      grad_scale_from_y.defined() ? (has_gs ? grad_scale_from_y + *grad_scale : grad_scale_from_y) : *grad_scale;
  return at::div(g, threshold);
}
}  // namespace detail

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def(
      "learned_int_quant(Tensor x, Tensor value, Tensor threshold, Tensor zero_point, Tensor bit_width, "
      "bool signed, bool narrow_range, float? min_val=None, str rounding_mode=\"round\", bool clamp_ste=False, "
      "bool relu=False) -> (Tensor, Tensor)");
  m.def(
      "_learned_int_quant_backward(Tensor? grad_y, Tensor? grad_scale, Tensor x, Tensor scale, Tensor threshold, "
      "Tensor zero_point, Tensor bit_width, bool signed, bool narrow_range, str rounding_mode, bool clamp_ste, "
      "bool relu, bool[2] output_mask) -> (Tensor, Tensor)");
}

}  // namespace brevitas_cpp::ops
