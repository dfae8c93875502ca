#include "ops/int_quant.h"

#include "ops/common/checks.h"
#include "ops/common/op_handle.h"
#include "ops/common/quant_math.h"

#include <torch/library.h>

namespace brevitas_cpp::ops {

at::Tensor int_quant(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                     const at::Tensor& bit_width, bool is_signed, bool narrow_range, c10::string_view rounding_mode,
                     bool clamp_ste) {
  static auto op = op_handle<decltype(int_quant)>("brevitas_cpp::int_quant");
  return op.call(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
}

std::tuple<at::Tensor, at::Tensor> _int_quant_with_mask(const at::Tensor& x, const at::Tensor& scale,
                                                        const at::Tensor& zero_point, const at::Tensor& bit_width,
                                                        bool is_signed, bool narrow_range,
                                                        c10::string_view rounding_mode) {
  static auto op = op_handle<decltype(_int_quant_with_mask)>("brevitas_cpp::_int_quant_with_mask");
  return op.call(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> _int_quant_backward(
    const at::Tensor& grad, const std::optional<at::Tensor>& x, const std::optional<at::Tensor>& mask,
    const at::Tensor& scale, const at::Tensor& zero_point, const at::Tensor& bit_width, bool is_signed,
    bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, std::array<bool, 4> output_mask) {
  static auto op = op_handle<decltype(_int_quant_backward)>("brevitas_cpp::_int_quant_backward");
  return op.call(grad, x, mask, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste,
                 output_mask);
}

namespace detail {
void check_int_quant_args(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                          const at::Tensor& bit_width, c10::string_view rounding_mode, const char* op) {
  check_floating(x, op, "x");
  check_same_dtype_as_input(scale, x, op, "scale");
  check_same_dtype_as_input(zero_point, x, op, "zero_point");
  check_broadcasts_to_input(scale, x, op, "scale");
  check_broadcasts_to_input(zero_point, x, op, "zero_point");
  check_single_value(bit_width, op, "bit_width");
  check_same_device(x, {{&scale, "scale"}, {&zero_point, "zero_point"}, {&bit_width, "bit_width"}}, op);
  parse_rounding_mode(rounding_mode, op);
}

IntQuantBackwardArgs check_int_quant_backward_args(const at::Tensor& grad, const std::optional<at::Tensor>& x,
                                                   const std::optional<at::Tensor>& mask, const at::Tensor& scale,
                                                   const at::Tensor& zero_point, const at::Tensor& bit_width,
                                                   c10::string_view rounding_mode, bool clamp_ste,
                                                   std::array<bool, 4> output_mask, const char* op) {
  const bool has_x = x.has_value() && x->defined();
  const bool has_mask = mask.has_value() && mask->defined();
  check_int_quant_args(has_x ? *x : grad, scale, zero_point, bit_width, rounding_mode, op);
  if (has_x) check_same_dtype_as_input(grad, *x, op, "grad");
  const at::Tensor& ref = has_x ? *x : (has_mask ? *mask : grad);
  TORCH_CHECK(grad.sym_sizes() == ref.sym_sizes(), "brevitas_cpp::", op, ": grad of shape ", grad.sym_sizes(),
              " must have the shape of x ", ref.sym_sizes());
  if (has_mask) {
    TORCH_CHECK(mask->scalar_type() == at::kBool, "brevitas_cpp::", op, ": mask must be a bool tensor, got ",
                mask->scalar_type());
    TORCH_CHECK(mask->sym_sizes() == grad.sym_sizes(), "brevitas_cpp::", op, ": mask of shape ", mask->sym_sizes(),
                " must have the shape of grad ", grad.sym_sizes());
    check_same_device(grad, {{&*mask, "mask"}}, op);
  }
  const bool want_params = output_mask[1] || output_mask[2] || (output_mask[3] && !clamp_ste);
  TORCH_CHECK(has_x || !want_params, "brevitas_cpp::", op,
              ": gradients of scale, zero_point or bit_width need x; got x = None");
  TORCH_CHECK(has_x || has_mask || clamp_ste, "brevitas_cpp::", op,
              ": without clamp_ste the gradient of x needs x or mask; got neither");
  check_bit_width_dtype(bit_width, op);
  return {ref, has_x, has_mask, want_params, parse_rounding_mode(rounding_mode, op)};
}
}  // namespace detail

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def(
      "int_quant(Tensor x, Tensor scale, Tensor zero_point, Tensor bit_width, bool signed, bool narrow_range, "
      "str rounding_mode=\"round\", bool clamp_ste=False) -> Tensor");
  m.def(
      "_int_quant_with_mask(Tensor x, Tensor scale, Tensor zero_point, Tensor bit_width, bool signed, "
      "bool narrow_range, str rounding_mode=\"round\") -> (Tensor, Tensor)");
  m.def(
      "_int_quant_backward(Tensor grad, Tensor? x, Tensor? mask, Tensor scale, Tensor zero_point, "
      "Tensor bit_width, bool signed, bool narrow_range, str rounding_mode, bool clamp_ste, "
      "bool[4] output_mask) -> (Tensor, Tensor, Tensor, Tensor)");
}

}  // namespace brevitas_cpp::ops
