#include "ops/composite/compositions.h"

#include "ops/common/param_layout.h"

#include <ATen/Dispatch.h>

#include <limits>

namespace brevitas_cpp::composite {

at::Tensor round_as(const at::Tensor& u, RoundingMode mode) {
  switch (mode) {
    case RoundingMode::kRound:
      return at::round(u);  // half to even
    case RoundingMode::kCeil:
      return at::ceil(u);
    case RoundingMode::kFloor:
      return at::floor(u);
    case RoundingMode::kRoundToZero:
      return at::sign(u) * at::floor(at::abs(u));
    case RoundingMode::kDpu:
    default: {
      const at::Tensor tie_up = at::logical_and(u < 0, (u - at::floor(u)) == 0.5);
      return at::where(tie_up, at::ceil(u), at::round(u));
    }
  }
}

at::Tensor binary_sign(const at::Tensor& x) {
  const at::Tensor one = at::ones({}, x.options());
  return at::where(at::isnan(x), x, at::where(x >= 0, one, -one));
}

at::Tensor sign_keep_nan(const at::Tensor& x) {
  return at::where(at::isnan(x), x, at::sign(x));
}

at::Tensor as_output_like(const at::Tensor& t, const at::Tensor& x) {
  at::Tensor out = empty_output_like(x, t.scalar_type());
  if (t.strides() == out.strides()) return t;
  return out.copy_(t);
}

at::Tensor nan_where_invalid(const at::Tensor& y, const at::Tensor& valid) {
  return at::where(valid, y, at::full({}, std::numeric_limits<double>::quiet_NaN(), y.options()));
}

at::Tensor scalar_in_dtype_of(double v, const at::Tensor& x) {
  // Filled on x's device: a host-to-device copy would synchronise and break CUDA graph capture.
  // float16/bfloat16 round through float32, as the composition's float32 constant does.
  const bool reduced = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  return at::full({}, reduced ? static_cast<double>(static_cast<float>(v)) : v, x.options());
}

at::Tensor positive_finite(const at::Tensor& scale) {
  return at::logical_and(scale > 0, at::isfinite(scale));
}

at::Tensor normal_scale(const at::Tensor& scale) {
  double lo = 0.0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, scale.scalar_type(), "normal_scale",
                                  [&] { lo = static_cast<double>(scalar_math::smallest_normal<scalar_t>()); });
  // lo is exact in the scale's dtype, so the comparison is the kernels' (NaN fails it).
  return at::logical_and(scale >= lo, at::isfinite(scale));
}

at::Tensor normal_scale_or_nan(const at::Tensor& scale) {
  return nan_where_invalid(scale, normal_scale(scale));
}

at::Tensor int_threshold(const at::Tensor& bit_width, bool is_signed, bool narrow_range, at::ScalarType dtype) {
  const at::Tensor b = bit_width.reshape({});
  const bool integral = !at::isFloatingType(b.scalar_type());
  auto pow2 = [&](const at::Tensor& e) { return integral ? at::pow(2, e) : at::exp2(e); };
  at::Tensor thr;
  if (is_signed) {
    thr = narrow_range ? pow2(b - 1) - 1 : pow2(b - 1);
  } else {
    thr = pow2(b) - (narrow_range ? 2 : 1);
  }
  return thr.to(dtype);
}

}  // namespace brevitas_cpp::composite
