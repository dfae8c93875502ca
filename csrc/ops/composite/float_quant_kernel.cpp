// float_quant as ATen ops: Brevitas's FloatQuant composition, with the grid's exponent taken
// exactly (frexp) as the fused kernels take it.
#include "ops/composite/compositions.h"
#include "ops/float_quant.h"

#include <torch/library.h>

#include <limits>

namespace brevitas_cpp::composite {
namespace {

struct Grid {
  at::Tensor u, q, passed, slope;  // q: clamped (and, when not saturating, +-inf/NaN beyond)
};

Grid float_grid(const at::Tensor& x, const at::Tensor& scale, const MinifloatFormat& f) {
  const at::Tensor u = x / scale;
  // In float32 or float64 (the kernels' op-math type); the grid values are exact in it.
  const at::Tensor ua = u.scalar_type() == at::kDouble ? u : u.to(at::kFloat);
  const at::Tensor a = at::abs(ua);
  const at::Tensor e = std::get<1>(at::frexp(a)) - 1 - f.mantissa_bits;  // floor(log2 a) - m
  const at::Tensor above_min = at::logical_and(a > 0, e >= f.min_exponent);
  const at::Tensor exponent = at::where(above_min, e, at::full({}, f.min_exponent, e.options()));
  const at::Tensor internal = at::pow(2.0, exponent.to(ua.scalar_type()));
  const at::Tensor v = ua / internal;
  const at::Tensor r = round_as(v, f.rounding);
  const double tiny = 1.17549435082228750797e-38;
  at::Tensor slope =
      at::where(above_min, 1 + internal * at::sign(ua) / (a + tiny) * (r - v), at::ones({}, ua.options()));
  at::Tensor q = (internal * r).to(x.scalar_type());
  q = at::where(at::isfinite(ua), q, at::full({}, std::numeric_limits<double>::quiet_NaN(), q.options()));
  slope = at::where(at::isfinite(ua), slope, at::full({}, std::numeric_limits<double>::quiet_NaN(), slope.options()));
  const at::Tensor hi = scalar_in_dtype_of(f.max_value, x);
  const at::Tensor lo = f.is_signed ? scalar_in_dtype_of(-f.max_value, x) : at::zeros({}, x.options());
  const at::Tensor above = q > hi, below = q < lo;
  at::Tensor c = at::where(below, lo, at::where(above, hi, q));
  if (!f.saturating) {
    const double inf = std::numeric_limits<double>::infinity();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    c = at::where(above, at::full({}, f.inf_values ? inf : nan, c.options()), c);
    c = at::where(below, at::full({}, f.inf_values ? -inf : nan, c.options()), c);
  }
  return {u, c, at::logical_not(at::logical_or(above, below)), slope};
}

at::Tensor float_quant(const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
                       int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed,
                       bool saturating, bool inf_values, bool nan_values, c10::string_view rounding_mode) {
  const MinifloatFormat f =
      ops::detail::check_float_quant_args(x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value,
                                          is_signed, saturating, inf_values, nan_values, rounding_mode, "float_quant");
  return as_output_like(nan_where_invalid(float_grid(x, scale, f).q * scale, normal_scale(scale)), x);
}

std::tuple<at::Tensor, at::Tensor> float_quant_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
    int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed, bool saturating,
    bool inf_values, bool nan_values, c10::string_view rounding_mode, std::array<bool, 2> output_mask) {
  const MinifloatFormat f = ops::detail::check_float_quant_args(
      x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value, is_signed, saturating, inf_values,
      nan_values, rounding_mode, "_float_quant_backward");
  const Grid g = float_grid(x, normal_scale_or_nan(scale), f);  // NaN where the CPU kernel raises
  const at::Tensor through = at::where(g.passed, g.slope, at::zeros({}, g.slope.options()));
  const at::Tensor ga = grad.to(through.scalar_type());
  at::Tensor gx, gs;
  if (output_mask[0]) gx = as_output_like((ga * through).to(x.scalar_type()), x);
  if (output_mask[1]) {
    const at::Tensor terms = (ga * (g.q.to(ga.scalar_type()) - through * g.u.to(ga.scalar_type()))).to(x.scalar_type());
    gs = terms.sum_to_size(scale.sizes()).reshape(scale.sizes()).contiguous();
  }
  return {gx, gs};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("float_quant", TORCH_FN(float_quant));
  m.impl("_float_quant_backward", TORCH_FN(float_quant_backward));
}

}  // namespace brevitas_cpp::composite
