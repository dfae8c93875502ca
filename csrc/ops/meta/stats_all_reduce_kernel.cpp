#include "ops/common/checks.h"
#include "ops/stats_all_reduce.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace brevitas_cpp::meta {
namespace {

// Both ops return a new contiguous tensor of x's shape and dtype, whatever x's strides (the
// collective needs a contiguous buffer; the single-process copy matches it).
template <const char* kName>
at::Tensor contiguous_like_meta(const at::Tensor& x) {
  check_floating(x, kName, "x");
  return at::empty_symint(x.sym_sizes(), x.options(), at::MemoryFormat::Contiguous);
}

constexpr char kPublic[] = "stats_all_reduce_mean";
constexpr char kCollective[] = "_all_reduce_mean";
constexpr char kMax[] = "_all_reduce_max";

at::Tensor all_reduce_mean_meta(const at::Tensor& x, c10::string_view /*group_name*/) {
  return contiguous_like_meta<kCollective>(x);
}

at::Tensor all_reduce_max_meta(const at::Tensor& x, c10::string_view /*group_name*/) {
  return contiguous_like_meta<kMax>(x);
}

}  // namespace

TORCH_LIBRARY_IMPL(brevitas_cpp, Meta, m) {
  m.impl("stats_all_reduce_mean", TORCH_FN(contiguous_like_meta<kPublic>));
  m.impl("_all_reduce_mean", TORCH_FN(all_reduce_mean_meta));
  m.impl("_all_reduce_max", TORCH_FN(all_reduce_max_meta));
}

}  // namespace brevitas_cpp::meta
