#!/usr/bin/env python
"""Benchmark of brevitas_cpp's fused int_quant against PyTorch's fake-quantize ops, the unfused
ATen composition and a plain copy (the memory-bandwidth floor), on CPU or on a GPU.

    python benchmarks/bench_ops.py                  # full run (< 4 min on 2 cores)
    python benchmarks/bench_ops.py --quick          # fewer shapes and reps
    python benchmarks/bench_ops.py --threads 1      # thread counts to run, comma separated
    python benchmarks/bench_ops.py --device cuda    # on the GPU, with a 64M-element shape; copy is
                                                    # a device-to-device copy, GB/s = bytes read and
                                                    # written by the forward per second

Quantizer: signed 8 bit, narrow_range False, round half to even, clamp_ste False, zero point 0.
  fixed scale:   x requires grad, scale does not.
  learned scale: x and scale require grad (zero point fixed zeros).
Weight-like shapes [C, C, 3, 3] use a per-output-channel scale ([C, 1, 1, 1]; [C] with axis 0 for
the native ops), the others a per-tensor scale.

Implementations timed in the same process:
  ours     torch.ops.brevitas_cpp.int_quant
  native   torch.fake_quantize_per_{tensor,channel}_affine (fixed scale),
           torch._fake_quantize_learnable_per_{tensor,channel}_affine (learned scale)
  unfused  u = x / s + z; r = (round(u) - u).detach() + u; c = where(r > max, max, r);
           c = where(c < min, min, c); y = (c - z) * s   (autograd through ATen ops)
  copy     y.copy_(x) into a preallocated tensor

Times: median (--stat min: minimum) over reps, each rep timing a loop of calls, after warmup,
via time.perf_counter.
  fwd      forward with autograd recording (inputs require grad, the graph is built)
  bwd      torch.autograd.grad(y, inputs, g, retain_graph=True) on a graph built once
  fwd+bwd  forward, then torch.autograd.grad
For the copy row bwd is the same copy (a gradient pass writes one x-sized tensor) and fwd+bwd is
two copies. Ratios: ours/copy (fwd, bwd, fwd+bwd vs 2 copies), ours/native, unfused/ours.
Saved for backward: bytes per element of x of the x-sized tensors autograd saves (counted with
torch.autograd.graph.saved_tensors_hooks, each storage once); "new" excludes x itself, which the
caller keeps alive anyway.

This is a script, not a test: the numbers are not asserted anywhere.
"""

import argparse
import os
import statistics
import sys
import time

import torch

import brevitas_cpp  # noqa: F401  (registers torch.ops.brevitas_cpp)

QMIN, QMAX = -128, 127

FULL_SHAPES = [
    ("64x64x3x3", (64, 64, 3, 3), "channel"),
    ("256x256x3x3", (256, 256, 3, 3), "channel"),
    ("32x64x56x56", (32, 64, 56, 56), "tensor"),
    ("4096x4096", (4096, 4096), "tensor"),
]
QUICK_SHAPES = [FULL_SHAPES[0], FULL_SHAPES[2]]
CUDA_SHAPES = FULL_SHAPES + [("8192x8192", (8192, 8192), "tensor")]  # 64M elements
DEVICE = torch.device("cpu")


def sync():
    """Waits for the device's queued work (timings of GPU calls must include it)."""
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


IMPLS = ("copy", "ours", "native", "unfused")


# ----------------------------------------------------------------------------------------------
# The implementations. Each make_* returns (forward, inputs_needing_grad).
# ----------------------------------------------------------------------------------------------


