"""Resuming from a checkpoint trains on exactly as training straight through (issue: a resume
that silently stopped the learned scales). Each case trains STEPS steps in one fresh process,
saving model and optimizer at steps in and after the statistics phase; a second fresh process
loads each checkpoint into new objects, with the optimizer built before the load (the usual
recipe) and after it, and trains the remaining steps. Losses and the final state_dict (its
metadata too) must equal the straight run's bit for bit. Both TorchScript modes are run here,
in their own processes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# The worker is a script beside this file; its constants are read from here too.
sys.path.insert(0, str(Path(__file__).parent))
import _resume_worker as worker  # noqa: E402

WORKER = Path(worker.__file__)


def _run(mode: str, model: str, out: Path, jit: str) -> None:
    env = {**os.environ, "BREVITAS_JIT": jit}
    done = subprocess.run(
        [sys.executable, "-P", str(WORKER), mode, model, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{mode} {model} BREVITAS_JIT={jit}:\n{done.stderr[-4000:]}"


def _assert_same_state(resumed, straight, what: str) -> None:
    assert list(resumed) == list(straight), what
    for key in straight:
        assert torch.equal(resumed[key], straight[key]), f"{what}: {key}"
    assert repr(resumed._metadata) == repr(straight._metadata), what


@pytest.mark.parametrize("jit", ["0", "1"])
@pytest.mark.parametrize("model", sorted(worker.MODELS))
def test_resume_is_bit_exact(tmp_path, model, jit):
    _run("straight", model, tmp_path, jit)
    _run("resume", model, tmp_path, jit)
    straight = torch.load(tmp_path / "straight.pt", weights_only=True)
    for done, order in worker.RESUMES:
        resumed = torch.load(tmp_path / f"resumed_{done}_{order}.pt", weights_only=True)
        what = f"{model}, BREVITAS_JIT={jit}, resumed after {done} steps, {order}"
        assert torch.equal(resumed["losses"], straight["losses"][done:]), what
        _assert_same_state(resumed["model"], straight["model"], what)
