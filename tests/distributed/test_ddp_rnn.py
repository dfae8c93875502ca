"""QuantRNN and QuantLSTM under DistributedDataParallel: two gloo ranks on CPU, each training a
sequence classifier on its own shard of every batch (the shards have different statistics),
with BREVITAS_JIT=0 (the time loop in Python) and =1 (the time loop scripted, calling the
statistics average from TorchScript) in the children.

Every activation quantizer of the layers (input/output, gate accumulators, sigmoids, tanhs,
cell state) collects StatsOp.AVE statistics for COLLECT_STATS_STEPS calls, call by call inside
the time loop, averaged over the ranks (brevitas_cpp.distributed), then learns its scale. DDP
runs without its buffer broadcast, so the replicas must agree by themselves:

(a) after every step both ranks hold identical parameters, buffers and warm-up counters;
(b) every step's state equals that of one process trained on the concatenated batch, the loss
    being the mean over it as DDP's averaged gradients make it (up to float32 summation order);
(c) with the statistics left local (stats_sync(False)) the replicas' quantizer states differ,
    so (a) and (b) do not hold by accident."""

import importlib
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

# The children import this file by its plain module name (spawn passes them this sys.path),
# whatever name pytest's import mode gave it here, and before they set BREVITAS_JIT, which
# brevitas_cpp reads once, at import: nothing from brevitas_cpp is imported at module level.
sys.path.insert(0, str(Path(__file__).parent))
import _ddp_worker as worker  # noqa: E402
from _launch import JOIN_TIMEOUT_S, free_port  # noqa: E402

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with the gloo backend is not available in this torch build",
)

WORLD_SIZE = worker.WORLD_SIZE
LOCAL_BATCH = 4
SEQ_LEN = 5
INPUT_SIZE = 3
HIDDEN_SIZE = 6
CLASSES = 3
# Counted per call: a shared quantizer (io_quant, the LSTM's cell state) is called many times
# per forward and ends its warm-up in the first steps; a gate's own quantizers (SEQ_LEN calls
# per forward) in the third step.
COLLECT_STATS_STEPS = 12
TOTAL_STEPS = 6
LR = 0.05
SEED = 0
KINDS = ("lstm", "rnn")


# ---- model, data, training (shared with the single-process reference) -------------------------


