#!/usr/bin/env python
"""int_quant forward and backward on the GPU, a few times, for a kernel profiler (ncu):

    ncu --kernel-name regex:'map_kernel|reduce_by_param|param_grad' --launch-skip 6 --launch-count 6 \\
        --section SpeedOfLight --section Occupancy python3 -P benchmarks/profile_int_quant_cuda.py

16M float32 elements, per-tensor learned scale (the case where the backward is 7x a copy,
README "GPU"). Prints the wall time of each call too. Not a test."""

import time

import torch

import brevitas_cpp  # noqa: F401  (registers the ops)


def main() -> None:
    x = torch.randn(4096, 4096, device="cuda", requires_grad=True)
    scale = (x.detach().abs().max() / 127).reshape(()).requires_grad_()
    zero_point, bit_width = torch.zeros((), device="cuda"), torch.tensor(8.0, device="cuda")
    g = torch.randn_like(x)
    for i in range(4):  # the first two are warm-up
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        y = torch.ops.brevitas_cpp.int_quant(
            x, scale, zero_point, bit_width, True, False, "round", False
        )
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        torch.autograd.grad(y, (x, scale), g)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        print(f"call {i}: forward {1e6 * (t1 - t0):.1f} us, backward {1e6 * (t2 - t1):.1f} us")


if __name__ == "__main__":
    main()
