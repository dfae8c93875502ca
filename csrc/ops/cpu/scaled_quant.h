// Drivers for ops that quantize x with one broadcast scale (binary, clamped binary,
// ternary, float_quant): argument checks, layout, dtype dispatch and the scale-gradient reduction.
#pragma once

#include "ops/binary_quant.h"
#include "ops/common/checks.h"
#include "ops/cpu/elementwise.h"

#include <ATen/ATen.h>

// CPU_CAPABILITY (DEFAULT, AVX2, AVX512) names the instruction set this copy is compiled for.
namespace brevitas_cpp::cpu::CPU_CAPABILITY {

// y = fn(x, s) elementwise, fn generic over Vectorized<T>; `range`: the scales the op accepts.
template <typename Fn>
at::Tensor scaled_quant_forward(const at::Tensor& x, const at::Tensor& scale, const char* op, const Fn& fn,
                                ScaleRange range = ScaleRange::kPositive) {
  ops::detail::check_scaled_quant_args(x, scale, op);
  check_scale(scale, range, op);
  at::Tensor y = empty_output_like(x);
  if (x.numel() == 0) return y;
  const at::Tensor xd = with_layout_of(x, y);
  const ParamLayout L = make_param_layout(y, {scale}, x.scalar_type());
  BREVITAS_CPP_DISPATCH_FLOATING(x.scalar_type(), "scaled_quant_forward", [&] {
    scaled_forward_loop<scalar_t>(xd.const_data_ptr<scalar_t>(), y.mutable_data_ptr<scalar_t>(), L, x.numel(), fn);
  });
  return y;
}

// fn(g, x, s) -> std::pair{dx, ds contribution}; returns (dx, ds) as output_mask selects.
template <typename Fn>
std::tuple<at::Tensor, at::Tensor> scaled_quant_backward(const at::Tensor& grad, const at::Tensor& x,
                                                         const at::Tensor& scale, std::array<bool, 2> output_mask,
                                                         const char* op, const Fn& fn) {
  ops::detail::check_scaled_quant_backward_args(grad, x, scale, op);
  at::Tensor gx = output_mask[0] ? empty_output_like(x) : at::Tensor();
  at::Tensor gs;
  const at::Tensor layout = gx.defined() ? gx : dense_or_contiguous(x);
  const ParamLayout L = make_param_layout(layout, {scale}, x.scalar_type());
  std::vector<double> acc(static_cast<size_t>(L.K), 0.0);
  if (x.numel() > 0 && (output_mask[0] || output_mask[1])) {
    const at::Tensor gd = with_layout_of(grad, layout);
    const at::Tensor xd = gx.defined() ? with_layout_of(x, layout) : layout;  // layout is x made dense
    BREVITAS_CPP_DISPATCH_FLOATING(x.scalar_type(), "scaled_quant_backward", [&] {
      acc = scaled_backward_loop<scalar_t>(gd.const_data_ptr<scalar_t>(), xd.const_data_ptr<scalar_t>(),
                                           gx.defined() ? gx.mutable_data_ptr<scalar_t>() : nullptr, L, x.numel(),
                                           output_mask[1], fn);
    });
  }
  if (output_mask[1]) {
    gs = L.fold_to(acc.data(), scale);
  }
  return {gx, gs};
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
