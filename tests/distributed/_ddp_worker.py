"""Child-process side of test_ddp.py and test_stats_all_reduce.py: each function runs on one
rank of a 2-process gloo group.

Nothing from brevitas_cpp is imported at module level: BREVITAS_JIT is read once, at import,
so each child sets it (and the rendezvous variables) before the first import. Results go to
``out_dir`` as ``<name>_rank<r>.pt`` files; a failure leaves its traceback in
``error_rank<r>.txt`` for the parent's message.

The model, the data and the training loop are also used by the parent for the single-process
reference, so they take no distributed arguments."""

import datetime
import os
import sys
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

WORLD_SIZE = 2
LOCAL_BATCH = 8
COLLECT_STATS_STEPS = 3
TOTAL_STEPS = 8
# After the statistics warm-up (steps 0-2) and the initialisation (step 3): a checkpoint taken
# during the warm-up would end the collection when loaded, as in Brevitas.
CHECKPOINT_STEP = 5
LR = 0.05
SEED = 0
# Where the children train: "cpu", or "cuda" (both ranks on GPU 0 with gloo, which reduces CUDA
# tensors: NCCL needs a GPU per rank). Set by run() in each child.
DEVICE = "cpu"


# ---- model, data, training (shared with the single-process reference) -------------------------


def build_model() -> nn.Module:
    """A small quantized CNN whose activation quantizers learn their scales after
    COLLECT_STATS_STEPS batches of StatsOp.AVE statistics: the mean of |x| averages exactly
    over equal shards, so DDP on 2 x LOCAL_BATCH equals one process on the whole batch."""
    from brevitas_cpp.inject.enum import StatsOp
    from brevitas_cpp.nn import QuantConv2d, QuantIdentity, QuantLinear, QuantReLU
    from brevitas_cpp.quant import Int8ActPerTensorFloat

    signed_act = Int8ActPerTensorFloat.let(
        collect_stats_steps=COLLECT_STATS_STEPS, scaling_stats_op=StatsOp.AVE
    )
    torch.manual_seed(SEED)
    return nn.Sequential(
        QuantIdentity(act_quant=signed_act),
        QuantConv2d(1, 4, 3),
        # The layer keyword form of the same setting.
        QuantReLU(collect_stats_steps=COLLECT_STATS_STEPS, scaling_stats_op=StatsOp.AVE),
        nn.Flatten(),
        QuantLinear(4 * 6 * 6, 3, bias=True),
    )


def build_auto_model() -> nn.Module:
    """build_model's CNN quantized automatically from its float twin (brevitas_cpp.graph: the
    layers replaced, with the same quantizer settings) and an activation quantizer inserted on
    the output of the functional flatten."""
    from brevitas_cpp.graph import Quantizer, QuantizerInsertion
    from brevitas_cpp.inject.enum import StatsOp
    from brevitas_cpp.quant import Int8ActPerTensorFloat

    stats = dict(collect_stats_steps=COLLECT_STATS_STEPS, scaling_stats_op=StatsOp.AVE)
    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    input_quant = {"input_quant": Int8ActPerTensorFloat}
    input_quant.update({f"input_{k}": v for k, v in stats.items()})
    Quantizer(model, overrides={"0": input_quant}, act_kwargs=stats).prepare_model()
    insertion = QuantizerInsertion(model, torch.zeros(1, 1, 8, 8))
    insertion.quantize_output("Sequential/Flatten[2]/flatten_0", **stats)
    insertion.apply()
    return model


def global_batch(step: int) -> Tuple[Tensor, Tensor]:
    """The batch of every rank for ``step``, rank r's shard being rows r*LOCAL_BATCH.."""
    gen = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(WORLD_SIZE * LOCAL_BATCH, 1, 8, 8, generator=gen)
    # Shards with different statistics, so that unsynchronised ranks would diverge.
    x[LOCAL_BATCH:] *= 3.0
    y = torch.randint(0, 3, (WORLD_SIZE * LOCAL_BATCH,), generator=gen)
    return x, y


def make_optimizer(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=LR, momentum=0.9)


def train_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    steps: range,
    batch: Callable[[int], Tuple[Tensor, Tensor]],
    device: str = "cpu",
) -> None:
    model.train()
    for step in steps:
        x, y = (t.to(device) for t in batch(step))
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def plain_state(module: nn.Module) -> Dict[str, Tensor]:
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


