#include "ops/common/int8_threshold.h"

#include "ops/stats_all_reduce.h"

#include <ATen/ATen.h>

#include <limits>
#include <tuple>
#include <vector>

namespace brevitas_cpp::ops::detail {
namespace {

constexpr const char* kOp = "quantization_int8";

int64_t read_counter(const at::Tensor& iteration) {
  // A CPU counter is read from memory: .item() costs two dispatcher calls on every quantizer call.
  if (iteration.device().is_cpu()) return *iteration.const_data_ptr<int64_t>();
  return iteration.item<int64_t>();
}

bool all_true(const at::Tensor& flags) {
  return flags.device().is_cpu() && flags.numel() == 1 ? *flags.const_data_ptr<bool>() : flags.all().item<bool>();
}

// max|x| over everything (shape []) or over every dim but the channel axis (shape [C]), in
// float32, as max(max x, -min x): ATen's min/max reductions are vectorized and need no |x|
// (linalg_vector_norm with ord inf took 30x longer than aminmax on the CPU). NaN propagates.
at::Tensor max_abs(const at::Tensor& x, std::optional<int64_t> axis) {
  at::Tensor lo, hi;
  if (!axis.has_value()) {
    std::tie(lo, hi) = at::aminmax(x);
  } else {
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (d != *axis) dims.push_back(d);
    }
    if (dims.empty()) return x.abs().to(at::kFloat);  // one value per channel: |x| itself
    lo = at::amin(x, dims);
    hi = at::amax(x, dims);
  }
  // abs_: +0 for an all-zero slice on every device (maximum(+0, -0) is either zero, by ISA).
  return at::maximum(hi, lo.neg()).to(at::kFloat).abs_();
}

// 2^ceil(log2 t) for t > 0, 0 for 0. frexp gives t = m * 2^e with m in [0.5, 1): a power of
// two (m = 0.5) stays; otherwise t / m = 2^e, exact as a correctly rounded division.
at::Tensor round_up_to_power_of_two(const at::Tensor& t) {
  const at::Tensor m = std::get<0>(at::frexp(t));
  return at::where(at::logical_or(t == 0, m == 0.5), t, t / m);
}

}  // namespace

Int8QuantParams update_int8_threshold(const at::Tensor& x, at::Tensor& threshold, at::Tensor& iteration,
                                      const Int8OpArgs& args, bool is_weight, double ema_decay, int64_t delay_quant,
                                      bool training) {
  const int64_t i = read_counter(iteration);
  TORCH_CHECK(i >= 0, "brevitas_cpp::", kOp, ": iteration must be >= 0 (training calls so far), got ", i);
  const bool fresh = (is_weight || training) && x.numel() > 0;
  // The buffer with the statistic's shape: [] per tensor (the buffer may be [1]), [C] per channel.
  const at::Tensor stored = args.channel_axis ? threshold : threshold.reshape({});
  at::Tensor t;
  if (fresh) {
    at::Tensor cur = max_abs(x, args.channel_axis);
    if (!is_weight) {
      if (const auto group = active_stats_group_name()) {
        // NaN as +inf first: every rank then sees the same non-finite maximum and raises below,
        // instead of one rank raising while the others wait in the next collective.
        const double inf = std::numeric_limits<double>::infinity();
        cur = _all_reduce_max(at::nan_to_num(cur, inf, inf, -inf), *group);
      }
    }
    TORCH_CHECK(all_true(at::isfinite(cur).all()), "brevitas_cpp::", kOp,
                ": x must be finite to compute its threshold (max|x|), but x holds NaN or inf");
    const bool initialise = is_weight || i == 0;
    t = initialise ? cur : at::add(at::mul(stored, 1.0 - ema_decay), at::mul(cur, ema_decay));
  } else {
    t = stored;
    TORCH_CHECK(all_true(at::logical_and(at::isfinite(t), t >= 0).all()), "brevitas_cpp::", kOp,
                ": threshold must hold finite values >= 0, got ", t);
  }
  if (training && fresh) {
    threshold.copy_(t.reshape(threshold.sizes()));
    iteration.fill_(i + 1);
  }

  const bool has_threshold = fresh || i > 0;
  const bool quantize = i >= delay_quant && has_threshold;
  const at::Tensor t_eff = args.quant_mode == Int8QuantMode::kPower2 ? round_up_to_power_of_two(t) : t;
  if (args.quant_mode == Int8QuantMode::kPower2) {
    TORCH_CHECK(all_true(at::isfinite(t_eff).all()), "brevitas_cpp::", kOp,
                ": the power-of-two threshold overflows float32 (threshold ", t, ")");
  }

  const std::vector<int64_t> view = int8_param_view_shape(x, args.channel_axis);
  const at::ScalarType dtype = x.scalar_type();
  // Divided by a tensor on t's device: CUDA divides by a host scalar as a multiplication by
  // its reciprocal, one ulp off the CPU's correctly rounded quotient.
  const at::Tensor quant_max = at::scalar_tensor(static_cast<double>(args.quant_max), t_eff.options());
  at::Tensor scale = at::div(t_eff, quant_max).to(dtype).reshape(view);
  // A copy: t_eff may be the threshold buffer itself, and outputs never alias inputs.
  at::Tensor clip = quantize ? t_eff.to(dtype, /*non_blocking=*/false, /*copy=*/true).reshape(view)
                             : at::full(view, std::numeric_limits<double>::infinity(), x.options());
  return {std::move(scale), std::move(clip), quantize};
}

}  // namespace brevitas_cpp::ops::detail
