#include "ops/quantization_int8.h"

#include "ops/common/checks.h"
#include "ops/common/op_handle.h"

#include <torch/library.h>

#include <cmath>

namespace brevitas_cpp::ops {

std::tuple<at::Tensor, at::Tensor, at::Tensor> quantization_int8(const at::Tensor& x, at::Tensor& threshold,
                                                                 at::Tensor& iteration, int64_t nbits, bool is_weight,
                                                                 std::optional<int64_t> channel_axis, double ema_decay,
                                                                 int64_t delay_quant, c10::string_view grad_mode,
                                                                 c10::string_view quant_mode, bool training) {
  static auto op = op_handle<decltype(quantization_int8)>("brevitas_cpp::quantization_int8");
  return op.call(x, threshold, iteration, nbits, is_weight, channel_axis, ema_decay, delay_quant, grad_mode, quant_mode,
                 training);
}

at::Tensor _quantization_int8_backward(const at::Tensor& grad, const at::Tensor& x, const at::Tensor& clip_threshold) {
  static auto op = op_handle<decltype(_quantization_int8_backward)>("brevitas_cpp::_quantization_int8_backward");
  return op.call(grad, x, clip_threshold);
}

namespace detail {
namespace {
constexpr const char* kOp = "quantization_int8";

// The largest nbits whose QL = 2^(nbits-1) - 1 is an integer x's dtype holds exactly: the
// clamp bounds must not round (float16 holds integers up to 2^11, bfloat16 up to 2^8).
int64_t max_bits_of(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
      return 12;
    case at::kBFloat16:
      return 9;
    default:
      return kInt8OpMaxBits;
  }
}
}  // namespace

Int8OpArgs check_quantization_int8_args(const at::Tensor& x, const at::Tensor& threshold, const at::Tensor& iteration,
                                        int64_t nbits, std::optional<int64_t> channel_axis, double ema_decay,
                                        int64_t delay_quant, c10::string_view grad_mode, c10::string_view quant_mode) {
  check_floating(x, kOp, "x");
  TORCH_CHECK(threshold.scalar_type() == at::kFloat, "brevitas_cpp::", kOp,
              ": threshold must be a float32 tensor (the statistics buffer), got dtype ", threshold.scalar_type());
  TORCH_CHECK(iteration.scalar_type() == at::kLong, "brevitas_cpp::", kOp,
              ": iteration must be an int64 tensor (the iteration counter), got dtype ", iteration.scalar_type());
  check_single_value(iteration, kOp, "iteration");
  check_same_device(x, {{&threshold, "threshold"}, {&iteration, "iteration"}}, kOp);

  const int64_t max_bits = max_bits_of(x.scalar_type());
  TORCH_CHECK(nbits >= kInt8OpMinBits && nbits <= max_bits, "brevitas_cpp::", kOp, ": nbits must be in [",
              kInt8OpMinBits, ", ", max_bits, "] for x of dtype ", x.scalar_type(),
              " (the integer range [-(2^(nbits-1)-1), 2^(nbits-1)-1] must be exact in x's dtype), got ", nbits);
  TORCH_CHECK(ema_decay > 0.0 && ema_decay < 1.0, "brevitas_cpp::", kOp,
              ": ema_decay must be in the open interval (0, 1) (the weight of the new batch's max-abs), got ",
              ema_decay);
  TORCH_CHECK(delay_quant >= 0, "brevitas_cpp::", kOp, ": delay_quant must be >= 0 (training iterations before ",
              "quantization starts), got ", delay_quant);

  Int8GradMode gm;
  if (grad_mode == "ste") {
    gm = Int8GradMode::kSte;
  } else if (grad_mode == "clip") {
    gm = Int8GradMode::kClip;
  } else {
    TORCH_CHECK(false, "brevitas_cpp::", kOp, ": grad_mode must be 'ste' or 'clip', got '", grad_mode, "'");
  }
  Int8QuantMode qm;
  if (quant_mode == "minmax") {
    qm = Int8QuantMode::kMinMax;
  } else if (quant_mode == "power2") {
    qm = Int8QuantMode::kPower2;
  } else {
    TORCH_CHECK(false, "brevitas_cpp::", kOp, ": quant_mode must be 'minmax' or 'power2', got '", quant_mode, "'");
  }

  std::optional<int64_t> axis;
  if (channel_axis.has_value()) {
    const int64_t dim = x.dim();
    TORCH_CHECK(*channel_axis >= -dim && *channel_axis < dim, "brevitas_cpp::", kOp, ": channel_axis ", *channel_axis,
                " is out of range for x with ", dim, " dimensions; accepted: None (per tensor) or an axis in [", -dim,
                ", ", dim, ")");
    axis = *channel_axis < 0 ? *channel_axis + dim : *channel_axis;
    const auto channels = x.sym_size(*axis);
    TORCH_CHECK(threshold.dim() == 1 && threshold.sym_size(0) == channels, "brevitas_cpp::", kOp,
                ": a per-channel threshold must have shape [C] with C = x.shape[channel_axis] = ", channels,
                ", got shape ", threshold.sym_sizes());
  } else {
    TORCH_CHECK(threshold.sym_numel() == 1, "brevitas_cpp::", kOp,
                ": a per-tensor threshold (channel_axis None) must hold exactly one value (shape [] or [1]), "
                "got shape ",
                threshold.sym_sizes());
  }
  const int64_t quant_max = (int64_t{1} << (nbits - 1)) - 1;
  return {quant_max, axis, gm, qm};
}

std::vector<int64_t> int8_param_view_shape(const at::Tensor& x, std::optional<int64_t> channel_axis) {
  if (!channel_axis.has_value()) return {};
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[static_cast<size_t>(*channel_axis)] = x.size(*channel_axis);
  return shape;
}

void check_quantization_int8_backward_args(const at::Tensor& grad, const at::Tensor& x,
                                           const at::Tensor& clip_threshold) {
  constexpr const char* op = "_quantization_int8_backward";
  check_floating(x, op, "x");
  check_same_dtype_as_input(grad, x, op, "grad");
  check_same_dtype_as_input(clip_threshold, x, op, "clip_threshold");
  TORCH_CHECK(grad.sym_sizes() == x.sym_sizes(), "brevitas_cpp::", op, ": grad of shape ", grad.sym_sizes(),
              " must have the shape of x ", x.sym_sizes());
  check_broadcasts_to_input(clip_threshold, x, op, "clip_threshold");
  check_same_device(x, {{&grad, "grad"}, {&clip_threshold, "clip_threshold"}}, op);
}
}  // namespace detail

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def(
      "quantization_int8(Tensor x, Tensor(a!) threshold, Tensor(b!) iteration, int nbits=8, bool is_weight=False, "
      "int? channel_axis=None, float ema_decay=0.01, int delay_quant=0, str grad_mode=\"ste\", "
      "str quant_mode=\"minmax\", bool training=True) -> (Tensor output, Tensor scale, Tensor clip_threshold)");
  m.def("_quantization_int8_backward(Tensor grad, Tensor x, Tensor clip_threshold) -> Tensor");
}

}  // namespace brevitas_cpp::ops
