"""The statistics-average ops under torch.distributed: two gloo ranks on CPU.

The children (tests/distributed/_ddp_worker.py, scenario "ops") assert, against references
written from each rank's known contribution: forward (the mean over ranks) and backward (the
mean of the ranks' incoming gradients) for contiguous and non-contiguous float32/float64 input;
an explicit group set with set_stats_process_group (a two-rank group averages, a one-rank group
copies); stats_sync(False) issues no collective; a scripted module saved and loaded runs the
collective. Here: the spawn succeeds, and torch still names the default group "0" (what the
op's auto mode resolves)."""

import sys
from pathlib import Path

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


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("ops")
    # The op does not depend on BREVITAS_JIT; the default mode starts faster.
    spawn(out_dir, ("ops",), jit="0")
    return [
        torch.load(out_dir / f"ops_rank{r}.pt", weights_only=True) for r in range(worker.WORLD_SIZE)
    ]


def test_forward_backward_groups_and_switches_on_every_rank(facts):
    # Reaching here means every rank's assertions held (a failure carries its traceback).
    assert len(facts) == worker.WORLD_SIZE
    # The ranks agree on the explicit two-rank group, which is not the default group.
    names = [f["explicit_group_names"][0] for f in facts]
    assert names[0] == names[1] != "0"


def test_default_group_is_named_0(facts):
    """stats_all_reduce_mean's auto mode resolves the name "0" (torch's name for the default
    group, distributed_c10d._process_group_name): a torch that renamed it must fail here."""
    assert [f["world_group_name"] for f in facts] == ["0"] * worker.WORLD_SIZE
