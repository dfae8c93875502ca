#include "ops/binary_quant.h"

#include "ops/common/checks.h"
#include "ops/common/op_handle.h"

#include <torch/library.h>

namespace brevitas_cpp::ops {

at::Tensor binary_quant(const at::Tensor& x, const at::Tensor& scale) {
  static auto op = op_handle<decltype(binary_quant)>("brevitas_cpp::binary_quant");
  return op.call(x, scale);
}

at::Tensor clamped_binary_quant(const at::Tensor& x, const at::Tensor& scale) {
  static auto op = op_handle<decltype(clamped_binary_quant)>("brevitas_cpp::clamped_binary_quant");
  return op.call(x, scale);
}

std::tuple<at::Tensor, at::Tensor> _binary_quant_backward(const at::Tensor& grad, const std::optional<at::Tensor>& x,
                                                          const at::Tensor& scale, std::array<bool, 2> output_mask) {
  static auto op = op_handle<decltype(_binary_quant_backward)>("brevitas_cpp::_binary_quant_backward");
  return op.call(grad, x, scale, output_mask);
}

std::tuple<at::Tensor, at::Tensor> _clamped_binary_quant_backward(const at::Tensor& grad, const at::Tensor& x,
                                                                  const at::Tensor& scale,
                                                                  std::array<bool, 2> output_mask) {
  static auto op = op_handle<decltype(_clamped_binary_quant_backward)>("brevitas_cpp::_clamped_binary_quant_backward");
  return op.call(grad, x, scale, output_mask);
}

namespace detail {
void check_scaled_quant_args(const at::Tensor& x, const at::Tensor& scale, const char* op) {
  check_floating(x, op, "x");
  check_same_dtype_as_input(scale, x, op, "scale");
  check_broadcasts_to_input(scale, x, op, "scale");
  check_same_device(x, {{&scale, "scale"}}, op);
}

void check_scaled_quant_backward_args(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale,
                                      const char* op) {
  check_scaled_quant_args(x, scale, op);
  check_same_dtype_as_input(grad, x, op, "grad");
  TORCH_CHECK(grad.sizes() == x.sizes(), "brevitas_cpp::", op, ": grad of shape ", grad.sizes(),
              " must have the shape of x ", x.sizes());
}

const at::Tensor& binary_quant_backward_input(const at::Tensor& grad, const std::optional<at::Tensor>& x,
                                              std::array<bool, 2> output_mask) {
  const bool has_x = x.has_value() && x->defined();
  TORCH_CHECK(has_x || !output_mask[1],
              "brevitas_cpp::_binary_quant_backward: the gradient of scale needs x; "
              "got x = None");
  return has_x ? *x : grad;
}
}  // namespace detail

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def("binary_quant(Tensor x, Tensor scale) -> Tensor");
  m.def("clamped_binary_quant(Tensor x, Tensor scale) -> Tensor");
  m.def("_binary_quant_backward(Tensor grad, Tensor? x, Tensor scale, bool[2] output_mask) -> (Tensor, Tensor)");
  m.def(
      "_clamped_binary_quant_backward(Tensor grad, Tensor x, Tensor scale, bool[2] output_mask) -> "
      "(Tensor, Tensor)");
}

}  // namespace brevitas_cpp::ops
