// The average of runtime statistics over the ranks of a process group (brevitas_cpp.distributed):
// the ops, and the process-wide switch that says whether and over which group to average.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <optional>
#include <string>

namespace brevitas_cpp::ops {

// x averaged over the ranks of the statistics group (see StatsSync), as a new contiguous
// tensor; differentiable (the gradient is averaged over the ranks too). A copy of x, with
// identity gradient, when syncing is off, no group resolves, or the group has one rank.
at::Tensor stats_all_reduce_mean(const at::Tensor& x);

// The collective itself, on the process group registered under `group_name` (c10d's group
// registry: torch.distributed's ProcessGroup.group_name). Sum over the ranks divided by their
// number; its backward is the same op on the incoming gradient.
at::Tensor _all_reduce_mean(const at::Tensor& x, c10::string_view group_name);

// The elementwise maximum over the ranks of the group (quantization_int8's activation
// threshold: replicas must agree on it). Not differentiable: statistics are buffers.
at::Tensor _all_reduce_max(const at::Tensor& x, c10::string_view group_name);

// torch.distributed names the default (world) group "0"; the auto mode averages over it
// whenever it is registered, and is a single process otherwise.
inline constexpr char kWorldGroupName[] = "0";

// Process-wide state read by stats_all_reduce_mean. group_name: nullopt = auto (the world group
// if torch.distributed is initialised), else the name of an explicit group, which must resolve.
struct StatsSync {
  bool enabled = true;
  std::optional<std::string> group_name;
};

// Thread safe. Also reachable through the ops _set_stats_sync / _get_stats_sync, so a program
// that only loads the library (torch::jit::load) sets it the same way as Python.
StatsSync get_stats_sync();
void set_stats_sync(const StatsSync& state);

// The group name to average over now, or nullopt when stats_all_reduce_mean is a copy.
std::optional<std::string> active_stats_group_name();

}  // namespace brevitas_cpp::ops
