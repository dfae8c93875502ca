#include "ops/binary_quant.h"
#include "ops/common/quant_math.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/scaled_quant.h"

#include <utility>

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

namespace {

template <typename V>
using value_t = typename std::decay_t<V>::value_type;

// binary_sign with NaN kept.
template <typename T>
inline Vec<T> bsign(const Vec<T>& v) {
  return vec_math::keep_nan<T>(vec_math::binary_sign<T>(v), v);
}

}  // namespace

at::Tensor binary_quant_cpu(const at::Tensor& x, const at::Tensor& scale) {
  return scaled_quant_forward(x, scale, "binary_quant",
                              [](const auto& xv, const auto& s) { return bsign<value_t<decltype(xv)>>(xv) * s; });
}

// y = binary_sign(x) * s:  dx = g * s (straight through),  ds = g * binary_sign(x).
std::tuple<at::Tensor, at::Tensor> binary_quant_backward_cpu(const at::Tensor& grad, const std::optional<at::Tensor>& x,
                                                             const at::Tensor& scale, std::array<bool, 2> output_mask) {
  return scaled_quant_backward(grad, ops::detail::binary_quant_backward_input(grad, x, output_mask), scale, output_mask,
                               "_binary_quant_backward", [](const auto& g, const auto& xv, const auto& s) {
                                 return std::pair{g * s, g * bsign<value_t<decltype(xv)>>(xv)};
                               });
}

namespace {

// The clamp of Brevitas's tensor_clamp(x, -s, s): where(x > s, s, x), then where(. < -s, -s, .).
template <typename T>
struct ClampedToScale {
  Vec<T> value, above, below;
};
template <typename T>
inline ClampedToScale<T> clamp_to_scale(const Vec<T>& x, const Vec<T>& s) {
  const Vec<T> above = x > s;
  const Vec<T> c1 = Vec<T>::blendv(x, s, above);
  const Vec<T> neg_s = s.neg();
  const Vec<T> below = c1 < neg_s;
  return {Vec<T>::blendv(c1, neg_s, below), above, below};
}

}  // namespace

at::Tensor clamped_binary_quant_cpu(const at::Tensor& x, const at::Tensor& scale) {
  return scaled_quant_forward(x, scale, "clamped_binary_quant", [](const auto& xv, const auto& s) {
    using T = value_t<decltype(xv)>;
    return bsign<T>(clamp_to_scale<T>(xv, s).value) * s;
  });
}

// gs = g * s reaches the clamp: dx = gs where it passes; the bounds s and -s collect gs
// where x was clamped above / below, so ds = g * binary_sign(c) + gs[above] - gs[below].
std::tuple<at::Tensor, at::Tensor> clamped_binary_quant_backward_cpu(const at::Tensor& grad, const at::Tensor& x,
                                                                     const at::Tensor& scale,
                                                                     std::array<bool, 2> output_mask) {
  return scaled_quant_backward(
      grad, x, scale, output_mask, "_clamped_binary_quant_backward", [](const auto& g, const auto& xv, const auto& s) {
        using T = value_t<decltype(xv)>;
        const ClampedToScale<T> c = clamp_to_scale<T>(xv, s);
        const Vec<T> zero(T(0));
        const Vec<T> gs = g * s;
        const Vec<T> gx = Vec<T>::blendv(gs, zero, c.above | c.below);
        const Vec<T> ds = g * bsign<T>(c.value) + Vec<T>::blendv(zero, gs, c.above) - Vec<T>::blendv(zero, gs, c.below);
        return std::pair{gx, ds};
      });
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
