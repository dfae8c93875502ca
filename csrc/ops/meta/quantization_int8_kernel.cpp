#include "ops/common/param_layout.h"
#include "ops/quantization_int8.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <limits>

namespace brevitas_cpp::meta {
namespace {

// The outputs' shapes and dtypes; the buffers' updates change no metadata, so nothing is
// written (fake tensors hold no values).
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantization_int8_meta(
    const at::Tensor& x, at::Tensor& threshold, at::Tensor& iteration, int64_t nbits, bool /*is_weight*/,
    std::optional<int64_t> channel_axis, double ema_decay, int64_t delay_quant, c10::string_view grad_mode,
    c10::string_view quant_mode, bool /*training*/) {
  const auto args = ops::detail::check_quantization_int8_args(x, threshold, iteration, nbits, channel_axis, ema_decay,
                                                              delay_quant, grad_mode, quant_mode);
  c10::SymDimVector view;
  if (args.channel_axis.has_value()) {
    view.assign(static_cast<size_t>(x.dim()), c10::SymInt(1));
    view[static_cast<size_t>(*args.channel_axis)] = x.sym_size(*args.channel_axis);
  }
  return {empty_output_like(x), at::empty_symint(view, x.options()), at::empty_symint(view, x.options())};
}

at::Tensor quantization_int8_backward_meta(const at::Tensor& grad, const at::Tensor& x,
                                           const at::Tensor& clip_threshold) {
  ops::detail::check_quantization_int8_backward_args(grad, x, clip_threshold);
  return empty_output_like(x);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("quantization_int8", TORCH_FN(quantization_int8_meta));
  m.impl("_quantization_int8_backward", TORCH_FN(quantization_int8_backward_meta));
}

}  // namespace brevitas_cpp::meta
