"""examples/ddp_qat.py --resume under torchrun (2 gloo ranks): two epochs straight and one epoch
then a resumed one end in the same checkpoint, bit for bit. The resumed run builds its optimizer
before loading, as the example does: a load that replaced the scale Parameters would leave the
optimizer stepping the old ones, and the learned scales would no longer move."""

import subprocess
import sys
from pathlib import Path

import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp_qat.py"


def _torchrun(*args: str) -> None:
    command = [sys.executable, "-P", "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc_per_node=2", str(EXAMPLE), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def test_resume_continues_as_straight_training(tmp_path):
    straight, resumed = tmp_path / "straight.pt", tmp_path / "resumed.pt"
    _torchrun("--epochs", "2", "--checkpoint", str(straight))
    _torchrun("--epochs", "1", "--checkpoint", str(resumed))
    first_epoch = torch.load(resumed, weights_only=True)["model"]
    _torchrun("--epochs", "1", "--checkpoint", str(resumed), "--resume")
    want = torch.load(straight, weights_only=True)
    got = torch.load(resumed, weights_only=True)
    assert got["epoch"] == want["epoch"] == 1
    assert list(got["model"]) == list(want["model"])
    for key, value in want["model"].items():
        assert torch.equal(got["model"][key], value), key
    # The learned scales moved in the resumed epoch (they are what a stale optimizer freezes).
    scales = [key for key in want["model"] if key.endswith("scaling_impl.value")]
    assert scales and all(not torch.equal(first_epoch[k], got["model"][k]) for k in scales)
