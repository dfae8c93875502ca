"""Parent side of the multi-process tests: runs scenarios of _ddp_worker on WORLD_SIZE fresh
gloo processes and fails with a child's traceback (or a hang) as the message."""

import socket
import time
from pathlib import Path
from typing import Tuple

import _ddp_worker as worker
import torch.multiprocessing as mp

JOIN_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(out_dir: Path, scenarios: Tuple[str, ...], jit: str, device: str = "cpu") -> None:
    """Run the scenarios on worker.WORLD_SIZE fresh processes; fail with a child's traceback."""
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [
        ctx.Process(target=worker.run, args=(rank, port, jit, str(out_dir), scenarios, device))
        for rank in range(worker.WORLD_SIZE)
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
    assert not hung, (
        f"ranks still running after {JOIN_TIMEOUT_S} s (a collective mismatch?)\n{errors}"
    )
    assert all(p.exitcode == 0 for p in procs), (
        f"exit codes {[p.exitcode for p in procs]}\n{errors}"
    )
