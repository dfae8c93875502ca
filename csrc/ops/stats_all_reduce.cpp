#include "ops/stats_all_reduce.h"

#include "ops/common/op_handle.h"

#include <torch/library.h>

#include <mutex>
#include <tuple>
#include <utility>

namespace brevitas_cpp::ops {
namespace {

// One state for the whole process, as torch.distributed's default group is.
std::mutex g_stats_sync_mutex;
StatsSync g_stats_sync;

void set_stats_sync_op(bool enabled, std::optional<c10::string_view> group_name) {
  StatsSync state;
  state.enabled = enabled;
  if (group_name.has_value()) state.group_name = std::string(*group_name);
  set_stats_sync(state);
}

std::tuple<bool, std::optional<std::string>> get_stats_sync_op() {
  StatsSync state = get_stats_sync();
  return {state.enabled, std::move(state.group_name)};
}

// Whether stats_all_reduce_mean is a copy now: the fused statistics ops, which cannot average
// over ranks, stand in for it only then (TorchScript's check; eager Python skips the look-up).
bool stats_stay_local_op() {
  return !active_stats_group_name().has_value();
}

}  // namespace

at::Tensor stats_all_reduce_mean(const at::Tensor& x) {
  static auto op = op_handle<decltype(stats_all_reduce_mean)>("brevitas_cpp::stats_all_reduce_mean");
  return op.call(x);
}

at::Tensor _all_reduce_mean(const at::Tensor& x, c10::string_view group_name) {
  static auto op = op_handle<decltype(_all_reduce_mean)>("brevitas_cpp::_all_reduce_mean");
  return op.call(x, group_name);
}

at::Tensor _all_reduce_max(const at::Tensor& x, c10::string_view group_name) {
  static auto op = op_handle<decltype(_all_reduce_max)>("brevitas_cpp::_all_reduce_max");
  return op.call(x, group_name);
}

StatsSync get_stats_sync() {
  std::lock_guard<std::mutex> lock(g_stats_sync_mutex);
  return g_stats_sync;
}

void set_stats_sync(const StatsSync& state) {
  // An empty name can never be registered: say so now rather than at the first collective.
  TORCH_CHECK(!state.group_name.has_value() || !state.group_name->empty(),
              "brevitas_cpp::_set_stats_sync: group_name must be the name of a registered process "
              "group (ProcessGroup.group_name) or None for the default group, got an empty string");
  std::lock_guard<std::mutex> lock(g_stats_sync_mutex);
  g_stats_sync = state;
}

TORCH_LIBRARY_FRAGMENT(brevitas_cpp, m) {
  m.def("stats_all_reduce_mean(Tensor x) -> Tensor");
  m.def("_all_reduce_mean(Tensor x, str group_name) -> Tensor");
  m.def("_all_reduce_max(Tensor x, str group_name) -> Tensor");
  // Conservative aliasing: TorchScript must neither drop the setter (no outputs) nor
  // constant-fold the getter (no inputs); both touch process state.
  m.def(
      torch::schema("_set_stats_sync(bool enabled, str? group_name=None) -> ()", c10::AliasAnalysisKind::CONSERVATIVE),
      TORCH_FN(set_stats_sync_op));
  m.def(torch::schema("_get_stats_sync() -> (bool enabled, str? group_name)", c10::AliasAnalysisKind::CONSERVATIVE),
        TORCH_FN(get_stats_sync_op));
  m.def(torch::schema("_stats_stay_local() -> bool", c10::AliasAnalysisKind::CONSERVATIVE),
        TORCH_FN(stats_stay_local_op));
}

}  // namespace brevitas_cpp::ops