# ---- child processes --------------------------------------------------------------------------


def _start(rank: int, port: int, jit: str) -> None:
    os.environ["BREVITAS_JIT"] = jit
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    # Two ranks share the machine's cores.
    torch.set_num_threads(1)
    import brevitas_cpp  # noqa: F401  (after BREVITAS_JIT is set)

    dist.init_process_group(
        "gloo", rank=rank, world_size=WORLD_SIZE, timeout=datetime.timedelta(seconds=60)
    )


def run(
    rank: int, port: int, jit: str, out_dir: str, scenarios: Tuple[str, ...], device: str = "cpu"
) -> None:
    """Entry point of a child: the scenarios in turn (one process start for several), with any
    traceback written for the parent."""
    global DEVICE
    DEVICE = device
    try:
        _start(rank, port, jit)
        for scenario in scenarios:
            {
                "stats": _stats_scenario,
                "train": _train_scenario,
                "resume": _resume_scenario,
                "ops": _ops_scenario,
                "auto": _auto_scenario,
                "int8_ema": _int8_ema_scenario,
            }[scenario](rank, Path(out_dir))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        Path(out_dir, f"error_rank{rank}.txt").write_text(traceback.format_exc())
        raise
    # Every result is on disk and the group is destroyed: leave without interpreter
    # finalization, where gloo's threads can still release tensors and abort the process
    # ("terminate called without an active exception", once in a CI run here; a PyTorch
    # teardown race, pytorch/pytorch#179291). A crash before this point still fails the test.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _stats_quantizers() -> List[Tuple[str, nn.Module]]:
    """One layer per statistics-collecting block, each warming up for COLLECT_STATS_STEPS."""
    from brevitas_cpp.inject.enum import ScalingImplType
    from brevitas_cpp.nn import QuantIdentity, QuantReLU
    from brevitas_cpp.quant import (
        Int8ActPerTensorFloat,
        ShiftedUint8ActPerTensorFloat,
        Uint8ActPerTensorFloat,
    )

    steps = COLLECT_STATS_STEPS
    return [
        # ParameterFromRuntimeStatsScaling, percentile statistics (the default quantizer).
        (
            "percentile_param_scale",
            QuantReLU(act_quant=Uint8ActPerTensorFloat.let(collect_stats_steps=steps)),
        ),
        # ParameterFromRuntimeStatsScaling and ParameterFromRuntimeZeroPoint.
        (
            "shifted_param_zero_point",
            QuantIdentity(act_quant=ShiftedUint8ActPerTensorFloat.let(collect_stats_steps=steps)),
        ),
        # RuntimeStatsScaling (_RuntimeStats' running statistics).
        (
            "runtime_stats_scale",
            QuantIdentity(
                act_quant=Int8ActPerTensorFloat.let(scaling_impl_type=ScalingImplType.STATS)
            ),
        ),
    ]


def _stats_run() -> Dict[str, Dict[str, Tensor]]:
    """Each quantizer trained one step past its warm-up on this rank's own data."""
    rank = dist.get_rank()
    states = {}
    for name, layer in _stats_quantizers():
        layer.train()
        gen = torch.Generator().manual_seed(100 + rank)
        for _ in range(COLLECT_STATS_STEPS + 1):
            # Rank-dependent spread and offset: every statistic differs between the ranks.
            layer.to(DEVICE)(torch.randn(16, 32, generator=gen).to(DEVICE) * (1 + rank) + rank)
        states[name] = plain_state(layer)
    return states


def _stats_scenario(rank: int, out_dir: Path) -> None:
    from brevitas_cpp.distributed import stats_sync

    synced = _stats_run()
    with stats_sync(False):
        local = _stats_run()
    gathered: List = [None] * WORLD_SIZE
    dist.all_gather_object(gathered, {"synced": synced, "local": local})
    torch.save(gathered, out_dir / f"stats_rank{rank}.pt")


def _local_batch(rank: int) -> Callable[[int], Tuple[Tensor, Tensor]]:
    def batch(step: int) -> Tuple[Tensor, Tensor]:
        x, y = global_batch(step)
        rows = slice(rank * LOCAL_BATCH, (rank + 1) * LOCAL_BATCH)
        return x[rows], y[rows]

    return batch


def _ddp(model: nn.Module) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    # find_unused_parameters stays False: parameters waiting for their initialisation are
    # linked to the graph with a zero gradient.
    return DistributedDataParallel(model.to(DEVICE))


