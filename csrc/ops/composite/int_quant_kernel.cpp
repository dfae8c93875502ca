#include "ops/common/checks.h"
#include "ops/composite/compositions.h"
#include "ops/int_quant.h"

#include <torch/library.h>

namespace brevitas_cpp::composite {
namespace {

constexpr const char* kOp = "int_quant";

// The unfused IntQuant: t = x / s; r = round(t + z); c = tensor_clamp(r, min_int, max_int);
// y = (c - z) * s, with max_int/min_int computed in bit_width's dtype and cast to x's.
struct Composed {
  at::Tensor t, q, above, below;
};

Composed compose(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                 const at::Tensor& bit_width, bool is_signed, bool narrow_range, RoundingMode mode) {
  const at::Tensor b = bit_width.reshape({});
  const bool integral = !at::isFloatingType(b.scalar_type());
  // 2^e in b's dtype: exact for every valid width.
  auto pow2 = [&](const at::Tensor& e) { return integral ? at::pow(2, e) : at::exp2(e); };
  at::Tensor hi, lo;
  if (is_signed) {
    hi = pow2(b - 1) - 1;
    lo = narrow_range ? -pow2(b - 1) + 1 : -pow2(b - 1);
  } else {
    hi = pow2(b) - (narrow_range ? 2 : 1);
    lo = at::zeros_like(b);
  }
  hi = hi.to(x.scalar_type());
  lo = lo.to(x.scalar_type());
  const at::Tensor t = x / scale;
  const at::Tensor r = round_as(t + zero_point, mode);
  const at::Tensor above = r > hi;
  const at::Tensor c1 = at::where(above, hi, r);
  const at::Tensor below = c1 < lo;
  return {t, at::where(below, lo, c1), above, below};
}

// Where the CPU kernel would raise on a value: a scale not normal, positive and finite, a
// non-finite zero point, a bit width outside the integers [1, 32] (forward only: its NaN carries on).
at::Tensor valid_values(const at::Tensor& scale, const at::Tensor& zero_point, const at::Tensor& bit_width) {
  const at::Tensor bd = bit_width.reshape({}).to(at::kDouble);
  const at::Tensor valid_bits =
      at::logical_and(at::logical_and(at::isfinite(bd), bd == at::floor(bd)), at::logical_and(bd >= 1, bd <= 32));
  return at::logical_and(at::logical_and(normal_scale(scale), at::isfinite(zero_point)), valid_bits);
}

std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                                           const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                           c10::string_view rounding_mode, bool with_mask) {
  ops::detail::check_int_quant_args(x, scale, zero_point, bit_width, rounding_mode, kOp);
  check_bit_width_dtype(bit_width, kOp);
  const Composed c =
      compose(x, scale, zero_point, bit_width, is_signed, narrow_range, parse_rounding_mode(rounding_mode, kOp));
  const at::Tensor y = nan_where_invalid((c.q - zero_point) * scale, valid_values(scale, zero_point, bit_width));
  at::Tensor mask;
  if (with_mask) mask = as_output_like(at::logical_not(at::logical_or(c.above, c.below)), x);
  return {as_output_like(y, x), mask};
}

at::Tensor int_quant(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point,
                     const at::Tensor& bit_width, bool is_signed, bool narrow_range, c10::string_view rounding_mode,
                     bool /*clamp_ste: backward only*/) {
  return std::get<0>(forward(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, false));
}

// The gradients of the CPU kernel (csrc/ops/cpu/int_quant_kernel.cpp), each parameter's two
// terms reduced apart (sum_to_size, in x's dtype) and added. A scale the CPU kernel raises on
// computes as NaN (as on CUDA).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> int_quant_backward(
    const at::Tensor& grad, const std::optional<at::Tensor>& x_opt, const std::optional<at::Tensor>& mask_opt,
    const at::Tensor& scale_in, const at::Tensor& zero_point, const at::Tensor& bit_width, bool is_signed,
    bool narrow_range, c10::string_view rounding_mode, bool clamp_ste, std::array<bool, 4> output_mask) {
  const auto args = ops::detail::check_int_quant_backward_args(grad, x_opt, mask_opt, scale_in, zero_point, bit_width,
                                                               rounding_mode, clamp_ste, output_mask);
  const at::Tensor scale = normal_scale_or_nan(scale_in);
  const at::Tensor& ref = args.ref;
  const bool has_mask = args.has_mask, want_params = args.want_params;
  const RoundingMode mode = args.mode;
  at::Tensor gx, gs, gz, gb;
  const at::Tensor g_s = grad * scale;
  if (!want_params && (clamp_ste || has_mask)) {
    if (output_mask[0]) {
      at::Tensor d = g_s / scale;
      if (!clamp_ste) d = at::where(*mask_opt, d, at::zeros({}, d.options()));
      gx = as_output_like(d, ref);
    }
    return {gx, gs, gz, gb};
  }
  if (!output_mask[0] && !want_params) return {gx, gs, gz, gb};
  const Composed c = compose(*x_opt, scale, zero_point, bit_width, is_signed, narrow_range, mode);
  const at::Tensor zero = at::zeros({}, grad.options());
  const at::Tensor g_t = clamp_ste ? g_s : at::where(at::logical_or(c.above, c.below), zero, g_s);
  if (output_mask[0]) gx = as_output_like(g_t / scale, *x_opt);
  if (output_mask[1]) {
    gs = (grad * (c.q - zero_point)).sum_to_size(scale.sizes()) + (-g_t * (c.t / scale)).sum_to_size(scale.sizes());
    gs = gs.reshape(scale.sizes()).contiguous();
  }
  if (output_mask[2]) {
    gz = g_t.sum_to_size(zero_point.sizes()) + (-g_s).sum_to_size(zero_point.sizes());
    gz = gz.reshape(zero_point.sizes()).contiguous();
  }
  if (output_mask[3] && !clamp_ste) {
    const at::Tensor b = bit_width.reshape({}).to(at::kDouble);
    const at::Tensor g_hi = at::where(c.above, g_s, zero).sum().to(at::kDouble);
    const at::Tensor g_lo = at::where(c.below, g_s, zero).sum().to(at::kDouble);
    constexpr double kLn2Value = kLn2;
    const at::Tensor slope_hi = at::exp2(is_signed ? b - 1 : b) * kLn2Value;
    at::Tensor value = g_hi * slope_hi;
    if (is_signed) value = value - g_lo * (at::exp2(b - 1) * kLn2Value);
    gb = value.to(bit_width.scalar_type()).reshape(bit_width.sizes()).contiguous();
  }
  return {gx, gs, gz, gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("int_quant", TORCH_FN(int_quant));
  m.impl("_int_quant_with_mask",
         [](const at::Tensor& x, const at::Tensor& scale, const at::Tensor& zero_point, const at::Tensor& bit_width,
            bool is_signed, bool narrow_range, c10::string_view rounding_mode) {
           return forward(x, scale, zero_point, bit_width, is_signed, narrow_range, rounding_mode, true);
         });
  m.impl("_int_quant_backward", TORCH_FN(int_quant_backward));
}

}  // namespace brevitas_cpp::composite