class _Classifier(nn.Module):
    """The recurrent stack's output at the last time step through a float linear head."""

    def __init__(self, rnn: nn.Module, features: int) -> None:
        super().__init__()
        self.rnn = rnn
        self.head = nn.Linear(features, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        out = self.rnn(x)[0]
        last = out[:, -1] if self.rnn.batch_first else out[-1]
        return self.head(last)


def build_model(kind: str) -> nn.Module:
    """A 2-layer bidirectional batch-first QuantLSTM, or a 2-layer sequence-first QuantRNN,
    every activation quantizer on StatsOp.AVE statistics (the mean of |x| averages exactly over
    equal shards, so DDP on 2 x LOCAL_BATCH can equal one process on the whole batch)."""
    from brevitas_cpp.inject.enum import StatsOp
    from brevitas_cpp.nn import QuantLSTM, QuantRNN
    from brevitas_cpp.quant import Int8ActPerTensorFloat, Uint8ActPerTensorFloat

    stats = dict(collect_stats_steps=COLLECT_STATS_STEPS, scaling_stats_op=StatsOp.AVE)
    signed, unsigned = Int8ActPerTensorFloat.let(**stats), Uint8ActPerTensorFloat.let(**stats)
    torch.manual_seed(SEED)
    if kind == "lstm":
        rnn: nn.Module = QuantLSTM(
            INPUT_SIZE,
            HIDDEN_SIZE,
            num_layers=2,
            bidirectional=True,
            batch_first=True,
            io_quant=signed,
            gate_acc_quant=signed,
            sigmoid_quant=unsigned,
            tanh_quant=signed,
            cell_state_quant=signed,
        )
        return _Classifier(rnn, 2 * HIDDEN_SIZE)
    rnn = QuantRNN(INPUT_SIZE, HIDDEN_SIZE, num_layers=2, io_quant=signed, gate_acc_quant=signed)
    return _Classifier(rnn, HIDDEN_SIZE)


def batch_dim(kind: str) -> int:
    return 0 if kind == "lstm" else 1  # batch_first for the LSTM only


def global_batch(kind: str, step: int) -> Tuple[Tensor, Tensor]:
    """The batch of every rank for ``step`` in the model's layout, rank r's shard being
    LOCAL_BATCH sequences from r * LOCAL_BATCH along the batch dimension."""
    gen = torch.Generator().manual_seed(3000 + step)
    x = torch.randn(WORLD_SIZE * LOCAL_BATCH, SEQ_LEN, INPUT_SIZE, generator=gen)
    # Shards with different statistics, so that unsynchronised ranks would diverge.
    x[LOCAL_BATCH:] = x[LOCAL_BATCH:] * 3.0 + 0.5
    y = torch.randint(0, CLASSES, (WORLD_SIZE * LOCAL_BATCH,), generator=gen)
    return x.movedim(0, batch_dim(kind)).contiguous(), y


def local_batch(kind: str, rank: int) -> Callable[[int], Tuple[Tensor, Tensor]]:
    def batch(step: int) -> Tuple[Tensor, Tensor]:
        x, y = global_batch(kind, step)
        start = rank * LOCAL_BATCH
        return x.narrow(batch_dim(kind), start, LOCAL_BATCH), y[start : start + LOCAL_BATCH]

    return batch


def snapshot(module: nn.Module) -> Dict[str, Tensor]:
    """state_dict (parameters, and learned scales or, during the warm-up, the running
    statistic), every buffer, and the warm-up counters (plain ints on the blocks)."""
    state = worker.plain_state(module)
    state.update({f"buffer:{k}": v.detach().clone() for k, v in module.named_buffers()})
    for name, block in module.named_modules():
        if hasattr(block, "collect_stats_steps") and hasattr(block, "counter"):
            state[f"counter:{name}"] = torch.tensor(int(block.counter))
    return state


def train(
    model: nn.Module, state_of: nn.Module, batch: Callable[[int], Tuple[Tensor, Tensor]]
) -> List[Dict[str, Tensor]]:
    """TOTAL_STEPS SGD steps on cross entropy averaged over the batch; state_of's snapshot
    after each step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    model.train()
    states = []
    for step in range(TOTAL_STEPS):
        x, y = batch(step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        states.append(snapshot(state_of))
    return states


# ---- child processes --------------------------------------------------------------------------


def run(rank: int, port: int, jit: str, out_dir: str) -> None:
    """Entry point of a child: both kinds, statistics synced then local; any traceback is
    written for the parent."""
    try:
        worker._start(rank, port, jit)  # BREVITAS_JIT set before brevitas_cpp is imported
        from torch.nn.parallel import DistributedDataParallel

        import brevitas_cpp
        from brevitas_cpp.distributed import stats_sync

        # The parent checks that its children ran the brevitas_cpp it tests.
        results: Dict[object, object] = {"brevitas_cpp": brevitas_cpp.__file__}
        for kind in KINDS:
            for synced in (True, False):
                model = build_model(kind)
                # No buffer broadcast from rank 0: the running statistics must agree by
                # themselves. find_unused_parameters stays False (learned scales waiting for
                # their initialisation are linked to the graph with a zero gradient).
                ddp = DistributedDataParallel(model, broadcast_buffers=False)
                with stats_sync(synced):
                    results[kind, synced] = train(ddp, model, local_batch(kind, rank))
        torch.save(results, Path(out_dir) / f"rnn_rank{rank}.pt")
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        Path(out_dir, f"error_rank{rank}.txt").write_text(traceback.format_exc())
        raise


def _spawn(out_dir: Path, jit: str) -> None:
    """As _launch.spawn, with this file's run as the children's entry point."""
    child = importlib.import_module(Path(__file__).stem)
    ctx = torch.multiprocessing.get_context("spawn")
    port = free_port()
    procs = [
        ctx.Process(target=child.run, args=(rank, port, jit, str(out_dir)))
        for rank in range(WORLD_SIZE)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [p for p in procs if p.is_alive()]
    for p in hung:
        p.kill()
        p.join()
    errors = "\n".join(f.read_text() for f in sorted(out_dir.glob("error_rank*.txt")))
    assert not hung, f"ranks still running after {JOIN_TIMEOUT_S} s\n{errors}"
    assert all(p.exitcode == 0 for p in procs), (
        f"exit codes {[p.exitcode for p in procs]}\n{errors}"
    )


# ---- parent side ------------------------------------------------------------------------------

States = Dict[Tuple[str, bool], List[Dict[str, Tensor]]]


@pytest.fixture(scope="module", params=["0", "1"], ids=["child_jit0", "child_jit1"])
def ranks(request, tmp_path_factory) -> Dict[int, States]:
    out_dir = tmp_path_factory.mktemp(f"ddp_rnn_jit{request.param}")
    _spawn(out_dir, request.param)
    import brevitas_cpp

    results = {
        rank: torch.load(out_dir / f"rnn_rank{rank}.pt", weights_only=True)
        for rank in range(WORLD_SIZE)
    }
    for rank_results in results.values():
        assert rank_results.pop("brevitas_cpp") == brevitas_cpp.__file__
    return results


_REFERENCES: Dict[str, List[Dict[str, Tensor]]] = {}


def _reference(kind: str) -> List[Dict[str, Tensor]]:
    """One process, the whole batch, every step (in this process's BREVITAS_JIT mode)."""
    if kind not in _REFERENCES:
        model = build_model(kind)
        _REFERENCES[kind] = train(model, model, lambda step: global_batch(kind, step))
    return _REFERENCES[kind]


def _quantizer_keys(state: Dict[str, Tensor]) -> List[str]:
    """The activation quantizers' state: learned scales (or, during the warm-up, the running
    statistic they will start from) and the running statistics."""
    return [k for k in state if k.endswith("scaling_impl.value") or k.endswith(".buffer")]


@pytest.mark.parametrize("kind", KINDS)
def test_replicas_identical_after_every_step(ranks, kind):
    states0, states1 = ranks[0][kind, True], ranks[1][kind, True]
    assert len(states0) == len(states1) == TOTAL_STEPS
    for step, (s0, s1) in enumerate(zip(states0, states1)):
        assert s0.keys() == s1.keys()
        for key in s0:
            assert torch.equal(s0[key], s1[key]), f"step {step}, {key}: rank 0 vs rank 1"
    # Every activation quantizer ended its warm-up and learns its scale.
    final = states0[-1]
    counters = {k: int(v) for k, v in final.items() if k.startswith("counter:")}
    assert counters and all(c == COLLECT_STATS_STEPS + 1 for c in counters.values()), counters


@pytest.mark.parametrize("kind", KINDS)
def test_ddp_matches_single_process_on_global_batch(ranks, kind):
    reference = _reference(kind)
    assert len(_quantizer_keys(reference[-1])) > 0
    for step, (ddp_state, ref_state) in enumerate(zip(ranks[0][kind, True], reference)):
        assert ddp_state.keys() == ref_state.keys(), step
        for key in ref_state:
            torch.testing.assert_close(
                ddp_state[key],
                ref_state[key],
                # Measured: at most 1.2e-7 apart (float32 summation order of the gradients
                # and statistics over 2 x 4 sequences vs 8), exact for most entries.
                rtol=1e-6,
                atol=1e-6,
                msg=lambda m: f"DDP vs single process, step {step}, {key}: {m}",
            )
    # The recurrent layers did train: the comparison is not between two initial states.
    initial = snapshot(build_model(kind))
    gates = [k for k in initial if k.startswith("rnn.") and "gate_params" in k]
    assert max((reference[-1][k] - initial[k]).abs().max().item() for k in gates) > 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_local_statistics_make_the_replicas_diverge(ranks, kind):
    """The control: without the average, each rank's quantizers see only their own shard."""
    s0, s1 = ranks[0][kind, False][-1], ranks[1][kind, False][-1]
    keys = _quantizer_keys(s0)
    assert keys
    assert [k for k in keys if torch.equal(s0[k], s1[k])] == []
