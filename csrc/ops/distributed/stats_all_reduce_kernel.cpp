// Device-generic kernels of the statistics average: the collective goes through c10d's
// ProcessGroup (gloo on CPU, NCCL on CUDA), resolved by name in c10d's group registry, the
// same registry torch.distributed fills in Python. No Python is involved, so the ops run from
// TorchScript, torch::jit::load and plain C++.
#include "ops/common/checks.h"
#include "ops/stats_all_reduce.h"

#include <torch/library.h>
#include <torch/csrc/distributed/c10d/GroupRegistry.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <vector>

namespace brevitas_cpp::ops {
namespace {

constexpr char kPublicOp[] = "stats_all_reduce_mean";
constexpr char kCollectiveOp[] = "_all_reduce_mean";
constexpr char kMaxOp[] = "_all_reduce_max";

// The group registered under `name`, or null when none is (resolve_process_group throws).
c10::intrusive_ptr<c10d::ProcessGroup> try_resolve(const std::string& name) {
  try {
    return c10d::resolve_process_group(name);
  } catch (const c10::Error&) {
    return {};
  }
}

c10::intrusive_ptr<c10d::ProcessGroup> resolve_or_throw(const std::string& name, const char* op) {
  auto group = try_resolve(name);
  TORCH_CHECK(group, "brevitas_cpp::", op, ": group_name '", name,
              "' names no registered process group (torch.distributed is not initialised, or the "
              "group was destroyed); accepted: the group_name of a live torch.distributed "
              "ProcessGroup (brevitas_cpp.distributed.set_stats_process_group(None) returns to "
              "the default group)");
  return group;
}

// x averaged over the group's ranks: sum-all-reduce of a contiguous copy, then / size.
at::Tensor all_reduce_mean_kernel(const at::Tensor& x, c10::string_view group_name) {
  check_floating(x, kCollectiveOp, "x");
  const auto group = resolve_or_throw(std::string(group_name), kCollectiveOp);
  at::Tensor total = x.clone(at::MemoryFormat::Contiguous);
  std::vector<at::Tensor> tensors{total};
  group->allreduce(tensors)->wait();  // AllreduceOptions() reduces with SUM
  return total.div_(group->getSize());
}

// The elementwise maximum over the group's ranks, of a contiguous copy.
at::Tensor all_reduce_max_kernel(const at::Tensor& x, c10::string_view group_name) {
  check_floating(x, kMaxOp, "x");
  const auto group = resolve_or_throw(std::string(group_name), kMaxOp);
  at::Tensor result = x.clone(at::MemoryFormat::Contiguous);
  std::vector<at::Tensor> tensors{result};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  group->allreduce(tensors, options)->wait();
  return result;
}

// Registered for the Autograd key as well as the backends: at the Autograd key the calls below
// are themselves differentiable (clone: identity gradient; _all_reduce_mean: its own backward),
// so the public op needs no autograd Function of its own.
at::Tensor stats_all_reduce_mean_kernel(const at::Tensor& x) {
  check_floating(x, kPublicOp, "x");
  const auto group_name = active_stats_group_name();
  if (!group_name) return x.clone(at::MemoryFormat::Contiguous);
  return _all_reduce_mean(x, *group_name);
}

}  // namespace

std::optional<std::string> active_stats_group_name() {
  const StatsSync state = get_stats_sync();
  if (!state.enabled) return std::nullopt;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  if (state.group_name) {
    group = resolve_or_throw(*state.group_name, kPublicOp);
  } else {
    // Auto: the world group if torch.distributed is initialised, else a single process.
    // This lookup is paid only while statistics are being collected.
    group = try_resolve(kWorldGroupName);
    if (!group) return std::nullopt;
  }
  if (group->getSize() == 1) return std::nullopt;
  return state.group_name.value_or(kWorldGroupName);
}

TORCH_LIBRARY_IMPL(brevitas_cpp, CompositeExplicitAutograd, m) {
  m.impl("stats_all_reduce_mean", TORCH_FN(stats_all_reduce_mean_kernel));
  m.impl("_all_reduce_mean", TORCH_FN(all_reduce_mean_kernel));
  m.impl("_all_reduce_max", TORCH_FN(all_reduce_max_kernel));
}

TORCH_LIBRARY_IMPL(brevitas_cpp, Autograd, m) {
  m.impl("stats_all_reduce_mean", TORCH_FN(stats_all_reduce_mean_kernel));
}

}  // namespace brevitas_cpp::ops
