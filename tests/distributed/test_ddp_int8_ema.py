"""Seed 003's EMA thresholds under torch.distributed: two gloo ranks on CPU (BREVITAS_JIT=1 in
the children), each training a DistributedDataParallel MLP on its own shard, without DDP's
buffer broadcast. The op takes the maximum of max|x| over the ranks, so the replicas end with
identical thresholds, equal to the EMA of the global maxima written out below, and to one
process trained on the whole batch."""

import sys
from pathlib import Path
from typing import Dict

import pytest
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))
import _ddp_worker as worker  # noqa: E402
from _launch import spawn  # noqa: E402

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with the gloo backend is not available in this torch build",
)

INPUT_KEY = "0.act_quant.fused_activation_quant_proxy.tensor_quant."


@pytest.fixture(scope="module")
def states(tmp_path_factory) -> Dict[int, Dict[str, torch.Tensor]]:
    out_dir = tmp_path_factory.mktemp("ddp_int8_ema")
    spawn(out_dir, ("int8_ema",), "1")
    return {
        rank: torch.load(out_dir / f"int8_ema_rank{rank}.pt", weights_only=True)
        for rank in range(worker.WORLD_SIZE)
    }


def test_replicas_end_with_identical_thresholds(states):
    assert states[0].keys() == states[1].keys()
    thresholds = [k for k in states[0] if k.endswith("threshold")]
    assert len(thresholds) == 4
    for key in states[0]:
        assert torch.equal(states[0][key], states[1][key]), key


def test_input_threshold_is_the_ema_of_the_maximum_over_ranks(states):
    decay = worker.INT8_EMA_DECAY
    synced = None
    alone = [None] * worker.WORLD_SIZE
    for step in range(worker.TOTAL_STEPS):
        local = [
            worker.shard(rank, worker.int8_ema_global_batch)(step)[0].abs().max()
            for rank in range(worker.WORLD_SIZE)
        ]
        current = torch.maximum(local[0], local[1])
        # t = max|x| of the first batch, then t * (1 - d) + max|x| * d, in float32.
        synced = current if synced is None else synced * (1 - decay) + current * decay
        for rank in range(worker.WORLD_SIZE):
            prev = alone[rank]
            alone[rank] = local[rank] if prev is None else prev * (1 - decay) + local[rank] * decay
    assert torch.equal(states[0][INPUT_KEY + "threshold"], synced)
    assert states[0][INPUT_KEY + "iteration"].item() == worker.TOTAL_STEPS
    # Each rank alone would have tracked something else.
    assert not torch.equal(alone[0], synced) and not torch.equal(alone[1], synced)


def test_ddp_equals_one_process_on_the_global_batch(states):
    model = worker.build_int8_ema_model()
    optimizer = worker.make_optimizer(model.parameters())
    worker.train_steps(model, optimizer, range(worker.TOTAL_STEPS), worker.int8_ema_global_batch)
    reference = worker.plain_state(model)
    assert reference.keys() == states[0].keys()
    # The first step's thresholds are exact maxima; later ones see parameters that DDP's
    # averaged gradients moved within float rounding of one process's.
    assert torch.equal(states[0][INPUT_KEY + "threshold"], reference[INPUT_KEY + "threshold"])
    for key in reference:
        torch.testing.assert_close(states[0][key], reference[key], rtol=0.0, atol=1e-5)
