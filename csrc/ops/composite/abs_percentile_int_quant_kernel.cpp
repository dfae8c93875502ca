#include "ops/abs_percentile_int_quant.h"
#include "ops/composite/compositions.h"
#include "ops/int_quant.h"
#include "ops/relu_int_quant.h"

#include <torch/library.h>

namespace brevitas_cpp::composite {
namespace {

constexpr const char* kOp = "abs_percentile_int_quant";

// The selection and scale as ATen ops (CUDA's kernels, without a host read): kthvalue gives the
// value and the index (the device's, as Brevitas's AbsPercentile gets them there), then
// int_quant (relu_int_quant) on the device's own kernel.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> abs_percentile_int_quant(
    const at::Tensor& x, const std::optional<at::Tensor>&, const at::Tensor& bit_width, int64_t k, bool is_signed,
    bool narrow_range, std::optional<double> scaling_min_val, c10::string_view rounding_mode, bool clamp_ste,
    bool relu) {
  ops::detail::check_abs_percentile_int_quant_args(x, bit_width, k, scaling_min_val, rounding_mode, kOp);
  const at::Tensor a = (relu ? at::relu(x) : x).abs().reshape(-1);
  // Through float32 where kthvalue has no kernel (float16 on the CPU, bfloat16 on CUDA), as
  // Brevitas does: the same order, so the same selection.
  const bool widen = (a.scalar_type() == at::kHalf && a.device().is_cpu()) ||
                     (a.scalar_type() == at::kBFloat16 && a.device().is_cuda());
  auto [kth, index] = at::kthvalue(widen ? a.to(at::kFloat) : a, k);
  const at::Tensor v = widen ? kth.to(a.scalar_type()) : kth;
  const at::Tensor stat = scaling_min_val.has_value() ? at::clamp_min(v, scalar_in_dtype_of(*scaling_min_val, x)) : v;
  const at::Tensor scale = stat / int_threshold(bit_width, is_signed, narrow_range, x.scalar_type());
  const at::Tensor zero = at::zeros({}, x.options());
  at::Tensor y = relu
                     ? ops::relu_int_quant(x, scale, zero, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste)
                     : ops::int_quant(x, scale, zero, bit_width, is_signed, narrow_range, rounding_mode, clamp_ste);
  return {as_output_like(y, x), scale, stat, index};
}

// int_quant's (relu_int_quant's) gradients, then the scale's, / threshold, times sgn of the
// selected value, added at the index (nothing where ReLU's mask is 0).
at::Tensor abs_percentile_int_quant_backward(const std::optional<at::Tensor>& grad,
                                             const std::optional<at::Tensor>& grad_scale, const at::Tensor& x,
                                             const at::Tensor& scale, const at::Tensor& index,
                                             const at::Tensor& bit_width, bool is_signed, bool narrow_range,
                                             c10::string_view rounding_mode, bool clamp_ste, bool relu) {
  ops::detail::check_abs_percentile_int_quant_backward_args(grad, grad_scale, x, scale, index, bit_width,
                                                            rounding_mode);
  if (!grad.has_value() && !grad_scale.has_value()) return at::zeros_like(x);
  at::Tensor gx, g;
  if (grad.has_value()) {
    const at::Tensor zero = at::zeros({}, x.options());
    const std::array<bool, 4> mask{true, true, false, false};
    auto grads = relu ? ops::_relu_int_quant_backward(*grad, x, scale, zero, bit_width, is_signed, narrow_range,
                                                      rounding_mode, clamp_ste, mask)
                      : ops::_int_quant_backward(*grad, x, std::nullopt, scale, zero, bit_width, is_signed,
                                                 narrow_range, rounding_mode, clamp_ste, mask);
    gx = std::get<0>(grads);
    const at::Tensor gs = std::get<1>(grads).reshape({});
    g = grad_scale.has_value() ? *grad_scale + gs : gs;
  } else {
    gx = at::zeros_like(x);  // y got no gradient: the scale's path alone
    g = *grad_scale;
  }
  const at::Tensor g_stat = g / int_threshold(bit_width, is_signed, narrow_range, x.scalar_type());
  const at::Tensor at_index = index.reshape({1});
  const at::Tensor xi = x.reshape(-1).index_select(0, at_index);
  at::Tensor sel = (g_stat * at::sgn(xi)) + 0.0;
  if (relu) sel = at::where(xi <= 0, at::zeros_like(sel), sel);
  at::Tensor out = gx.contiguous();
  out.view(-1).index_add_(0, at_index, sel);
  return as_output_like(out, x);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("abs_percentile_int_quant", TORCH_FN(abs_percentile_int_quant));
  m.impl("_abs_percentile_int_quant_backward", TORCH_FN(abs_percentile_int_quant_backward));
}

}  // namespace brevitas_cpp::composite
