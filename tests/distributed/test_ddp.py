"""Runtime statistics under torch.distributed: two gloo ranks on CPU, spawned with
BREVITAS_JIT=1 (TorchScript blocks call the collective op brevitas_cpp::stats_all_reduce_mean).

(a) quantizers fed different data on each rank end their warm-up with identical state, equal
to the average of what each rank would have collected alone; (b) a quantized CNN in
DistributedDataParallel (find_unused_parameters=False) trains through the warm-up to the
parameters of one process on the whole batch; (c) a checkpoint taken by rank 0 and resumed in
fresh processes continues to the parameters of the uninterrupted run."""

import sys
from pathlib import Path
from typing import Dict

import pytest
import torch
import torch.distributed as dist

# The children import the worker by module name; spawn passes them this sys.path.
sys.path.insert(0, str(Path(__file__).parent))
import _ddp_worker as worker  # noqa: E402
from _launch import spawn  # noqa: E402

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with the gloo backend is not available in this torch build",
)

# The blocks are TorchScript modules in the children: the collective runs from compiled code.
CHILD_JIT = "1"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """One spawn for (a) and the uninterrupted training, one for the resumed training."""
    out_dir = tmp_path_factory.mktemp("ddp")
    spawn(out_dir, ("stats", "train", "auto"), CHILD_JIT)
    spawn(out_dir, ("resume",), CHILD_JIT)
    return out_dir


def _load(out_dir: Path, name: str, rank: int):
    return torch.load(out_dir / f"{name}_rank{rank}.pt", weights_only=True)


def _assert_states_equal(
    a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor], what: str, atol: float = 0.0
) -> None:
    assert a.keys() == b.keys(), what
    for key in a:
        torch.testing.assert_close(
            a[key], b[key], rtol=0.0, atol=atol, msg=lambda m: f"{what}, {key}: {m}"
        )


def test_scales_equal_across_ranks_after_warmup(runs):
    gathered = _load(runs, "stats", 0)
    synced = [g["synced"] for g in gathered]
    local = [g["local"] for g in gathered]
    for name in synced[0]:
        # Every rank holds the same learned scale / zero point / running statistic, bit for bit.
        _assert_states_equal(synced[0][name], synced[1][name], f"{name}: rank 0 vs rank 1")
        for key in synced[0][name]:
            # The ranks' data differ, so each would have collected something else alone ...
            assert not torch.equal(local[0][name][key], local[1][name][key]), (name, key)
            # ... and the shared state is their average: the statistics are averaged batch by
            # batch and the running average (first batch, then momentum) is linear.
            expected = (local[0][name][key] + local[1][name][key]) / 2
            torch.testing.assert_close(
                synced[0][name][key],
                expected,
                rtol=1e-6,
                atol=0.0,
                msg=lambda m: f"{name}, {key}: {m}",
            )


def _reference() -> Dict[str, torch.Tensor]:
    """One process, the whole batch, every step (in this process's BREVITAS_JIT mode)."""
    model = worker.build_model()
    optimizer = worker.make_optimizer(model.parameters())
    worker.train_steps(model, optimizer, range(worker.TOTAL_STEPS), worker.global_batch)
    return worker.plain_state(model)


def test_ddp_training_matches_single_process_on_global_batch(runs):
    rank0, rank1 = _load(runs, "train", 0), _load(runs, "train", 1)
    _assert_states_equal(rank0, rank1, "DDP replicas")
    reference = _reference()
    # Learned activation scales are among the parameters compared.
    assert sum("value" in key for key in reference) == 2, list(reference)
    _assert_states_equal(rank0, reference, "DDP vs single process", atol=1e-5)
    # The model did train: the comparison is not between two initial states.
    initial = worker.plain_state(worker.build_model())
    assert not torch.allclose(initial["1.weight"], reference["1.weight"], atol=1e-3)


def test_resume_from_checkpoint_matches_uninterrupted(runs):
    uninterrupted = _load(runs, "train", 0)
    for rank in range(worker.WORLD_SIZE):
        _assert_states_equal(
            _load(runs, "resume", rank), uninterrupted, f"resumed rank {rank} vs uninterrupted"
        )


def test_auto_quantized_model_trains_under_ddp_as_in_one_process(runs):
    """brevitas_cpp.graph's replaced layers and inserted quantizer under DDP: replicas equal,
    and equal to one process on the global batch (statistics averaged over the ranks)."""
    rank0, rank1 = _load(runs, "auto", 0), _load(runs, "auto", 1)
    _assert_states_equal(rank0, rank1, "DDP replicas (auto-quantized)")
    model = worker.build_auto_model()
    worker.train_steps(
        model,
        worker.make_optimizer(model.parameters()),
        range(worker.TOTAL_STEPS),
        worker.global_batch,
    )
    reference = worker.plain_state(model)
    assert any(k.startswith("inserted_quantizers.") for k in reference)
    _assert_states_equal(rank0, reference, "DDP vs single process (auto-quantized)", atol=1e-5)
