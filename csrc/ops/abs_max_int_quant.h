#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>
#include <vector>

namespace brevitas_cpp::ops {

// The stock weight quantizer of Int8WeightPerTensorFloat / Int8WeightPerChannelFloat in one op:
// Brevitas's BitWidthConst -> IntScaling -> AbsMax statistics -> _StatsScaling -> IntQuant with
// zero point 0. With m = max|w| over the whole tensor (channel_dim = None, scale 0-dim) or over
// every dim but channel_dim (scale of w's rank, C at channel_dim and 1 elsewhere):
//   threshold = 2^(b-1) - narrow (signed) or max_int (unsigned), in bit_width's dtype, then w's
//   c = |clamp_min(m, scaling_min_val)|           (ScalarSignedClampMinSte; none when None)
//   scale = |c / threshold|
//   y = int_quant(w, scale, 0, bit_width, signed, narrow_range, rounding_mode, clamp_ste)
// Both outputs are differentiable in w (bit_width gets no gradient: a learned bit width takes
// the composition). w's gradient is that of the composition's autograd: int_quant's STE plus the
// path through the scale into the max (spread evenly over tied maxima for the per-tensor max,
// sent to the first maximal element of each channel, as torch.max(dim) does).
std::tuple<at::Tensor, at::Tensor> abs_max_int_quant(const at::Tensor& w, const at::Tensor& bit_width,
                                                     std::optional<int64_t> channel_dim, bool is_signed,
                                                     bool narrow_range, std::optional<double> scaling_min_val,
                                                     c10::string_view rounding_mode, bool clamp_ste);

// w's gradient given the gradients of y (grad) and of scale (grad_scale; None when the scale
// output got none, taken as zeros), and the forward's w and scale output.
at::Tensor _abs_max_int_quant_backward(const at::Tensor& grad, const std::optional<at::Tensor>& grad_scale,
                                       const at::Tensor& w, const at::Tensor& scale, const at::Tensor& bit_width,
                                       std::optional<int64_t> channel_dim, bool is_signed, bool narrow_range,
                                       std::optional<double> scaling_min_val, c10::string_view rounding_mode,
                                       bool clamp_ste);

namespace detail {
// Shape, dtype, device and argument checks shared by every kernel; returns channel_dim wrapped
// to [0, w.dim()), or -1 for per-tensor statistics.
int64_t check_abs_max_int_quant_args(const at::Tensor& w, const at::Tensor& bit_width,
                                     std::optional<int64_t> channel_dim, std::optional<double> scaling_min_val,
                                     c10::string_view rounding_mode, const char* op);
// The backward's extra checks (grad like w, grad_scale and scale of the scale's shape).
int64_t check_abs_max_int_quant_backward_args(const at::Tensor& grad, const std::optional<at::Tensor>& grad_scale,
                                              const at::Tensor& w, const at::Tensor& scale, const at::Tensor& bit_width,
                                              std::optional<int64_t> channel_dim, std::optional<double> scaling_min_val,
                                              c10::string_view rounding_mode);
// The scale's shape: [] per tensor; w's rank with w.size(dim) at dim and 1 elsewhere.
std::vector<c10::SymInt> abs_max_scale_shape(const at::Tensor& w, int64_t dim);
}  // namespace detail

}  // namespace brevitas_cpp::ops
