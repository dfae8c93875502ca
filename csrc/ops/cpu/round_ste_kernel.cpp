#include "ops/common/checks.h"
#include "ops/common/quant_math.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/kernels.h"

namespace brevitas_cpp::cpu::CPU_CAPABILITY {

namespace {

template <RoundingMode M>
at::Tensor round_kernel(const at::Tensor& x, const char* name) {
  check_floating(x, name, "x");
  return unary_kernel(x, name, [](const auto& v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    return vec_math::round_as<M, T>(v);
  });
}

}  // namespace

at::Tensor round_ste_cpu(const at::Tensor& x) {
  return round_kernel<RoundingMode::kRound>(x, "round_ste");
}
at::Tensor ceil_ste_cpu(const at::Tensor& x) {
  return round_kernel<RoundingMode::kCeil>(x, "ceil_ste");
}
at::Tensor floor_ste_cpu(const at::Tensor& x) {
  return round_kernel<RoundingMode::kFloor>(x, "floor_ste");
}
at::Tensor round_to_zero_ste_cpu(const at::Tensor& x) {
  return round_kernel<RoundingMode::kRoundToZero>(x, "round_to_zero_ste");
}
at::Tensor dpu_round_ste_cpu(const at::Tensor& x) {
  return round_kernel<RoundingMode::kDpu>(x, "dpu_round_ste");
}

}  // namespace brevitas_cpp::cpu::CPU_CAPABILITY
