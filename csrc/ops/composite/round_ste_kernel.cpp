#include "ops/common/checks.h"
#include "ops/composite/compositions.h"

#include <torch/library.h>

namespace brevitas_cpp::composite {
namespace {

template <RoundingMode M>
at::Tensor round_kernel(const at::Tensor& x, const char* name) {
  check_floating(x, name, "x");
  return as_output_like(round_as(x, M), x);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("round_ste", [](const at::Tensor& x) { return round_kernel<RoundingMode::kRound>(x, "round_ste"); });
  m.impl("ceil_ste", [](const at::Tensor& x) { return round_kernel<RoundingMode::kCeil>(x, "ceil_ste"); });
  m.impl("floor_ste", [](const at::Tensor& x) { return round_kernel<RoundingMode::kFloor>(x, "floor_ste"); });
  m.impl("round_to_zero_ste",
         [](const at::Tensor& x) { return round_kernel<RoundingMode::kRoundToZero>(x, "round_to_zero_ste"); });
  m.impl("dpu_round_ste", [](const at::Tensor& x) { return round_kernel<RoundingMode::kDpu>(x, "dpu_round_ste"); });
}

}  // namespace brevitas_cpp::composite
