"""Every op's bad input raises a RuntimeError naming the op and the argument, in a fresh
interpreter that has imported what the test suite imports (both orders), so that a crash while
building an error message is a failed test naming the case, not a dead test run. Under torch 2.11
with g++ 13 such a crash was seen (SIGSEGV formatting a shape into a TORCH_CHECK message); the
library now exports only its own symbols (csrc/exports.map, pinned by tests/test_build.py)."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input_cases import cases

RUNNER = Path(__file__).resolve().parent / "_run_bad_inputs.py"


@pytest.mark.parametrize("order", ["suite-first", "library-first"])
def test_bad_inputs_raise_in_a_fresh_interpreter(order):
    proc = subprocess.run(
        [sys.executable, "-P", str(RUNNER), order], capture_output=True, text=True, timeout=600
    )
    lines = proc.stdout.splitlines()
    if proc.returncode < 0:
        started = [line for line in lines if line.startswith("start ")]
        last = started[-1][len("start ") :] if started else "(before the first case)"
        pytest.fail(
            f"the interpreter died with {signal.Signals(-proc.returncode).name} in case "
            f"{last}\n{proc.stderr[-4000:]}"
        )
    failures = [line for line in lines if line.startswith("FAIL ")]
    assert not failures, "\n".join(failures)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert lines[-1] == f"done {len(cases())}", proc.stdout[-2000:]


@pytest.mark.parametrize("case", cases(), ids=lambda c: c.name)
def test_bad_input_in_process(case):
    with pytest.raises(RuntimeError) as info:
        case.call()
    for fragment in case.fragments:
        assert fragment in str(info.value)
