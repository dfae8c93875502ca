#!/usr/bin/env python
"""Benchmark of quantization_int8 (seed 003's EMA-threshold int8 op) in training mode, against
what a PyTorch user has for the same job, on CPU (or a GPU with --device cuda).

    python benchmarks/bench_int8_ema.py            # < 2 min on 2 cores
    python benchmarks/bench_int8_ema.py --quick    # fewer reps

Each call updates the statistic (activations: max|x| folded into the EMA; weights: max|x| per
output channel) and fake-quantizes to the symmetric range [-127, 127]; then the gradient of x.
  ours      torch.ops.brevitas_cpp.quantization_int8 (grad_mode "ste" and "clip")
  torch.ao  torch.ao.quantization.FakeQuantize with MovingAverageMinMaxObserver (per tensor,
            averaging_constant 0.01, per_tensor_symmetric) or MovingAveragePerChannelMinMaxObserver
            (per channel, axis 0), quant range [-127, 127]: PyTorch's own EMA fake quantization
            (its gradient is the clip window)
  unfused   the seed's pseudo-code in ATen ops: t = amax(|x|) into the EMA, unit = t / 127,
            y = clamp(round(x / unit), -127, 127) * unit with a straight-through round
            (autograd through ATen ops; the clamp masks x's gradient like "clip")
  copy      y.copy_(x) + a second copy for the gradient (the memory-bandwidth floor)
Times: median of reps, each a loop of forward + torch.autograd.grad calls. Ratios are taken
within one run. A script, not a test: nothing is asserted.
"""

import argparse
import os
import statistics
import sys
import time

import torch

import brevitas_cpp  # noqa: F401  (registers torch.ops.brevitas_cpp)

OPS = torch.ops.brevitas_cpp
SHAPES = [
    ("act 32x64x56x56", (32, 64, 56, 56), "tensor"),
    ("weight 256x256x3x3", (256, 256, 3, 3), "channel"),
]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(fn, reps, device, min_rep_s=20e-3):
    for _ in range(2):
        fn()
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    number = max(1, int(min_rep_s / max(time.perf_counter() - t0, 1e-7)))
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        sync(device)
        times.append((time.perf_counter() - t0) / number)
    return statistics.median(times)


def ours(shape, granularity, grad_mode, device):
    per_channel = granularity == "channel"
    threshold = torch.zeros(shape[0] if per_channel else (), device=device)
    iteration = torch.zeros((), dtype=torch.long, device=device)
    axis = 0 if per_channel else None

    def call(x):
        return OPS.quantization_int8(
            x, threshold, iteration, 8, per_channel, axis, 0.01, 0, grad_mode, "minmax", True
        )[0]

    return call


def torch_ao(shape, granularity, device):
    from torch.ao.quantization import FakeQuantize
    from torch.ao.quantization.observer import (
        MovingAverageMinMaxObserver,
        MovingAveragePerChannelMinMaxObserver,
    )

    if granularity == "channel":
        fq = FakeQuantize(
            MovingAveragePerChannelMinMaxObserver,
            quant_min=-127,
            quant_max=127,
            dtype=torch.qint8,
            qscheme=torch.per_channel_symmetric,
            ch_axis=0,
            averaging_constant=0.01,
        )
    else:
        fq = FakeQuantize(
            MovingAverageMinMaxObserver,
            quant_min=-127,
            quant_max=127,
            dtype=torch.qint8,
            qscheme=torch.per_tensor_symmetric,
            averaging_constant=0.01,
        )
    return fq.to(device)


def unfused(shape, granularity, device):
    per_channel = granularity == "channel"
    state = {"t": None}

    def call(x):
        with torch.no_grad():
            if per_channel:
                cur = x.abs().amax(dim=tuple(range(1, x.dim())))
            else:
                cur = x.abs().amax()
            t = cur if state["t"] is None or per_channel else state["t"] * 0.99 + cur * 0.01
            state["t"] = t
            unit = (t / 127).view(-1, *([1] * (x.dim() - 1))) if per_channel else t / 127
        u = x / unit
        r = (torch.round(u) - u).detach() + u
        return torch.clamp(r, -127, 127) * unit

    return call


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer reps")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (CPU)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    reps = 3 if args.quick else 7
    threads = [int(t) for t in args.threads.split(",")] if device.type == "cpu" else [0]
    print("brevitas_cpp.build_info():", brevitas_cpp.build_info())
    print(
        f"torch {torch.__version__}, python {sys.version.split()[0]}, load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; times are medians of {reps} reps\n"
    )
    for name, shape, granularity in SHAPES:
        x = torch.randn(shape, device=device).requires_grad_()
        g = torch.randn(shape, device=device)
        impls = {
            "ours ste": ours(shape, granularity, "ste", device),
            "ours clip": ours(shape, granularity, "clip", device),
            "torch.ao": torch_ao(shape, granularity, device),
            "unfused": unfused(shape, granularity, device),
        }
        out, grad_out = torch.empty_like(g), torch.empty_like(g)
        for nt in threads:
            if nt:
                torch.set_num_threads(nt)
            times = {
                impl: measure(lambda f=f: torch.autograd.grad(f(x), x, g), reps, device)
                for impl, f in impls.items()
            }

            def copies():
                out.copy_(x.detach())
                grad_out.copy_(g)

            times["2 copies"] = measure(copies, reps, device)
            print(f"== {name} ({granularity}), fwd+bwd, threads={nt or 'gpu'}")
            for impl, t in times.items():
                print(f"   {impl:<9} {t * 1e3:9.3f} ms")
            o = times["ours clip"]
            print(
                f"   ours clip / 2 copies {o / times['2 copies']:.2f}   torch.ao / ours clip "
                f"{times['torch.ao'] / o:.2f}   unfused / ours clip {times['unfused'] / o:.2f}   "
                f"ours ste / ours clip {times['ours ste'] / o:.2f}\n"
            )


if __name__ == "__main__":
    main()
