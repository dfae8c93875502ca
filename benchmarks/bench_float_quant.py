"""Benchmark of the fused minifloat op (OCP FP8 E4M3, per-tensor scale) against Brevitas's
unfused chain of elementwise steps, PyTorch's native float8 cast and copy bandwidth.

  ours      brevitas_cpp FloatQuant: one float_quant call forward, one _float_quant_backward call
  unfused   the same block with a rounding of another type: Brevitas's composition (x / s, the
            grid's internal scale from log2, round, FloatClamp, * s), autograd through each step
  native    (x / s).to(torch.float8_e4m3fn).to(x.dtype) * s: PyTorch's own rounding to E4M3
            (forward only: the cast has no gradient, so QAT cannot train through it)
  2 copies  x.clone() twice: a pass reading and writing x, the floor for a fused elementwise op

Ratios are measured in one run; forward+backward includes x's and the scale's gradients.
Usage: python benchmarks/bench_float_quant.py [--threads N] [--shape 32 64 56 56] [--reps 20]
"""

import argparse
import time
from typing import Callable, List

import torch

from brevitas_cpp.core.function_wrapper import FloatClamp, Identity, RoundSte, TensorClamp
from brevitas_cpp.core.quant import FloatQuant
from brevitas_cpp.core.scaling import ParameterScaling


class RoundCopy(RoundSte):
    """RoundSte under another type: FloatQuant then runs Brevitas's unfused composition."""


def e4m3_block(round_impl: torch.nn.Module) -> FloatQuant:
    return FloatQuant(
        bit_width=8,
        signed=True,
        exponent_bit_width=4,
        mantissa_bit_width=3,
        exponent_bias=7,
        float_clamp_impl=FloatClamp(
            TensorClamp(), True, nan_values=("111",), max_available_float=448.0
        ),
        input_view_impl=Identity(),
        scaling_impl=ParameterScaling(0.01),
        float_to_int_impl=round_impl,
    )


def best_time(fn: Callable[[], object], reps: int) -> float:
    for _ in range(3):
        fn()
    times: List[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--shape", type=int, nargs="+", default=[32, 64, 56, 56])
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(*args.shape) * 3.0
    upstream = torch.randn_like(x)
    ours, unfused = e4m3_block(RoundSte()), e4m3_block(RoundCopy())
    assert ours.fused and not unfused.fused
    assert torch.equal(ours(x)[0], unfused(x)[0])
    scale = torch.tensor(0.01)

    def forward(block: FloatQuant) -> Callable[[], object]:
        def run() -> object:
            with torch.no_grad():
                return block(x)[0]

        return run

    def forward_backward(block: FloatQuant) -> Callable[[], object]:
        def run() -> object:
            xi = x.detach().requires_grad_()
            block(xi)[0].backward(upstream)
            block.zero_grad(set_to_none=True)
            return xi.grad

        return run

    def native() -> object:
        return (x / scale).to(torch.float8_e4m3fn).to(x.dtype) * scale

    def two_copies() -> object:
        return x.clone().clone()

    copies = best_time(two_copies, args.reps)
    rows = [
        ("ours", best_time(forward(ours), args.reps), best_time(forward_backward(ours), args.reps)),
        (
            "unfused",
            best_time(forward(unfused), args.reps),
            best_time(forward_backward(unfused), args.reps),
        ),
        ("native cast", best_time(native, args.reps), float("nan")),
    ]
    print(
        f"float_quant OCP E4M3 on {tuple(args.shape)} float32, {args.threads} thread(s); "
        f"best of {args.reps}; 2 copies: {copies * 1e3:.2f} ms"
    )
    print("| impl | forward (ms) | vs 2 copies | fwd+bwd (ms) | ours is faster by (fwd, fwd+bwd) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    ours_f, ours_fb = rows[0][1], rows[0][2]
    for name, fwd, fwd_bwd in rows:
        has_backward = fwd_bwd == fwd_bwd  # the native cast has none (NaN)
        fb = f"{fwd_bwd * 1e3:.2f}" if has_backward else "n/a"
        fb_ratio = f"{fwd_bwd / ours_fb:.2f}x" if has_backward else "n/a"
        print(
            f"| {name} | {fwd * 1e3:.2f} | {fwd / copies:.2f}x | {fb} | "
            f"{fwd / ours_f:.2f}x, {fb_ratio} |"
        )


if __name__ == "__main__":
    main()
