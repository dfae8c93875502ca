"""Runtime statistics across data-parallel ranks.

Activation quantizers that collect statistics of their input (RuntimeStatsScaling,
ParameterFromRuntimeStatsScaling, ParameterFromRuntimeZeroPoint) see only the local batch on
each rank. Left alone, every rank would initialise a different learned scale from its own
data, and the replicas of a DistributedDataParallel model would silently diverge (DDP only
averages gradients). While collecting, those blocks therefore pass each batch statistic
through :func:`all_reduce_stats`, which replaces it by its average over the ranks, as
SyncBatchNorm does for batch-norm statistics:

- a no-op (the very same tensor, so single-process numbers are unchanged) unless
  torch.distributed is initialised with more than one rank in the statistics group;
- differentiable: the batch statistic is used in the forward during the warm-up, and its
  gradient reaches every rank's input (the backward all-reduces the incoming gradient), so a
  DDP run on R equal shards matches a single process on the whole batch for statistics that
  average (e.g. StatsOp.AVE);
- called from TorchScript blocks (BREVITAS_JIT=1) through ``torch.jit.ignore``: the collective
  runs in Python, outside the compiled graph.

Every rank must call the same quantizers in the same order, in training mode, as DDP already
requires. Collections that should stay local (per-rank calibration, a model replicated on a
subset of ranks) can use :func:`stats_sync` or a dedicated process group.
"""

import contextlib
from typing import Iterator, Optional

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["all_reduce_stats", "set_stats_process_group", "stats_sync", "stats_sync_enabled"]

# Module state rather than block attributes: TorchScript cannot hold a ProcessGroup, and the
# choice is per run, not per quantizer.
_enabled: bool = True
_group: Optional["dist.ProcessGroup"] = None  # None: the default (world) group


def set_stats_process_group(group: Optional["dist.ProcessGroup"]) -> None:
    """Average statistics over ``group`` instead of every rank (None: the default group)."""
    global _group
    if group is not None and not (dist.is_available() and isinstance(group, dist.ProcessGroup)):
        raise TypeError(
            f"set_stats_process_group: group must be a torch.distributed.ProcessGroup or None, "
            f"got {group!r}")
    _group = group


def stats_sync_enabled() -> bool:
    """Whether statistics are averaged across ranks when torch.distributed is initialised."""
    return _enabled


@contextlib.contextmanager
def stats_sync(enabled: bool) -> Iterator[None]:
    """Turn the averaging of runtime statistics on or off inside a ``with`` block (every rank
    must agree: a rank that skips the collective leaves the others waiting)."""
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"stats_sync: enabled must be a bool, got {enabled!r}")
    previous = _enabled
    _enabled = enabled
    try:
        yield
    finally:
        _enabled = previous


def _active_group_size() -> int:
    """Ranks to average over; 1 means nothing to do."""
    if not (_enabled and dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(_group)


class _AllReduceMean(torch.autograd.Function):
    """mean over ranks of x; the gradient of every rank's copy of the mean flows back to each
    rank's x (sum of the incoming gradients over ranks, divided by the rank count)."""

    @staticmethod
    def forward(ctx, x: Tensor, group: Optional["dist.ProcessGroup"], world_size: int) -> Tensor:
        # The group is kept: the backward must reduce over the ranks the forward did.
        ctx.group = group
        ctx.world_size = world_size
        total = x.detach().clone(memory_format=torch.contiguous_format)
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
        return total.div_(world_size)

    @staticmethod
    def backward(ctx, grad: Tensor):
        total = grad.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=ctx.group)
        return total.div_(ctx.world_size), None, None


@torch.jit.ignore
def all_reduce_stats(stats: Tensor) -> Tensor:
    """stats averaged over the ranks of the statistics group; stats itself when there is a
    single rank, torch.distributed is not initialised, or syncing is turned off."""
    world_size = _active_group_size()
    if world_size == 1:
        return stats
    return _AllReduceMean.apply(stats, _group, world_size)
