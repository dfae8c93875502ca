#include "ops/sign_ste.h"

#include "ops/common/checks.h"
#include "ops/common/op_handle.h"

#include <torch/library.h>

namespace brevitas_cpp::ops {

at::Tensor binary_sign_ste(const at::Tensor& x) {
  static auto op = op_handle<decltype(binary_sign_ste)>("brevitas_cpp::binary_sign_ste");
  return op.call(x);
}

at::Tensor ternary_sign_ste(const at::Tensor& x) {
  static auto op = op_handle<decltype(ternary_sign_ste)>("brevitas_cpp::ternary_sign_ste");
  return op.call(x);
}

at::Tensor abs_binary_sign_grad(const at::Tensor& x) {
  static auto op = op_handle<decltype(abs_binary_sign_grad)>("brevitas_cpp::abs_binary_sign_grad");
  return op.call(x);
}

at::Tensor _abs_binary_sign_grad_backward(const at::Tensor& grad, const at::Tensor& x) {
  static auto op = op_handle<decltype(_abs_binary_sign_grad_backward)>("brevitas_cpp::_abs_binary_sign_grad_backward");
  return op.call(grad, x);
}

namespace detail {
void check_abs_binary_sign_grad_backward_args(const at::Tensor& grad, const at::Tensor& x) {
  check_floating(x, "_abs_binary_sign_grad_backward", "x");
  check_same_dtype_as_input(grad, x, "_abs_binary_sign_grad_backward", "grad");
  check_same_device(x, {{&grad, "grad"}}, "_abs_binary_sign_grad_backward");
  TORCH_CHECK(grad.sym_sizes() == x.sym_sizes(), "brevitas_cpp::_abs_binary_sign_grad_backward: grad of shape ",
              grad.sym_sizes(), " must have the shape of x ", x.sym_sizes());
}
}  // namespace detail

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def("binary_sign_ste(Tensor x) -> Tensor");
  m.def("ternary_sign_ste(Tensor x) -> Tensor");
  m.def("abs_binary_sign_grad(Tensor x) -> Tensor");
  m.def("_abs_binary_sign_grad_backward(Tensor grad, Tensor x) -> Tensor");
}

}  // namespace brevitas_cpp::ops