class Problem:
    def __init__(self, shape, granularity, learned, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn(shape, generator=gen).requires_grad_()
        self.g = torch.randn(shape, generator=gen)
        self.granularity = granularity
        self.learned = learned
        amax = self.x.detach().abs()
        if granularity == "channel":
            c = shape[0]
            s = amax.reshape(c, -1).amax(dim=1) / QMAX  # [C]
            self.scale_1d = s.clone().requires_grad_(learned)  # native per-channel: [C]
            self.scale = (
                s.view(c, *([1] * (len(shape) - 1))).clone().requires_grad_(learned)
            )  # ours: [C,1,1,1]
            self.zp = torch.zeros_like(self.scale)
            self.zp_int_1d = torch.zeros(c, dtype=torch.int32)
            self.zp_float_1d = torch.zeros(c)
        else:
            s = (amax.max() / QMAX).reshape(())
            self.scale = s.clone().requires_grad_(learned)  # ours: []
            self.scale_1d = s.reshape(1).clone().requires_grad_(learned)  # native learnable: [1]
            self.scale_float = float(s)
            self.zp = torch.zeros(())
            self.zp_float_1d = torch.zeros(1)
        self.bit_width = torch.tensor(8.0)
        self.qmin_t = torch.tensor(float(QMIN))  # Brevitas's min_int(bit_width).type_as(x)
        self.qmax_t = torch.tensor(float(QMAX))
        if DEVICE.type != "cpu":  # made on the CPU (same numbers everywhere), then moved
            for name, value in list(vars(self).items()):
                if isinstance(value, torch.Tensor):
                    moved = value.detach().to(DEVICE)
                    setattr(self, name, moved.requires_grad_(value.requires_grad))
        self.out = torch.empty_like(self.x, requires_grad=False)
        self.grad_out = torch.empty_like(self.x, requires_grad=False)

    def inputs(self, impl):
        if not self.learned:
            return (self.x,)
        return (self.x, self.scale_1d if impl == "native" else self.scale)

    def forward(self, impl):
        x = self.x
        if impl == "ours":
            return torch.ops.brevitas_cpp.int_quant(
                x, self.scale, self.zp, self.bit_width, True, False, "round", False
            )
        if impl == "native":
            if self.granularity == "channel":
                if self.learned:
                    return torch._fake_quantize_learnable_per_channel_affine(
                        x, self.scale_1d, self.zp_float_1d, 0, QMIN, QMAX, 1.0
                    )
                return torch.fake_quantize_per_channel_affine(
                    x, self.scale_1d, self.zp_int_1d, 0, QMIN, QMAX
                )
            if self.learned:
                return torch._fake_quantize_learnable_per_tensor_affine(
                    x, self.scale_1d, self.zp_float_1d, QMIN, QMAX, 1.0
                )
            return torch.fake_quantize_per_tensor_affine(x, self.scale_float, 0, QMIN, QMAX)
        if impl == "unfused":
            s, z = self.scale, self.zp
            u = x / s + z
            r = (torch.round(u) - u).detach() + u
            c = torch.where(r > self.qmax_t, self.qmax_t, r)
            c = torch.where(c < self.qmin_t, self.qmin_t, c)
            return (c - z) * s
        if impl == "copy":
            return self.out.copy_(x.detach())
        raise ValueError(impl)


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


STAT = statistics.median


def measure(fn, reps, warmup, min_rep_s=10e-3):
    """Median (or, with --stat min, minimum) seconds per call over `reps` timed loops of `number` calls, after `warmup` calls.

    `number` comes from the fastest warmup call, so that one preempted call (a shared machine,
    OpenMP threads waiting for a descheduled peer) does not set it.
    """
    est = []
    for _ in range(max(warmup, 1)):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        est.append(time.perf_counter() - t0)
    one = max(min(est), 1e-7)
    number = max(1, int(min_rep_s / one))
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / number)
    return STAT(times)


def time_impl(p, impl, reps, warmup):
    if impl == "copy":
        fwd = measure(lambda: p.out.copy_(p.x.detach()), reps, warmup)
        bwd = measure(lambda: p.grad_out.copy_(p.g), reps, warmup)

        def two_copies():
            p.out.copy_(p.x.detach())
            p.grad_out.copy_(p.g)

        fb = measure(two_copies, reps, warmup)
        return fwd, bwd, fb

    inputs = p.inputs(impl)
    fwd = measure(lambda: p.forward(impl), reps, warmup)
    y = p.forward(impl)
    bwd = measure(lambda: torch.autograd.grad(y, inputs, p.g, retain_graph=True), reps, warmup)
    y = None  # frees the graph kept for the backward timing

    def fwd_bwd():
        out = p.forward(impl)
        torch.autograd.grad(out, inputs, p.g)

    fb = measure(fwd_bwd, reps, warmup)
    return fwd, bwd, fb


# ----------------------------------------------------------------------------------------------
# Memory saved for backward
# ----------------------------------------------------------------------------------------------


def saved_bytes_per_element(p, impl):
    """(all, new): bytes per element of x of the x-sized tensors saved for backward."""
    if impl == "copy":
        return 0.0, 0.0
    seen = {}  # data_ptr -> (bytes, is x itself)
    x_ptr = p.x.data_ptr()

    def pack(t):
        if t.numel() == p.x.numel():
            seen[t.data_ptr()] = (t.numel() * t.element_size(), t.data_ptr() == x_ptr)
        return t

    def unpack(t):
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = p.forward(impl)
    del y
    n = p.x.numel()
    total = sum(nbytes for nbytes, _ in seen.values()) / n
    new = sum(nbytes for nbytes, is_x in seen.values() if not is_x) / n
    return total, new


# ----------------------------------------------------------------------------------------------
# Report
# ----------------------------------------------------------------------------------------------


