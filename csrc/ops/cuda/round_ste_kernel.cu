#include "ops/common/checks.h"
#include "ops/common/rounding.h"
#include "ops/cuda/elementwise.cuh"

#include <torch/library.h>

namespace brevitas_cpp::cuda {

namespace {

template <RoundingMode M, typename T>
struct RoundOp {
  __device__ __forceinline__ T operator()(T x) const { return scalar_math::round_as<M>(x); }
};

template <RoundingMode M>
at::Tensor round_kernel(const at::Tensor& x, const char* name) {
  check_floating(x, name, "x");
  return unary_cuda(x, [](auto tag) { return RoundOp<M, decltype(tag)>{}; });
}

at::Tensor round_ste_cuda(const at::Tensor& x) {
  return round_kernel<RoundingMode::kRound>(x, "round_ste");
}
at::Tensor ceil_ste_cuda(const at::Tensor& x) {
  return round_kernel<RoundingMode::kCeil>(x, "ceil_ste");
}
at::Tensor floor_ste_cuda(const at::Tensor& x) {
  return round_kernel<RoundingMode::kFloor>(x, "floor_ste");
}
at::Tensor round_to_zero_ste_cuda(const at::Tensor& x) {
  return round_kernel<RoundingMode::kRoundToZero>(x, "round_to_zero_ste");
}
at::Tensor dpu_round_ste_cuda(const at::Tensor& x) {
  return round_kernel<RoundingMode::kDpu>(x, "dpu_round_ste");
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CUDA, m) {
  m.impl("round_ste", TORCH_FN(round_ste_cuda));
  m.impl("ceil_ste", TORCH_FN(ceil_ste_cuda));
  m.impl("floor_ste", TORCH_FN(floor_ste_cuda));
  m.impl("round_to_zero_ste", TORCH_FN(round_to_zero_ste_cuda));
  m.impl("dpu_round_ste", TORCH_FN(dpu_round_ste_cuda));
}

}  // namespace brevitas_cpp::cuda