def _train_scenario(rank: int, out_dir: Path) -> None:
    ddp = _ddp(build_model())
    optimizer = make_optimizer(ddp.parameters())
    train_steps(ddp, optimizer, range(CHECKPOINT_STEP), _local_batch(rank), DEVICE)
    if rank == 0:
        torch.save(
            {"model": ddp.module.state_dict(), "optimizer": optimizer.state_dict()},
            out_dir / "checkpoint.pt",
        )
    train_steps(ddp, optimizer, range(CHECKPOINT_STEP, TOTAL_STEPS), _local_batch(rank), DEVICE)
    torch.save(plain_state(ddp.module), out_dir / f"train_rank{rank}.pt")


def _auto_scenario(rank: int, out_dir: Path) -> None:
    ddp = _ddp(build_auto_model())
    optimizer = make_optimizer(ddp.parameters())
    train_steps(ddp, optimizer, range(TOTAL_STEPS), _local_batch(rank), DEVICE)
    torch.save(plain_state(ddp.module), out_dir / f"auto_rank{rank}.pt")


def _resume_scenario(rank: int, out_dir: Path) -> None:
    # A fresh model loaded from the checkpoint (deepcopy is refused under BREVITAS_JIT=1).
    checkpoint = torch.load(out_dir / "checkpoint.pt", weights_only=True)
    model = build_model()
    model.load_state_dict(checkpoint["model"])
    ddp = _ddp(model)
    optimizer = make_optimizer(ddp.parameters())
    optimizer.load_state_dict(checkpoint["optimizer"])
    train_steps(ddp, optimizer, range(CHECKPOINT_STEP, TOTAL_STEPS), _local_batch(rank))
    torch.save(plain_state(ddp.module), out_dir / f"resume_rank{rank}.pt")


# ---- seed 003's EMA thresholds (test_ddp_int8_ema.py) ------------------------------------------

INT8_EMA_DECAY = 0.25
INT8_EMA_FEATURES = 16


def build_int8_ema_model() -> nn.Module:
    """An MLP quantized with seed 003's quantizers: max-abs weights per channel, EMA
    activation thresholds (the op takes the maximum over the ranks while training)."""
    from brevitas_cpp.nn import QuantIdentity, QuantLinear, QuantReLU
    from brevitas_cpp.quant import Int8ActPerTensorEma, Int8WeightPerChannelMaxAbs

    torch.manual_seed(SEED)
    return nn.Sequential(
        QuantIdentity(act_quant=Int8ActPerTensorEma, ema_decay=INT8_EMA_DECAY),
        QuantLinear(INT8_EMA_FEATURES, 8, weight_quant=Int8WeightPerChannelMaxAbs),
        QuantReLU(act_quant=Int8ActPerTensorEma, ema_decay=INT8_EMA_DECAY),
        QuantLinear(8, 3, weight_quant=Int8WeightPerChannelMaxAbs),
    )


def int8_ema_global_batch(step: int) -> Tuple[Tensor, Tensor]:
    """Rank r's shard is rows r*LOCAL_BATCH..; the shard with the larger values alternates
    between the ranks, so that neither rank's own maximum is the global one at every step."""
    gen = torch.Generator().manual_seed(2000 + step)
    x = torch.randn(WORLD_SIZE * LOCAL_BATCH, INT8_EMA_FEATURES, generator=gen)
    big = step % WORLD_SIZE
    x[big * LOCAL_BATCH : (big + 1) * LOCAL_BATCH] *= 3.0
    y = torch.randint(0, 3, (WORLD_SIZE * LOCAL_BATCH,), generator=gen)
    return x, y


def shard(
    rank: int, batch: Callable[[int], Tuple[Tensor, Tensor]]
) -> Callable[[int], Tuple[Tensor, Tensor]]:
    """Rank ``rank``'s rows of batch(step)."""

    def local(step: int) -> Tuple[Tensor, Tensor]:
        x, y = batch(step)
        rows = slice(rank * LOCAL_BATCH, (rank + 1) * LOCAL_BATCH)
        return x[rows], y[rows]

    return local


