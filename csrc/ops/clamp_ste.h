#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace brevitas_cpp::ops {

// Brevitas's tensor_clamp (torch.where(x > max, max, x), then torch.where(. < min, min, .))
// with a straight-through gradient for x and none for the bounds. min_val/max_val
// broadcast to x and are cast to x's dtype.
at::Tensor tensor_clamp_ste(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val);
// torch.clamp(x, min_val, max_val) with a straight-through gradient.
at::Tensor scalar_clamp_ste(const at::Tensor& x, double min_val, double max_val);
// torch.clamp_min(x, min_val) with a straight-through gradient.
at::Tensor scalar_clamp_min_ste(const at::Tensor& x, double min_val);
// Keeps |x| >= min_val (min_val >= 0) with x's sign, zero counting as positive: max(x, min_val)
// where x >= 0, min(x, -min_val) elsewhere, NaN stays NaN; straight-through gradient. The
// values of Brevitas's ScalarSignedClampMinSte composition
//   where(x >= 0, 1, -1) * scalar_clamp_min_ste(abs_binary_sign_grad(x), min_val)
// whose gradient is grad * sign * binary_sign(x) = grad: one op instead of seven.
at::Tensor scalar_signed_clamp_min_ste(const at::Tensor& x, double min_val);

namespace detail {
// Argument checks shared by the CPU and Meta kernels.
void check_tensor_clamp_ste_args(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val);
// x floating; bounds not NaN, min_val <= max_val, and representable in x's dtype (as torch.clamp).
void check_scalar_clamp_args(const at::Tensor& x, double min_val, std::optional<double> max_val, const char* op);
// min_val >= 0 (NaN rejected) and representable in x's dtype.
void check_scalar_signed_clamp_min_args(const at::Tensor& x, double min_val);
}  // namespace detail

}  // namespace brevitas_cpp::ops