def fmt_time(s):
    if s < 1e-3:
        return f"{s * 1e6:9.1f}us"
    return f"{s * 1e3:9.2f}ms"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes and reps")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument(
        "--reps",
        type=int,
        default=None,
        help="timed reps per measurement (default 7, big shapes 3)",
    )
    ap.add_argument(
        "--stat",
        choices=("median", "min"),
        default="median",
        help="statistic over reps (min is steadier on a busy machine; default median)",
    )
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = ap.parse_args(argv)
    global STAT, DEVICE
    STAT = min if args.stat == "min" else statistics.median
    DEVICE = torch.device(args.device)
    threads = [int(t) for t in args.threads.split(",") if t]
    if DEVICE.type == "cuda":
        threads = [torch.get_num_threads()]  # the host threads only launch kernels
        print("device:", torch.cuda.get_device_name(DEVICE))

    print("brevitas_cpp.build_info():", brevitas_cpp.build_info())
    print(
        f"torch {torch.__version__}, python {sys.version.split()[0]}, "
        f"torch.get_num_threads() at start {torch.get_num_threads()}"
    )
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (a busy shared machine makes 2-thread "
        "runs noisy)"
    )
    print(
        f"int_quant: signed 8 bit, round, clamp_ste=False, zero point 0; times are {args.stat}s\n"
    )

    shapes = QUICK_SHAPES if args.quick else (CUDA_SHAPES if DEVICE.type == "cuda" else FULL_SHAPES)
    summary = []
    start = time.perf_counter()
    for name, shape, granularity in shapes:
        numel = 1
        for d in shape:
            numel *= d
        big = numel >= 4_000_000 and DEVICE.type == "cpu"
        if args.reps is not None:
            reps = args.reps
        elif args.quick:
            reps = 2 if big else 5
        else:
            reps = 3 if big else 7
        warmup = 1 if big else 3
        for learned in (False, True):
            p = Problem(shape, granularity, learned)
            mode = "learned" if learned else "fixed"
            saved = {impl: saved_bytes_per_element(p, impl) for impl in IMPLS}
            for nt in threads:
                torch.set_num_threads(nt)
                res = {impl: time_impl(p, impl, reps, warmup) for impl in IMPLS}
                print(
                    f"== {name} ({'per-channel dim 0' if granularity == 'channel' else 'per-tensor'} scale), "
                    f"{mode} scale, threads={nt}, numel={numel}, reps={reps}"
                )
                print(
                    f"   {'impl':<8} {'fwd':>11} {'bwd':>11} {'fwd+bwd':>11}   saved B/elem (new)"
                )
                for impl in IMPLS:
                    f, b, fb = res[impl]
                    tot, new = saved[impl]
                    saved_txt = f"{tot:5.2f} ({new:4.2f})" if impl != "copy" else "    -"
                    print(
                        f"   {impl:<8} {fmt_time(f)} {fmt_time(b)} {fmt_time(fb)}   {saved_txt}"
                        + ("   <- bwd = 1 copy, f+b = 2 copies" if impl == "copy" else "")
                    )
                o, n, u, c = res["ours"], res["native"], res["unfused"], res["copy"]
                r = {
                    "ours/copy fwd": o[0] / c[0],
                    "ours/copy bwd": o[1] / c[1],
                    "ours/2copy f+b": o[2] / c[2],
                    "ours/native fwd": o[0] / n[0],
                    "ours/native bwd": o[1] / n[1],
                    "ours/native f+b": o[2] / n[2],
                    "unfused/ours f+b": u[2] / o[2],
                }
                print("   ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()))
                gbs = 2 * numel * p.x.element_size() / 1e9  # forward: x read, y written
                print(
                    f"   forward GB/s: ours {gbs / o[0]:.0f}, copy {gbs / c[0]:.0f} "
                    f"(ours at {100 * c[0] / o[0]:.0f}% of copy bandwidth)"
                )
                print()
                summary.append(
                    (name, mode, nt, r, saved["ours"][0], saved["unfused"][0], saved["native"][0])
                )
    torch.set_num_threads(max(threads))

    print(
        "== summary (ratios; < 1 means ours is faster in ours/native, > 1 means ours is faster in unfused/ours)"
    )
    keys = list(summary[0][3].keys()) if summary else []
    head = f"{'shape':<12} {'scale':<8} {'thr':>3} " + " ".join(f"{k:>16}" for k in keys)
    head += f" {'saved ours':>10} {'unfused':>8} {'native':>7}"
    print(head)
    for name, mode, nt, r, s_ours, s_unf, s_nat in summary:
        print(
            f"{name:<12} {mode:<8} {nt:>3} "
            + " ".join(f"{r[k]:>16.2f}" for k in keys)
            + f" {s_ours:>10.2f} {s_unf:>8.2f} {s_nat:>7.2f}"
        )
    print("\n(saved = bytes per element of x saved for backward, x itself included)")
    print(
        f"total time {time.perf_counter() - start:.1f} s, load average now {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
