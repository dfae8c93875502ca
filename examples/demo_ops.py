"""Main job (for now): quantize one tensor with every brevitas_cpp op and print the results.

Run after set-up:  python3 examples/demo_ops.py
"""

from __future__ import annotations

import torch

import brevitas_cpp
from brevitas_cpp import function as F


def show(name: str, y: torch.Tensor) -> None:
    values = ", ".join(f"{v:+.4f}" for v in y.flatten().tolist())
    print(f"  {name:<28} [{values}]")


def quantize_4bit(t: torch.Tensor) -> torch.Tensor:
    return F.int_quant(t, torch.tensor(0.5), torch.tensor(0.0), torch.tensor(4.0), True, False)


def main() -> None:
    torch.manual_seed(0)
    print("brevitas_cpp build:", brevitas_cpp.build_info())
    x = torch.tensor([-2.5, -1.5, -0.7, -0.5, 0.0, 0.3, 0.5, 1.5, 2.6])
    print("\nx =", x.tolist())

    print("\nStraight-through estimators (forward values; gradients pass through):")
    for name in (
        "round_ste",
        "ceil_ste",
        "floor_ste",
        "round_to_zero_ste",
        "dpu_round_ste",
        "binary_sign_ste",
        "ternary_sign_ste",
        "abs_binary_sign_grad",
    ):
        show(name, getattr(F, name)(x))
    show("scalar_clamp_ste(-1, 1)", F.scalar_clamp_ste(x, -1.0, 1.0))
    show("scalar_clamp_min_ste(0)", F.scalar_clamp_min_ste(x, 0.0))
    show("tensor_clamp_ste(-2, 2)", F.tensor_clamp_ste(x, torch.tensor(-2.0), torch.tensor(2.0)))

    print("\nFused quantizers (scale 0.5):")
    scale, zero = torch.tensor(0.5), torch.tensor(0.0)
    for bits in (2, 4, 8):
        show(
            f"int_quant signed {bits}-bit",
            F.int_quant(x, scale, zero, torch.tensor(float(bits)), True, False),
        )
    show("int_quant unsigned 4-bit", F.int_quant(x, scale, zero, torch.tensor(4.0), False, False))
    show("int_quant 4-bit, dpu", F.int_quant(x, scale, zero, torch.tensor(4.0), True, False, "dpu"))
    show("binary_quant", F.binary_quant(x, scale))
    show("clamped_binary_quant", F.clamped_binary_quant(x, scale))
    show("ternary_quant (thr 0.5)", F.ternary_quant(x, scale, 0.5))

    print("\nLearned scale and bit width: one backward through int_quant")
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    s = (w.detach().abs().amax(dim=(1, 2, 3), keepdim=True) / 127).requires_grad_()
    b = torch.tensor(8.0, requires_grad=True)
    y = F.int_quant(w, s, torch.zeros(()), b, True, True)
    y.square().sum().backward()
    print(f"  max |w - q(w)| per channel: {(w - y).abs().amax(dim=(1, 2, 3)).tolist()}")
    print(f"  grad scale: {s.grad.flatten().tolist()}")
    print(f"  grad bit_width: {b.grad.item():+.4f}")

    scripted = torch.jit.script(quantize_4bit)
    print("\nTorchScript-compiled 4-bit quantizer:", scripted(x).tolist())


if __name__ == "__main__":
    main()
