// Meta kernels: shapes, dtypes and strides exactly as the CPU kernels return them.
#include "ops/meta/unary_meta.h"

#include <torch/library.h>

namespace brevitas_cpp::meta {
namespace {

constexpr char kRound[] = "round_ste";
constexpr char kCeil[] = "ceil_ste";
constexpr char kFloor[] = "floor_ste";
constexpr char kRoundToZero[] = "round_to_zero_ste";
constexpr char kDpu[] = "dpu_round_ste";

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("round_ste", TORCH_FN(unary_meta<kRound>));
  m.impl("ceil_ste", TORCH_FN(unary_meta<kCeil>));
  m.impl("floor_ste", TORCH_FN(unary_meta<kFloor>));
  m.impl("round_to_zero_ste", TORCH_FN(unary_meta<kRoundToZero>));
  m.impl("dpu_round_ste", TORCH_FN(unary_meta<kDpu>));
}

}  // namespace brevitas_cpp::meta
