#!/usr/bin/env python
"""ATen operations of the composite kernels, counted on the CPU: on a device without a kernel
of its own (CUDA, for abs_max_int_quant) each is a kernel launch, and host time goes with them.

    python benchmarks/count_composite_kernels.py

Counts the innermost ATen calls (views and metadata calls excluded) of one forward and one
backward of the composite kernel, called through its dispatch key, per tensor and per channel.
A script, not a test: nothing is asserted."""

import torch
from torch.profiler import ProfilerActivity, profile

import brevitas_cpp  # noqa: F401  (registers the ops)

OPS = torch.ops.brevitas_cpp
COMPOSITE = torch._C.DispatchKey.CompositeExplicitAutograd
METADATA = {
    "view", "reshape", "movedim", "permute", "unsqueeze", "squeeze", "expand", "as_strided",
    "empty", "empty_strided", "empty_like", "select", "slice", "t", "transpose", "contiguous",
    "detach", "alias", "resize_", "to", "lift_fresh", "result_type", "broadcast_to", "unbind",
}  # fmt: skip


def kernel_calls(fn) -> int:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()

    def counts(e) -> bool:
        return e.name.startswith("aten::") and e.name.split("::")[1] not in METADATA

    # The innermost: a call none of whose children is itself counted.
    return sum(1 for e in prof.events() if counts(e) and not any(map(counts, e.cpu_children)))


def main() -> None:
    w = torch.randn(64, 32, 3, 3)
    bw = torch.tensor(8.0)
    print("| abs_max_int_quant composite | forward | backward |")
    print("| --- | ---: | ---: |")
    for dim, name in ((None, "per tensor"), (0, "per channel")):
        args = (w, bw, dim, True, True, 1e-8, "round", False)
        y, s = OPS.abs_max_int_quant(*args)
        bargs = (torch.randn_like(y), torch.zeros_like(s), w, s, bw, dim, True, True, 1e-8)
        bargs += ("round", False)
        fwd = kernel_calls(lambda: OPS.abs_max_int_quant.default._op_dk(COMPOSITE, *args))
        bwd = kernel_calls(
            lambda: OPS._abs_max_int_quant_backward.default._op_dk(COMPOSITE, *bargs)
        )
        print(f"| {name} | {fwd} | {bwd} |")


if __name__ == "__main__":
    main()
