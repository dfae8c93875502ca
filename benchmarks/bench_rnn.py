#!/usr/bin/env python
"""Recurrent-layer QAT training-step benchmark: float nn.LSTM / nn.RNN vs brevitas_cpp's
QuantLSTM / QuantRNN vs Brevitas 0.12's, BREVITAS_JIT=0 and =1.

    python benchmarks/bench_rnn.py                  # all configurations (about 1-2 min idle)
    python benchmarks/bench_rnn.py --quick          # fewer reps
    python benchmarks/bench_rnn.py --threads 2      # torch.set_num_threads in every run (default 1)

Model: one layer of hidden 64 over input 32, sequence 32, batch 16 (seq-first), the layers'
default quantizers (8-bit per-tensor weights, Int32 biases, 8-bit input/output, gate
accumulator, sigmoid, tanh and cell-state quantizers), the activation quantizers' statistics
warm-up shortened to 4 calls (`*_collect_stats_steps`) so that the timed steps are in the steady,
learned-scale phase, as in a long QAT run. A step is forward, MSE against a fixed target on the
output sequence, backward and an SGD step; the same seed builds every library's model.

Each (library, BREVITAS_JIT) pair runs in its own subprocess (BREVITAS_JIT is read at import),
and Brevitas in --brevitas-python (default /tmp/brevenv/bin/python, the venv of
scripts/make_brevitas_env.sh), with the no-op Tensor.rename that Brevitas 0.12 needs on torch
2.13. Time per step: the median over reps of a loop of steps, after warm-up steps (which also
let the TorchScript profiling executor optimize). Ratios are computed from one run's numbers;
nothing here is asserted in a test.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BREVITAS_PYTHON = "/tmp/brevenv/bin/python"
SEQ, BATCH, INPUT, HIDDEN = 32, 16, 32, 64
STATS_STEPS = 4
PREFIXES = {
    "QuantLSTM": ("io_", "gate_acc_", "sigmoid_", "tanh_", "cell_state_"),
    "QuantRNN": ("io_", "gate_acc_quant_"),
}


def build(lib: str, kind: str):
    import torch

    torch.manual_seed(0)
    if lib == "float":
        return torch.nn.LSTM(INPUT, HIDDEN) if kind == "lstm" else torch.nn.RNN(INPUT, HIDDEN)
    if lib == "ours":
        from _checkout import import_brevitas_cpp_nn

        qnn = import_brevitas_cpp_nn()
    else:
        if not hasattr(torch.Tensor, "rename"):
            # Brevitas 0.12 strips tensor names with rename(None); a no-op for unnamed inputs.
            torch.Tensor.rename = lambda self, *names, **rename_map: self
        import brevitas.nn as qnn
    name = "QuantLSTM" if kind == "lstm" else "QuantRNN"
    kwargs = {p + "collect_stats_steps": STATS_STEPS for p in PREFIXES[name]}
    return getattr(qnn, name)(INPUT, HIDDEN, **kwargs)


def worker(spec: dict) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    results = {}
    for kind in ("lstm", "rnn"):
        model = build(spec["lib"], kind)
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(SEQ, BATCH, INPUT, generator=gen)
        target = torch.randn(SEQ, BATCH, HIDDEN, generator=gen)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step():
            nonlocal opt
            opt.zero_grad(set_to_none=True)
            out = model(x)[0]
            out = out.value if hasattr(out, "value") else out
            loss = (out - target).square().mean()
            loss.backward()
            opt.step()
            return loss

        # Same-model check: the fresh model's eval loss (no statistics yet, so every library's
        # scales are their initial values; in training, brevitas_cpp's QuantRNN starts the gate
        # accumulator's learned scale at its statistic where Brevitas draws a random multiple of
        # it, see _rnn_layer_base.reset_parameters).
        model.eval()
        with torch.no_grad():
            out = model(x)[0]
            out = out.value if hasattr(out, "value") else out
            first_loss = float((out - target).square().mean())
        model.train()
        # Statistics phase, then the learned scales exist: rebuild the optimizer over them.
        step()
        for _ in range(STATS_STEPS + 2):
            step()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(spec["warmup"]):
            step()
        loop = spec["loop"]
        times = []
        for _ in range(spec["reps"]):
            start = time.perf_counter()
            for _ in range(loop):
                step()
            times.append((time.perf_counter() - start) / loop)
        results[kind] = {"step_ms": 1e3 * statistics.median(times), "first_loss": first_loss}
    return results


def run_worker(python: str, lib: str, jit: bool, args) -> dict:
    spec = {
        "lib": lib,
        "threads": args.threads,
        "warmup": 3 if args.quick else 6,
        "reps": 3 if args.quick else 7,
        "loop": 3 if args.quick else 5,
    }
    env = dict(os.environ, BREVITAS_JIT="1" if jit else "0")
    proc = subprocess.run(
        [python, os.path.abspath(__file__), "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--brevitas-python", default=DEFAULT_BREVITAS_PYTHON)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    runs = {("float", False): run_worker(sys.executable, "float", False, args)}
    for jit in (False, True):
        runs[("ours", jit)] = run_worker(sys.executable, "ours", jit, args)
        if os.path.exists(args.brevitas_python):
            runs[("brevitas", jit)] = run_worker(args.brevitas_python, "brevitas", jit, args)
    print(
        f"training step, seq {SEQ} x batch {BATCH}, input {INPUT}, hidden {HIDDEN}, "
        f"{args.threads} thread(s)"
    )
    for kind in ("lstm", "rnn"):
        float_ms = runs[("float", False)][kind]["step_ms"]
        print(f"\n{kind.upper()}: float nn.{'LSTM' if kind == 'lstm' else 'RNN'} {float_ms:.2f} ms")
        for jit in (False, True):
            ours = runs[("ours", jit)]
            brev = runs.get(("brevitas", jit), {"error": "no Brevitas python"})
            if "error" in ours:
                print(f"  JIT={int(jit)} ours failed: {ours['error']}")
                continue
            ours_ms = ours[kind]["step_ms"]
            line = f"  JIT={int(jit)} ours {ours_ms:.2f} ms ({ours_ms / float_ms:.1f}x float)"
            if "error" in brev:
                line += f"; Brevitas: {brev['error']}"
            else:
                brev_ms = brev[kind]["step_ms"]
                line += (
                    f"; Brevitas {brev_ms:.2f} ms ({brev_ms / float_ms:.1f}x float, "
                    f"{brev_ms / ours_ms:.2f}x ours); fresh eval loss ours "
                    f"{ours[kind]['first_loss']:.6f} Brevitas {brev[kind]['first_loss']:.6f}"
                )
            print(line)


if __name__ == "__main__":
    main()
