#include "ops/common/quant_math.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/scaled_quant.h"
#include "ops/ternary_quant.h"

#include <utility>

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

namespace {

// m * sign(x) with m = 1.0 where |x| > threshold * s, else 0.0 (NaN x kept).
template <typename T>
inline Vec<T> masked_sign(const Vec<T>& x, const Vec<T>& s, double threshold) {
  const Vec<T> one(T(1));
  const Vec<T> m = Vec<T>(x.abs() > vec_math::mul_scalar<T>(s, threshold)) & one;
  return vec_math::keep_nan<T>(m * vec_math::sign<T>(x), x);
}

}  // namespace

at::Tensor ternary_quant_cpu(const at::Tensor& x, const at::Tensor& scale, double threshold) {
  ops::detail::check_threshold(threshold, "ternary_quant");
  return scaled_quant_forward(x, scale, "ternary_quant", [threshold](const auto& xv, const auto& s) {
    using T = typename std::decay_t<decltype(xv)>::value_type;
    return masked_sign<T>(xv, s, threshold) * s;
  });
}

// y = (m * sign(x)) * s:  dx = (g * s) * m,  ds = g * (m * sign(x)).
std::tuple<at::Tensor, at::Tensor> ternary_quant_backward_cpu(const at::Tensor& grad, const at::Tensor& x,
                                                              const at::Tensor& scale, double threshold,
                                                              std::array<bool, 2> output_mask) {
  ops::detail::check_threshold(threshold, "_ternary_quant_backward");
  return scaled_quant_backward(grad, x, scale, output_mask, "_ternary_quant_backward",
                               [threshold](const auto& g, const auto& xv, const auto& s) {
                                 using T = typename std::decay_t<decltype(xv)>::value_type;
                                 const Vec<T> one(T(1));
                                 const Vec<T> m = Vec<T>(xv.abs() > vec_math::mul_scalar<T>(s, threshold)) & one;
                                 return std::pair{(g * s) * m, g * masked_sign<T>(xv, s, threshold)};
                               });
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
