"""Runtime statistics across data-parallel ranks.

Activation quantizers that collect statistics of their input (RuntimeStatsScaling,
ParameterFromRuntimeStatsScaling, ParameterFromRuntimeZeroPoint) see only the local batch on
each rank. Left alone, every rank would initialise a different learned scale from its own
data, and the replicas of a DistributedDataParallel model would silently diverge (DDP only
averages gradients). While collecting, those blocks therefore pass each batch statistic
through :func:`all_reduce_stats`, which replaces it by its average over the ranks, as
SyncBatchNorm does for batch-norm statistics.

:func:`all_reduce_stats` is the C++ op ``torch.ops.brevitas_cpp.stats_all_reduce_mean``:

- it returns a new contiguous tensor: the mean over the ranks of the statistics group, or an
  exact copy of the statistic (same numbers, identity gradient) when syncing is off, when
  torch.distributed is not initialised, or when the group has a single rank;
- differentiable: the batch statistic is used in the forward during the warm-up, and its
  gradient reaches every rank's input (the backward averages the incoming gradient over the
  ranks), so a DDP run on R equal shards matches a single process on the whole batch for
  statistics that average (e.g. StatsOp.AVE);
- an op, not a Python callback: TorchScript blocks (BREVITAS_JIT=1) compile the call in, so
  their models can be saved with torch.jit.save and run by torch::jit::load in C++. The
  collective goes through c10d's ProcessGroup, found by name in the registry that
  torch.distributed fills (the default group is named "0").

Which group, and whether to sync at all, is process-wide state held in C++ (the single source
of truth, also settable from C++ through ``_set_stats_sync``); the functions below set it.

Every rank must call the same quantizers in the same order, in training mode, as DDP already
requires. Collections that should stay local (per-rank calibration, a model replicated on a
subset of ranks) can use :func:`stats_sync` or a dedicated process group.
"""

import contextlib
from typing import Iterator, Optional

import torch
import torch.distributed as dist
from torch import Tensor

import brevitas_cpp._load  # noqa: F401  (registers the ops used below)
from brevitas_cpp.jit import recording_graph

__all__ = ["all_reduce_stats", "set_stats_process_group", "stats_sync", "stats_sync_enabled"]


def set_stats_process_group(group: Optional["dist.ProcessGroup"]) -> None:
    """Average statistics over ``group`` instead of every rank (None: the default group).
    The group is remembered by name; it must stay alive (not destroyed) while it is used."""
    if group is None:
        name = None
    elif dist.is_available() and isinstance(group, dist.ProcessGroup):
        name = group.group_name
    else:
        raise TypeError(
            f"set_stats_process_group: group must be a torch.distributed.ProcessGroup or None, "
            f"got {group!r}"
        )
    enabled, _ = torch.ops.brevitas_cpp._get_stats_sync()
    torch.ops.brevitas_cpp._set_stats_sync(enabled, name)


def stats_sync_enabled() -> bool:
    """Whether statistics are averaged across ranks when torch.distributed is initialised."""
    enabled, _ = torch.ops.brevitas_cpp._get_stats_sync()
    return enabled


def _set_enabled(enabled: bool) -> None:
    # The group is read back so that a group set inside a stats_sync block is kept.
    _, group_name = torch.ops.brevitas_cpp._get_stats_sync()
    torch.ops.brevitas_cpp._set_stats_sync(enabled, group_name)


@contextlib.contextmanager
def stats_sync(enabled: bool) -> Iterator[None]:
    """Turn the averaging of runtime statistics on or off inside a ``with`` block (every rank
    must agree: a rank that skips the collective leaves the others waiting)."""
    if not isinstance(enabled, bool):
        raise TypeError(f"stats_sync: enabled must be a bool, got {enabled!r}")
    previous = stats_sync_enabled()
    _set_enabled(enabled)
    try:
        yield
    finally:
        _set_enabled(previous)


def all_reduce_stats(stats: Tensor) -> Tensor:
    """stats averaged over the ranks of the statistics group, as a new tensor; an exact copy
    when there is a single rank, torch.distributed is not initialised, or syncing is off.
    Plain and scriptable: scripted blocks call the op directly."""
    if not torch.jit.is_scripting():  # (a branch TorchScript does not compile)
        # A floating stats only: anything else goes to the op, which refuses it by name.
        if stats.is_floating_point() and stats_stay_local():
            # What the op returns here, without its look-up of the world group in c10d's
            # registry, which fails by throwing (about 10 us on every statistics call).
            return stats.clone(memory_format=torch.contiguous_format)
    return torch.ops.brevitas_cpp.stats_all_reduce_mean(stats)


def _stats_stay_local() -> bool:
    """stats_stay_local, for code TorchScript compiles (which asks the op instead: c10d's
    look-up of the world group, the one the composition's all_reduce_stats makes anyway)."""
    if not torch.jit.is_scripting():  # (a branch TorchScript does not compile)
        return stats_stay_local()
    return torch.ops.brevitas_cpp._stats_stay_local()


def stats_stay_local() -> bool:
    """Whether all_reduce_stats, called now, returns an exact copy of its input: in eager mode,
    syncing off, or no group asked for by name and Python's torch.distributed not initialised.
    Not while tracing or compiling: the graph must keep the op, which decides on every run (the
    process group may be initialised after the model is traced)."""
    if recording_graph():
        return False
    enabled, group_name = torch.ops.brevitas_cpp._get_stats_sync()
    if not enabled:
        return True
    return group_name is None and not (dist.is_available() and dist.is_initialized())
