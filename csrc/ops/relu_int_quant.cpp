#include "ops/relu_int_quant.h"

#include "ops/common/op_handle.h"
#include "ops/int_quant.h"

#include <torch/library.h>

namespace brevitas_cpp::ops {

at::Tensor relu_int_quant(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                          const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                          c10::string_view rounding_mode, bool clamp_ste) {
  static auto op = op_handle<decltype(relu_int_quant)>("brevitas_cpp::relu_int_quant");
  return op.call(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> _relu_int_quant_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
    const at::Tensor& bit_width, bool is_signed, bool narrow_range, c10::string_view rounding_mode, bool clamp_ste,
    std::array<bool, 4> output_mask) {
  static auto op = op_handle<decltype(_relu_int_quant_backward)>("brevitas_cpp::_relu_int_quant_backward");
  return op.call(grad, x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste, output_mask);
}

namespace detail {
void check_relu_int_quant_backward_args(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale,
                                        const at::Tensor& zero_point, const at::Tensor& bit_width,
                                        c10::string_view rounding_mode, bool clamp_ste,
                                        std::array<bool, 4> output_mask) {
  // int_quant's backward checks with x given (x is always needed: ReLU's mask reads it).
  check_int_quant_backward_args(grad, x, std::nullopt, scale, zero_point, bit_width, rounding_mode, clamp_ste,
                                output_mask, "_relu_int_quant_backward");
}
}  // namespace detail

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def(
      "relu_int_quant(Tensor x, Tensor scale, Tensor zero_point, Tensor bit_width, bool signed, "
      "bool narrow_range, str rounding_mode=\"round\", bool clamp_ste=False) -> Tensor");
  m.def(
      "_relu_int_quant_backward(Tensor grad, Tensor x, Tensor scale, Tensor zero_point, Tensor bit_width, "
      "bool signed, bool narrow_range, str rounding_mode, bool clamp_ste, bool[4] output_mask) "
      "-> (Tensor, Tensor, Tensor, Tensor)");
}

}  // namespace brevitas_cpp::ops
