#include "ops/abs_max_int_quant.h"
#include "ops/common/checks.h"
#include "ops/composite/compositions.h"
#include "ops/int_quant.h"

#include <torch/library.h>

namespace brevitas_cpp::composite {
namespace {

constexpr const char* kOp = "abs_max_int_quant";

// The statistics and scale of the unfused quantizer, as ATen ops. The composite serves CUDA
// (and any device without a kernel), where every op is a kernel launch: the composition's
// steps are folded where the values allow it, with the same bits. m = max|w| is +0 or more (or
// NaN), so |m| = m, the signed clamp is clamp_min(m, lo) (NaN passing) and |c0| / threshold
// is c0 / threshold; |q| stays, for a threshold below 0 (a bit width below 1, which int_quant
// rejects or, on a GPU, turns into NaN).

// max |w| over the tensor or per channel (in the scale's shape), with what the backward needs
// to find the maxima.
struct MaxAbs {
  at::Tensor a;        // |w|
  at::Tensor rows;     // |w| as [C, R] (per channel)
  at::Tensor indices;  // torch.max(dim)'s indices (per channel)
  at::Tensor m;
};

MaxAbs max_abs(const at::Tensor& w, int64_t dim) {
  MaxAbs r;
  r.a = at::abs(w);
  if (dim < 0) {
    r.m = at::max(r.a);
    return r;
  }
  r.rows = r.a.movedim(dim, 0).reshape({w.size(dim), -1});
  auto [values, indices] = at::max(r.rows, 1);
  std::vector<int64_t> shape(static_cast<size_t>(w.dim()), 1);
  shape[static_cast<size_t>(dim)] = w.size(dim);
  r.indices = indices;
  r.m = values.reshape(shape);
  return r;
}

at::Tensor scale_of(const at::Tensor& w, const at::Tensor& bit_width, int64_t dim, bool is_signed, bool narrow_range,
                    std::optional<double> min_val) {
  const at::Tensor m = max_abs(w, dim).m;
  const at::Tensor c0 = min_val.has_value() ? at::clamp_min(m, scalar_in_dtype_of(*min_val, w)) : m;
  return at::abs(c0 / int_threshold(bit_width, is_signed, narrow_range, w.scalar_type()));
}

std::tuple<at::Tensor, at::Tensor> abs_max_int_quant(const at::Tensor& w, const at::Tensor& bit_width,
                                                     std::optional<int64_t> channel_dim, bool is_signed,
                                                     bool narrow_range, std::optional<double> scaling_min_val,
                                                     c10::string_view rounding_mode, bool clamp_ste) {
  const int64_t dim =
      ops::detail::check_abs_max_int_quant_args(w, bit_width, channel_dim, scaling_min_val, rounding_mode, kOp);
  const at::Tensor scale = scale_of(w, bit_width, dim, is_signed, narrow_range, scaling_min_val).contiguous();
  const at::Tensor zero = at::zeros({}, w.options());
  at::Tensor y = ops::int_quant(w, scale, zero, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
  return {as_output_like(y, w), scale};
}

// The autograd of the composition, written out: int_quant's gradients of w and scale, then
// the scale's through |q|, / threshold, |c0|, the straight-through clamps, the max and |w|.
// sgn(q) and sgn(c0) are both sgn(scale) (0, 1 or NaN; a NaN's sign aside) for a threshold
// above 0, so the statistic is recomputed only for where the maxima are.
at::Tensor abs_max_int_quant_backward(const at::Tensor& grad, const std::optional<at::Tensor>& grad_scale,
                                      const at::Tensor& w, const at::Tensor& scale, const at::Tensor& bit_width,
                                      std::optional<int64_t> channel_dim, bool is_signed, bool narrow_range,
                                      std::optional<double> scaling_min_val, c10::string_view rounding_mode,
                                      bool clamp_ste) {
  const int64_t dim = ops::detail::check_abs_max_int_quant_backward_args(grad, grad_scale, w, scale, bit_width,
                                                                         channel_dim, scaling_min_val, rounding_mode);
  const at::Tensor zero = at::zeros({}, w.options());
  auto [gx, gs, gz, gb] = ops::_int_quant_backward(grad, w, std::nullopt, scale, zero, bit_width, is_signed,
                                                   narrow_range, rounding_mode, clamp_ste, {true, true, false, false});
  const at::Tensor sign = at::sgn(scale);
  const at::Tensor thr = int_threshold(bit_width, is_signed, narrow_range, w.scalar_type());
  // No grad_scale: a zero, added as the materialized zeros were (-0 + 0 is +0).
  const at::Tensor g_total =
      grad_scale.has_value() ? *grad_scale + gs.reshape(grad_scale->sizes()) : gs.reshape(scale.sizes()) + 0.0;
  const at::Tensor g3 = ((g_total * sign) / thr) * sign;
  const MaxAbs st = max_abs(w, dim);
  at::Tensor g_abs;
  if (dim < 0) {
    const at::Tensor mask = at::logical_or(st.a == st.m, at::logical_and(at::isnan(st.a), at::isnan(st.m)));
    g_abs = at::where(mask, g3 / mask.sum(), 0.0);
  } else {
    const at::Tensor spread =
        at::zeros_like(st.rows).scatter(1, st.indices.unsqueeze(1), g3.reshape({st.rows.size(0), 1}));
    std::vector<int64_t> moved(w.sizes().begin(), w.sizes().end());
    moved.erase(moved.begin() + dim);
    moved.insert(moved.begin(), w.size(dim));
    g_abs = spread.reshape(moved).movedim(0, dim);
  }
  return as_output_like(gx + g_abs * at::sgn(w), w);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("abs_max_int_quant", TORCH_FN(abs_max_int_quant));
  m.impl("_abs_max_int_quant_backward", TORCH_FN(abs_max_int_quant_backward));
}

}  // namespace brevitas_cpp::composite
