"""DistributedDataParallel with CUDA tensors (skipped without a GPU): two gloo ranks sharing
GPU 0 (NCCL would need a GPU per rank; examples/ddp_qat.py runs NCCL under torchrun). The
statistics sync averages CUDA statistics across ranks, and DDP training through the warm-up
ends at the parameters of one process on the whole batch on the same GPU."""

import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import brevitas_cpp

sys.path.insert(0, str(Path(__file__).parent))
import _ddp_worker as worker  # noqa: E402
from _launch import spawn  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (
        torch.cuda.is_available()
        and brevitas_cpp.build_info()["cuda"]
        and dist.is_available()
        and dist.is_gloo_available()
    ),
    reason="needs a GPU, a CUDA build of brevitas_cpp and torch.distributed with gloo",
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out_dir = tmp_path_factory.mktemp("ddp_cuda")
    spawn(out_dir, ("stats", "train"), "1", device="cuda")
    return out_dir


def _load(out_dir: Path, name: str, rank: int):
    return torch.load(out_dir / f"{name}_rank{rank}.pt", weights_only=True)


def test_statistics_are_averaged_across_ranks_on_the_gpu(runs):
    gathered = _load(runs, "stats", 0)
    for name in gathered[0]["synced"]:
        for key, value in gathered[0]["synced"][name].items():
            assert torch.equal(value, gathered[1]["synced"][name][key]), (name, key)
            local0, local1 = gathered[0]["local"][name][key], gathered[1]["local"][name][key]
            assert not torch.equal(local0, local1), (name, key)
            torch.testing.assert_close(value, (local0 + local1) / 2, rtol=1e-5, atol=0.0)


def test_ddp_on_the_gpu_matches_single_process(runs):
    rank0, rank1 = _load(runs, "train", 0), _load(runs, "train", 1)
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key
    model = worker.build_model().cuda()
    optimizer = worker.make_optimizer(model.parameters())
    worker.train_steps(model, optimizer, range(worker.TOTAL_STEPS), worker.global_batch, "cuda")
    reference = worker.plain_state(model)
    assert sum("value" in key for key in reference) == 2, list(reference)
    for key in reference:
        torch.testing.assert_close(rank0[key], reference[key], rtol=0.0, atol=1e-5, msg=key)
