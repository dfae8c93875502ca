// quantization_int8: the EMA-threshold int8 training op of seed 003 (a detection codebase's
// MXNet operator), with the per-channel weights and power-of-two thresholds it never had.
//
//   QL        = 2^(nbits-1) - 1                      symmetric integer range [-QL, QL]
//   weights:     t = max|x|  (per tensor, or per channel along channel_axis), every call
//   activations: t = max|x| of the first training batch, then
//                t = t * (1 - ema_decay) + max|x| * ema_decay  (in float32, once per training call)
//   power2:      t_eff = 2^ceil(log2 t)  (t_eff = t for minmax; 0 stays 0)
//   scale     = t_eff / QL                            (float32, then x's dtype)
//   y         = clamp(round_half_even(x / scale), -QL, QL) * scale   (in x's dtype)
//
// The threshold and the iteration counter are buffers updated in place, only when training.
// The counter i counts training calls that saw data; the call with i < delay_quant returns a
// copy of x (only the statistics move). An activation whose threshold never saw data (i = 0,
// not training) is not quantized either. A zero threshold (an all-zero channel) gives y = 0,
// NaN staying NaN. Under torch.distributed the activation statistic is the maximum over the
// ranks of the statistics group (brevitas_cpp.distributed), so replicas never diverge.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>
#include <vector>

namespace brevitas_cpp::ops {

// Returns (y, scale, clip_threshold). scale (x's dtype) broadcasts to x: shape [] per tensor,
// C at channel_axis and 1 elsewhere per channel; with zero point 0 and bit width nbits it is
// y's QuantTensor metadata. clip_threshold (same shape and dtype) is t_eff, or +inf when y is a
// copy of x. x's gradient: grad_mode "ste" passes it; "clip" zeroes it where |x| > clip_threshold.
// threshold: float32, one element per tensor or [C] per channel; iteration: one int64.
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantization_int8(const at::Tensor& x, at::Tensor& threshold,
                                                                 at::Tensor& iteration, int64_t nbits, bool is_weight,
                                                                 std::optional<int64_t> channel_axis, double ema_decay,
                                                                 int64_t delay_quant, c10::string_view grad_mode,
                                                                 c10::string_view quant_mode, bool training);

// The "clip" gradient: grad where !(|x| > clip_threshold), else 0 (NaN x passes, as inside
// the threshold). clip_threshold has x's dtype and broadcasts to x. Linear in grad, so it is
// its own backward.
at::Tensor _quantization_int8_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& clip_threshold);

// Bounds of the arguments (inclusive).
inline constexpr int64_t kInt8OpMinBits = 2;
inline constexpr int64_t kInt8OpMaxBits = 24;  // QL exact in float32

namespace detail {
enum class Int8GradMode : int8_t { kSte, kClip };
enum class Int8QuantMode : int8_t { kMinMax, kPower2 };

struct Int8OpArgs {
  int64_t quant_max;                    // QL
  std::optional<int64_t> channel_axis;  // normalised to [0, x.dim())
  Int8GradMode grad_mode;
  Int8QuantMode quant_mode;
};

// Every check of quantization_int8 that needs no tensor values (shared by all kernels, Meta
// included): dtypes, shapes, devices, nbits, ema_decay, delay_quant and the mode names.
Int8OpArgs check_quantization_int8_args(const at::Tensor& x, const at::Tensor& threshold, const at::Tensor& iteration,
                                        int64_t nbits, std::optional<int64_t> channel_axis, double ema_decay,
                                        int64_t delay_quant, c10::string_view grad_mode, c10::string_view quant_mode);

// The shape of scale and clip_threshold: [] per tensor, C at the channel axis and 1 elsewhere.
std::vector<int64_t> int8_param_view_shape(const at::Tensor& x, std::optional<int64_t> channel_axis);

void check_quantization_int8_backward_args(const at::Tensor& grad, const at::Tensor& x,
                                           const at::Tensor& clip_threshold);
}  // namespace detail

}  // namespace brevitas_cpp::ops
