// float_quant on the CPU: the scaled-op drivers (layout, dtype dispatch, the scale-gradient
// reduction) around the shared arithmetic: its vector form (quant_math.h) for float and double,
// the scalar one of common/rounding.h lane by lane otherwise (half precision, extreme biases).
#include "ops/common/quant_math.h"
#include "ops/common/rounding.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/scaled_quant.h"
#include "ops/float_quant.h"

#include <utility>

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

namespace {
using scalar_math::float_quant_element;
using scalar_math::opmath_t;

template <typename T, typename Fn>
inline Vec<T> per_lane(const Vec<T>& a, const Vec<T>& b, const Fn& fn) {
  T av[Vec<T>::size()], bv[Vec<T>::size()];
  a.store(av);
  b.store(bv);
  for (int64_t j = 0; j < Vec<T>::size(); ++j) av[j] = fn(av[j], bv[j]);
  return Vec<T>::loadu(av);
}
}  // namespace

at::Tensor float_quant_cpu(const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
                           int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed,
                           bool saturating, bool inf_values, bool nan_values, c10::string_view rounding_mode) {
  const MinifloatFormat f =
      ops::detail::check_float_quant_args(x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value,
                                          is_signed, saturating, inf_values, nan_values, rounding_mode, "float_quant");
  return scaled_quant_forward(
      x, scale, "float_quant",
      [&f](const auto& xv, const auto& s) {
        using T = typename std::decay_t<decltype(xv)>::value_type;
        if (vec_math::minifloat_vectorizes<T>(f)) return vec_math::float_quant_element<T>(xv, s, f).y;
        return per_lane<T>(xv, s, [&f](T xe, T se) { return float_quant_element<T>(xe, se, f).y; });
      },
      ScaleRange::kNormal);
}

// dx = g * slope where the clamp passed, else 0;  ds = g * (q - [passed] * slope * u).
std::tuple<at::Tensor, at::Tensor> float_quant_backward_cpu(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale, int64_t exponent_bit_width,
    int64_t mantissa_bit_width, int64_t exponent_bias, double max_value, bool is_signed, bool saturating,
    bool inf_values, bool nan_values, c10::string_view rounding_mode, std::array<bool, 2> output_mask) {
  const MinifloatFormat f = ops::detail::check_float_quant_args(
      x, scale, exponent_bit_width, mantissa_bit_width, exponent_bias, max_value, is_signed, saturating, inf_values,
      nan_values, rounding_mode, "_float_quant_backward");
  check_scale(scale, ScaleRange::kNormal, "_float_quant_backward");  // the forward's check, for direct calls
  return scaled_quant_backward(
      grad, x, scale, output_mask, "_float_quant_backward", [&f](const auto& g, const auto& xv, const auto& s) {
        using T = typename std::decay_t<decltype(xv)>::value_type;
        using A = opmath_t<T>;
        if (vec_math::minifloat_vectorizes<T>(f)) {
          const auto e = vec_math::float_quant_element<T>(xv, s, f);
          const Vec<T> through = e.slope & e.passed;
          return std::pair{g * through, g * (e.q - through * e.u)};
        }
        T gv[Vec<T>::size()], xa[Vec<T>::size()], sa[Vec<T>::size()], dx[Vec<T>::size()], ds[Vec<T>::size()];
        g.store(gv);
        xv.store(xa);
        s.store(sa);
        for (int64_t j = 0; j < Vec<T>::size(); ++j) {
          const auto e = float_quant_element<T>(xa[j], sa[j], f);
          const A through = e.passed ? e.slope : A(0);
          dx[j] = static_cast<T>(static_cast<A>(gv[j]) * through);
          ds[j] = static_cast<T>(static_cast<A>(gv[j]) * (static_cast<A>(e.q) - through * static_cast<A>(e.u)));
        }
        return std::pair{Vec<T>::loadu(dx), Vec<T>::loadu(ds)};
      });
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
