#include "ops/ternary_quant.h"

#include "ops/common/op_handle.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>

namespace brevitas_cpp::ops {

at::Tensor ternary_quant(const at::Tensor& x, const at::Tensor& scale, double threshold) {
  static auto op = op_handle<decltype(ternary_quant)>("brevitas_cpp::ternary_quant");
  return op.call(x, scale, threshold);
}

std::tuple<at::Tensor, at::Tensor> _ternary_quant_backward(const at::Tensor& grad, const at::Tensor& x,
                                                           const at::Tensor& scale, double threshold,
                                                           std::array<bool, 2> output_mask) {
  static auto op = op_handle<decltype(_ternary_quant_backward)>("brevitas_cpp::_ternary_quant_backward");
  return op.call(grad, x, scale, threshold, output_mask);
}

namespace detail {
void check_threshold(double threshold, const char* op) {
  TORCH_CHECK(std::isfinite(threshold) && threshold >= 0.0, "brevitas_cpp::", op,
              ": threshold must be finite and >= 0 (a fraction of scale, e.g. 0.5), got ", threshold);
}
}  // namespace detail

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def("ternary_quant(Tensor x, Tensor scale, float threshold) -> Tensor");
  m.def(
      "_ternary_quant_backward(Tensor grad, Tensor x, Tensor scale, float threshold, bool[2] output_mask) -> "
      "(Tensor, Tensor)");
}

}  // namespace brevitas_cpp::ops
