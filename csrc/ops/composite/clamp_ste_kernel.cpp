#include "ops/clamp_ste.h"
#include "ops/common/checks.h"
#include "ops/composite/compositions.h"

#include <torch/library.h>

#include <optional>

namespace brevitas_cpp::composite {
namespace {

// Brevitas's tensor_clamp, bounds cast to x's dtype: where(x > max, max, x), then where(. < min, min, .).
at::Tensor tensor_clamp_ste(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val) {
  ops::detail::check_tensor_clamp_ste_args(x, min_val, max_val);
  const at::Tensor lo = min_val.to(x.scalar_type());
  const at::Tensor hi = max_val.to(x.scalar_type());
  const at::Tensor c = at::where(x > hi, hi, x);
  return as_output_like(at::where(c < lo, lo, c), x);
}

// The bounds in x's dtype (as the CPU kernel converts them), lower bound first, NaN kept.
at::Tensor scalar_clamp(const at::Tensor& x, double min_val, std::optional<double> max_val, const char* name) {
  ops::detail::check_scalar_clamp_args(x, min_val, max_val, name);
  const at::Tensor lo = scalar_in_dtype_of(min_val, x);
  at::Tensor y = at::where(x < lo, lo, x);
  if (max_val) {
    const at::Tensor hi = scalar_in_dtype_of(*max_val, x);
    y = at::where(y > hi, hi, y);
  }
  return as_output_like(y, x);
}

at::Tensor scalar_clamp_ste(const at::Tensor& x, double min_val, double max_val) {
  return scalar_clamp(x, min_val, max_val, "scalar_clamp_ste");
}

at::Tensor scalar_clamp_min_ste(const at::Tensor& x, double min_val) {
  return scalar_clamp(x, min_val, std::nullopt, "scalar_clamp_min_ste");
}

// sign(x) * clamp_min(|x|, lo) with sign(-0.0) = +1; NaN stays NaN.
at::Tensor scalar_signed_clamp_min_ste(const at::Tensor& x, double min_val) {
  ops::detail::check_scalar_signed_clamp_min_args(x, min_val);
  const at::Tensor lo = scalar_in_dtype_of(min_val, x);
  const at::Tensor neg_lo = -lo;
  const at::Tensor a = at::abs(x);
  const at::Tensor up = at::where(a < lo, lo, a);
  const at::Tensor down = at::where(x > neg_lo, neg_lo, x);
  return as_output_like(at::where(x >= 0, up, down), x);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("tensor_clamp_ste", TORCH_FN(tensor_clamp_ste));
  m.impl("scalar_clamp_ste", TORCH_FN(scalar_clamp_ste));
  m.impl("scalar_clamp_min_ste", TORCH_FN(scalar_clamp_min_ste));
  m.impl("scalar_signed_clamp_min_ste", TORCH_FN(scalar_signed_clamp_min_ste));
}

}  // namespace brevitas_cpp::composite
