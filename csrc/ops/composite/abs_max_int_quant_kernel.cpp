#include "ops/abs_max_int_quant.h"
#include "ops/common/checks.h"
#include "ops/composite/compositions.h"
#include "ops/int_quant.h"

#include <torch/library.h>

namespace brevitas_cpp::composite {
namespace {

constexpr const char* kOp = "abs_max_int_quant";

// The statistics and scale of the unfused quantizer, as ATen ops.
struct Stats {
  at::Tensor a;        // |w|
  at::Tensor rows;     // |w| as [C, R] (per channel)
  at::Tensor m;        // max |w|, in the scale's shape
  at::Tensor indices;  // torch.max(dim)'s indices (per channel)
  at::Tensor c0;       // the clamped statistic
  at::Tensor thr;      // IntScaling's threshold, in bit_width's dtype then w's
  at::Tensor q;        // c / threshold
  at::Tensor scale;
};

Stats compose(const at::Tensor& w, const at::Tensor& bit_width, int64_t dim, bool is_signed, bool narrow_range,
              std::optional<double> min_val) {
  Stats st;
  st.a = at::abs(w);
  if (dim < 0) {
    st.m = at::max(st.a);
  } else {
    st.rows = st.a.movedim(dim, 0).reshape({w.size(dim), -1});
    auto [values, indices] = at::max(st.rows, 1);
    std::vector<int64_t> shape(static_cast<size_t>(w.dim()), 1);
    shape[static_cast<size_t>(dim)] = w.size(dim);
    st.m = values.reshape(shape);
    st.indices = indices;
  }
  st.c0 = st.m;
  if (min_val.has_value()) {
    const at::Tensor lo = scalar_in_dtype_of(*min_val, w);
    const at::Tensor up = at::where(at::abs(st.m) < lo, lo, at::abs(st.m));
    const at::Tensor down = at::where(st.m > -lo, -lo, st.m);
    st.c0 = at::where(st.m >= 0, up, down);
  }
  // IntScaling in bit_width's dtype: -(1 - 2^(b-1)) signed narrow, 2^(b-1) signed, max_int unsigned.
  const at::Tensor b = bit_width.reshape({});
  const bool integral = !at::isFloatingType(b.scalar_type());
  auto pow2 = [&](const at::Tensor& e) { return integral ? at::pow(2, e) : at::exp2(e); };
  at::Tensor thr;
  if (is_signed) {
    thr = narrow_range ? -(1 - pow2(b - 1)) : pow2(b - 1);
  } else {
    thr = pow2(b) - (narrow_range ? 2 : 1);
  }
  st.thr = thr.to(w.scalar_type());
  st.q = at::abs(st.c0) / st.thr;
  st.scale = at::abs(st.q);
  return st;
}

std::tuple<at::Tensor, at::Tensor> abs_max_int_quant(const at::Tensor& w, const at::Tensor& bit_width,
                                                     std::optional<int64_t> channel_dim, bool is_signed,
                                                     bool narrow_range, std::optional<double> scaling_min_val,
                                                     c10::string_view rounding_mode, bool clamp_ste) {
  const int64_t dim =
      ops::detail::check_abs_max_int_quant_args(w, bit_width, channel_dim, scaling_min_val, rounding_mode, kOp);
  const Stats st = compose(w, bit_width, dim, is_signed, narrow_range, scaling_min_val);
  const at::Tensor scale = st.scale.contiguous();
  const at::Tensor zero = at::zeros({}, w.options());
  at::Tensor y = ops::int_quant(w, scale, zero, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
  return {as_output_like(y, w), scale};
}

// The autograd of the composition, written out: int_quant's gradients of w and scale, then
// the scale's through |q|, / threshold, |c0|, the straight-through clamps, the max and |w|.
at::Tensor abs_max_int_quant_backward(const at::Tensor& grad, const at::Tensor& grad_scale, const at::Tensor& w,
                                      const at::Tensor& scale, const at::Tensor& bit_width,
                                      std::optional<int64_t> channel_dim, bool is_signed, bool narrow_range,
                                      std::optional<double> scaling_min_val, c10::string_view rounding_mode,
                                      bool clamp_ste) {
  const int64_t dim = ops::detail::check_abs_max_int_quant_backward_args(grad, grad_scale, w, scale, bit_width,
                                                                         channel_dim, scaling_min_val, rounding_mode);
  const at::Tensor zero = at::zeros({}, w.options());
  auto [gx, gs, gz, gb] = ops::_int_quant_backward(grad, w, std::nullopt, scale, zero, bit_width, is_signed,
                                                   narrow_range, rounding_mode, clamp_ste, {true, true, false, false});
  const Stats st = compose(w, bit_width, dim, is_signed, narrow_range, scaling_min_val);
  const at::Tensor g_total = grad_scale + gs.reshape(grad_scale.sizes());
  const at::Tensor g3 = ((g_total * at::sgn(st.q)) / st.thr) * at::sgn(st.c0);
  at::Tensor g_abs;
  if (dim < 0) {
    const at::Tensor mask = at::logical_or(st.a == st.m, at::logical_and(at::isnan(st.a), at::isnan(st.m)));
    g_abs = at::where(mask, g3 / mask.sum(), at::zeros({}, w.options()));
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
