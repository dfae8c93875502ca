"""examples/ddp_qat.py --resume on 2 gloo ranks: two epochs straight and one epoch then a resumed
one end in the same checkpoint, bit for bit. The resumed run builds its optimizer before loading,
as the example does: a load that replaced the scale Parameters would leave the optimizer stepping
the old ones, and the learned scales would no longer move.

The ranks are started as torchrun starts them (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT), without its elastic agent, in a process group of their own that is killed on a
time-out, so that no rank outlives the test. The example frees DDP before destroying the process
group: freed the other way round, a gloo group hung at exit in about one run in three here."""

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp_qat.py"
WORLD_SIZE = 2
TIMEOUT_S = 120  # each run takes about 6 s


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(*args: str) -> None:
    port = str(_free_port())
    ranks = []
    for rank in range(WORLD_SIZE):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(WORLD_SIZE),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "OMP_NUM_THREADS": "1",
        }
        command = [sys.executable, "-P", str(EXAMPLE), *args]
        ranks.append(
            subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    outputs = []
    try:
        for process in ranks:
            outputs.append(process.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for process in ranks:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    for rank, (process, output) in enumerate(zip(ranks, outputs)):
        assert process.returncode == 0, f"rank {rank} ({' '.join(args)}):\n{output[-4000:]}"


def test_resume_continues_as_straight_training(tmp_path):
    straight, resumed = tmp_path / "straight.pt", tmp_path / "resumed.pt"
    _run_ranks("--epochs", "2", "--checkpoint", str(straight))
    _run_ranks("--epochs", "1", "--checkpoint", str(resumed))
    first_epoch = torch.load(resumed, weights_only=True)["model"]
    _run_ranks("--epochs", "1", "--checkpoint", str(resumed), "--resume")
    want = torch.load(straight, weights_only=True)
    got = torch.load(resumed, weights_only=True)
    assert got["epoch"] == want["epoch"] == 1
    assert list(got["model"]) == list(want["model"])
    for key, value in want["model"].items():
        assert torch.equal(got["model"][key], value), key
    # The learned scales moved in the resumed epoch (they are what a stale optimizer freezes).
    scales = [key for key in want["model"] if key.endswith("scaling_impl.value")]
    assert scales and all(not torch.equal(first_epoch[k], got["model"][k]) for k in scales)
