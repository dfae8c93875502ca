"""brevitas_cpp.distributed in one process: without an initialised process group the
statistics are passed through untouched (the very tensor, so single-process numbers cannot
change), and the switches check their arguments."""

import pytest
import torch
import torch.distributed as dist

from brevitas_cpp import distributed
from brevitas_cpp.core.function_wrapper import OverTensorView
from brevitas_cpp.core.stats import _RuntimeStats
from brevitas_cpp.core.stats.stats_op import AbsMax


def test_no_process_group_is_a_passthrough():
    assert not dist.is_initialized()
    stats = torch.rand(3, requires_grad=True)
    assert distributed.all_reduce_stats(stats) is stats


def test_stats_sync_switches_and_restores():
    assert distributed.stats_sync_enabled()
    with distributed.stats_sync(False):
        assert not distributed.stats_sync_enabled()
        with distributed.stats_sync(True):
            assert distributed.stats_sync_enabled()
        assert not distributed.stats_sync_enabled()
    assert distributed.stats_sync_enabled()


def test_stats_sync_restores_after_an_error():
    with pytest.raises(KeyError):
        with distributed.stats_sync(False):
            raise KeyError("boom")
    assert distributed.stats_sync_enabled()


@pytest.mark.parametrize("bad", [0, 1, None, "no"])
def test_stats_sync_rejects_non_bool(bad):
    with pytest.raises(TypeError, match="stats_sync: enabled must be a bool"):
        with distributed.stats_sync(bad):
            pass


def test_set_stats_process_group_rejects_non_group():
    with pytest.raises(TypeError, match="group must be a torch.distributed.ProcessGroup or None"):
        distributed.set_stats_process_group("world")
    distributed.set_stats_process_group(None)  # the default, accepted


def test_runtime_stats_unchanged_in_one_process():
    # The hook sits in the training path of the (possibly scripted) block: same numbers as the
    # running average computed here by hand.
    block = _RuntimeStats(AbsMax(), (), OverTensorView(), 0.1, None, None)
    block.train()
    x0, x1 = torch.randn(4, 5), torch.randn(4, 5)
    assert torch.equal(block(x0), x0.abs().max())
    assert torch.equal(block(x1), x1.abs().max())
    expected = x0.abs().max() * (1 - 0.1) + 0.1 * x1.abs().max()
    assert torch.equal(block.running_stats, expected)
