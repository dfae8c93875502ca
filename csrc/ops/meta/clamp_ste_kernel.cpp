#include "ops/clamp_ste.h"
#include "ops/common/checks.h"
#include "ops/common/param_layout.h"

#include <torch/library.h>

#include <limits>

namespace brevitas_cpp::meta {
namespace {

at::Tensor tensor_clamp_ste_meta(const at::Tensor& x, const at::Tensor& min_val, const at::Tensor& max_val) {
  ops::detail::check_tensor_clamp_ste_args(x, min_val, max_val);
  return empty_output_like(x);
}

at::Tensor scalar_clamp_ste_meta(const at::Tensor& x, double min_val, double max_val) {
  ops::detail::check_scalar_clamp_args(x, min_val, max_val, "scalar_clamp_ste");
  return empty_output_like(x);
}

at::Tensor scalar_clamp_min_ste_meta(const at::Tensor& x, double min_val) {
  ops::detail::check_scalar_clamp_args(x, min_val, std::nullopt, "scalar_clamp_min_ste");
  return empty_output_like(x);
}

at::Tensor scalar_signed_clamp_min_ste_meta(const at::Tensor& x, double min_val) {
  ops::detail::check_scalar_signed_clamp_min_args(x, min_val);
  return empty_output_like(x);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("tensor_clamp_ste", TORCH_FN(tensor_clamp_ste_meta));
  m.impl("scalar_clamp_ste", TORCH_FN(scalar_clamp_ste_meta));
  m.impl("scalar_clamp_min_ste", TORCH_FN(scalar_clamp_min_ste_meta));
  m.impl("scalar_signed_clamp_min_ste", TORCH_FN(scalar_signed_clamp_min_ste_meta));
}

}  // namespace brevitas_cpp::meta