def _int8_ema_scenario(rank: int, out_dir: Path) -> None:
    from torch.nn.parallel import DistributedDataParallel

    # No buffer broadcast from rank 0: the replicas' thresholds must agree by themselves.
    ddp = DistributedDataParallel(build_int8_ema_model().to(DEVICE), broadcast_buffers=False)
    optimizer = make_optimizer(ddp.parameters())
    train_steps(ddp, optimizer, range(TOTAL_STEPS), shard(rank, int8_ema_global_batch), DEVICE)
    torch.save(plain_state(ddp.module), out_dir / f"int8_ema_rank{rank}.pt")


# ---- the statistics-average ops (test_stats_all_reduce.py) -------------------------------------


def _contribution(rank: int, dtype: torch.dtype) -> Tensor:
    """What rank ``rank`` averages: distinct on every rank, known to all of them."""
    return (
        (torch.arange(12, dtype=torch.float64).reshape(3, 4) - 5) * (rank + 1) + 0.25 * rank
    ).to(dtype)


def _weight(rank: int, dtype: torch.dtype) -> Tensor:
    """Rank ``rank``'s loss is sum(weight * mean)."""
    return (torch.linspace(-1, 1, 12, dtype=torch.float64).reshape(3, 4) * (2 - rank) + rank).to(
        dtype
    )


def _check_forward_backward(rank: int, dtype: torch.dtype, transposed: bool) -> None:
    """all_reduce_stats(x_r) is mean_r(x_r) on every rank, and the gradient of
    sum(w_r * mean) reaching x_r is mean_r(w_r) (each rank's mean depends on every x_r / R)."""
    from brevitas_cpp.distributed import all_reduce_stats

    x = _contribution(rank, dtype)
    if transposed:  # same values, non-contiguous
        x = x.t().contiguous().t()
        assert not x.is_contiguous()
    x.requires_grad_()
    y = all_reduce_stats(x)
    # Two addends: the sum is exact whatever gloo's order, so the reference matches bit for bit.
    mean = (_contribution(0, dtype) + _contribution(1, dtype)) / WORLD_SIZE
    assert torch.equal(y, mean), (rank, dtype, y, mean)
    (_weight(rank, dtype) * y).sum().backward()
    expected_grad = (_weight(0, dtype) + _weight(1, dtype)) / WORLD_SIZE
    assert torch.equal(x.grad, expected_grad), (rank, dtype, x.grad, expected_grad)


def _ops_scenario(rank: int, out_dir: Path) -> None:
    import io

    from brevitas_cpp import distributed as bd

    ops = torch.ops.brevitas_cpp
    facts: Dict[str, object] = {"world_group_name": dist.group.WORLD.group_name}
    for dtype in (torch.float64, torch.float32):
        for transposed in (False, True):
            _check_forward_backward(rank, dtype, transposed)

    # Explicit groups: every rank creates every group (torch.distributed requires it).
    both = dist.new_group([0, 1])
    singles = [dist.new_group([r]) for r in range(WORLD_SIZE)]
    own = singles[rank]
    facts["explicit_group_names"] = [both.group_name, own.group_name]
    bd.set_stats_process_group(both)
    assert ops._get_stats_sync() == (True, both.group_name)
    _check_forward_backward(rank, torch.float64, transposed=False)
    # This rank alone: a copy, not the average over the world.
    bd.set_stats_process_group(own)
    x = _contribution(rank, torch.float64)
    assert torch.equal(bd.all_reduce_stats(x), x)
    # The collective itself over a one-rank group: the sum of one tensor, divided by 1.
    assert torch.equal(ops._all_reduce_mean(x, own.group_name), x)
    bd.set_stats_process_group(None)

    # stats_sync(False) issues no collective: only rank 0 calls, and the next average still
    # pairs up (had rank 0 entered an all-reduce, it would take rank 1's next one: wrong values
    # or a hang).
    if rank == 0:
        with bd.stats_sync(False):
            for _ in range(3):
                assert torch.equal(bd.all_reduce_stats(x), x)
    _check_forward_backward(rank, torch.float64, transposed=False)

    # A module scripted, saved and loaded runs the collective from the loaded code.
    class Average(torch.nn.Module):
        def forward(self, t: Tensor) -> Tensor:
            return bd.all_reduce_stats(t) * 2.0

    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(Average()), buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    mean = (_contribution(0, torch.float64) + _contribution(1, torch.float64)) / WORLD_SIZE
    assert torch.equal(loaded(_contribution(rank, torch.float64)), mean * 2.0)
    torch.save(facts, out_dir / f"ops_rank{rank}.pt")
