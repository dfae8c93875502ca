#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>

namespace brevitas_cpp::ops {

// The stock activation quantizer (Int8ActPerTensorFloat, Uint8ActPerTensorFloat and QuantReLU's)
// while it collects statistics, in one op: Brevitas's ParameterFromRuntimeStatsScaling with
// AbsPercentile over the whole tensor, a linear-domain scale, IntScaling, zero point 0 and
// IntQuant. With a = |x| (|relu(x)| with relu), NaN ranking above every number:
//   s = the k-th smallest of a (1 <= k <= numel); index = the flat index of x (in its logical,
//       row-major order) that torch.kthvalue gives for it on a's values, the element Brevitas's
//       AbsPercentile differentiates (among equal values its choice is its algorithm's)
//   stat = clamp_min(s, scaling_min_val)          (ScalarSignedClampMinSte; none when None)
//   threshold = 2^(b-1) - narrow (signed) or max_int (unsigned), in bit_width's dtype, then x's
//   scale = stat / threshold
//   y = int_quant(x (relu(x) with relu), scale, 0, bit_width, signed, narrow_range, rounding_mode,
//                 clamp_ste)
// Returns (y, scale, stat, index). y and scale are differentiable in x: int_quant's STE plus the
// path through the scale into the selected element (the clamp is straight-through); stat (for
// the running average) and index are not. zero_grad_param is never read: it gets an exactly
// zero gradient, as the composition's zero_grad_link gives the learned scale that the
// statistics will initialise, so that data-parallel training sees it used.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> abs_percentile_int_quant(
    const at::Tensor& x, const std::optional<at::Tensor>& zero_grad_param, const at::Tensor& bit_width, int64_t k,
    bool is_signed, bool narrow_range, std::optional<double> scaling_min_val, c10::string_view rounding_mode,
    bool clamp_ste, bool relu);

// x's gradient given the gradients of y (grad) and of scale (grad_scale), each None when that
// output got none (without grad only the scale's path reaches x, at the selected element), and
// the forward's x, scale and index outputs.
at::Tensor _abs_percentile_int_quant_backward(const std::optional<at::Tensor>& grad,
                                              const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
                                              const at::Tensor& scale, const at::Tensor& index,
                                              const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                              c10::string_view rounding_mode, bool clamp_ste, bool relu);

namespace detail {
// Dtype, device, shape and argument checks shared by every kernel.
void check_abs_percentile_int_quant_args(const at::Tensor& x, const at::Tensor& bit_width, int64_t k,
                                         std::optional<double> scaling_min_val, c10::string_view rounding_mode,
                                         const char* op);
// The backward's extra checks (grad like x; scale, grad_scale and index 0-dim).
void check_abs_percentile_int_quant_backward_args(const std::optional<at::Tensor>& grad,
                                                  const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
                                                  const at::Tensor& scale, const at::Tensor& index,
                                                  const at::Tensor& bit_width, c10::string_view rounding_mode);
}  // namespace detail

}  // namespace brevitas_cpp::ops
