"""References shared by the weight-layer tests (tests/nn/test_quant_*.py), which load this file by
path: pytest's importlib mode does not make sibling files importable.

Quantizer formulas written out with plain torch (helpers.ref_int_quant is the unfused
round/clamp composition), never with brevitas_cpp's own code; only the quantizer *classes* used
to configure layers come from brevitas_cpp.quant.
"""

from typing import Optional, Tuple

import torch
from helpers import ref_int_quant
from torch import Tensor

from brevitas_cpp import config
from brevitas_cpp.inject.enum import ScalingImplType
from brevitas_cpp.quant import Int8ActPerTensorFloat, Uint8ActPerTensorFloat

ZERO = torch.tensor(0.0)
JIT = config.JIT_ENABLED


# ---- activation quantizers with a fixed scale, so inputs have a known grid -----------------------


class ConstInt8Act(Int8ActPerTensorFloat):
    """Signed 8-bit, scale 1.28 / 128 = 0.01 (a signed threshold is divided by 2^(bits-1))."""

    scaling_impl_type = ScalingImplType.CONST
    scaling_init = 1.28


class ConstUint8Act(Uint8ActPerTensorFloat):
    """Unsigned 8-bit, scale 2.55 / 255."""

    scaling_impl_type = ScalingImplType.CONST
    scaling_init = 2.55


def const_act_scale(
    threshold: float, bit_width: int, signed: bool, dtype: torch.dtype = torch.float32
) -> Tensor:
    divisor = 2 ** (bit_width - 1) if signed else 2**bit_width - 1
    return torch.tensor(threshold, dtype=dtype) / divisor


def ref_act(x: Tensor, scale: Tensor, bit_width: int = 8, signed: bool = True) -> Tensor:
    """Activation quantization on a fixed grid (not narrow, plain clamp)."""
    return ref_int_quant(x, scale, ZERO.to(x.dtype), torch.tensor(float(bit_width)), signed, False)


# ---- weights -------------------------------------------------------------------------------------


def weight_scale(w: Tensor, bit_width: int = 8, channel_dim: Optional[int] = None) -> Tensor:
    """AbsMax scale of a narrow-range signed weight quantizer: max|w| / (2^(b-1) - 1), over the
    whole tensor or per channel_dim (kept as a broadcastable dim)."""
    max_int = 2 ** (bit_width - 1) - 1
    if channel_dim is None:
        return w.abs().max() / max_int
    dims = tuple(d for d in range(w.dim()) if d != channel_dim)
    if not dims:  # a 1-d weight: one scale per element (amax over () would reduce everything)
        return w.abs() / max_int
    return w.abs().amax(dim=dims, keepdim=True) / max_int


def ref_weight(w: Tensor, bit_width: int = 8, channel_dim: Optional[int] = None) -> Tensor:
    """Int8WeightPerTensorFloat / Int8WeightPerChannelFloat (at bit_width): narrow signed grid,
    clamp with a straight-through gradient, scale differentiable through the max."""
    scale = weight_scale(w, bit_width, channel_dim)
    return ref_int_quant(
        w, scale, ZERO.to(w.dtype), torch.tensor(float(bit_width)), True, True, clamp_ste=True
    )


def ref_bias(b: Tensor, scale: Tensor, bit_width: int = 32) -> Tensor:
    """IntBias: the bias on the accumulator grid scale (input scale x weight scale)."""
    return ref_int_quant(
        b, scale.reshape(-1), ZERO.to(b.dtype), torch.tensor(float(bit_width)), True, False
    )


# ---- comparisons ---------------------------------------------------------------------------------


def seeded_(module: torch.nn.Module, seed: int = 0, spread: float = 0.5) -> torch.nn.Module:
    """Overwrite module's weight and bias with seeded normals (same numbers for any dtype)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in ("weight", "bias"):
            p = getattr(module, name, None)
            if p is not None:
                values = torch.randn(p.shape, generator=g, dtype=torch.float64) * spread
                p.copy_(values.to(p.dtype))
    return module


def assert_grads_close(
    actual: Optional[Tensor], expected: Optional[Tensor], rtol: float = 1e-5, atol: float = 1e-6
) -> None:
    """Gradients through the quantizers: the fused ops add up the scale's gradient in another
    order than autograd of the written-out formula (whose own order depends on the thread
    split), so equality holds to rounding only: elementwise rtol, and norm-wise rtol relative to
    the largest gradient (the abs-max weight also receives the summed scale gradient)."""
    assert actual is not None and expected is not None
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol + rtol * scale)


def grad_of(fn, leaves: Tuple[Tensor, ...], g: Tensor) -> Tuple[Tensor, ...]:
    """Gradients of sum(fn(*leaves) * g) with respect to fresh copies of leaves."""
    copies = [t.detach().clone().requires_grad_() for t in leaves]
    out = fn(*copies)
    (out * g).sum().backward()
    return tuple(c.grad for c in copies)


def assert_scripted_quantizers(layer: torch.nn.Module) -> None:
    """Under BREVITAS_JIT=1 every enabled quantizer core of the layer is a ScriptModule."""
    if not JIT:
        return
    found = 0
    for name, module in layer.named_modules():
        if name.endswith("tensor_quant") and module is not None:
            assert isinstance(module, torch.jit.ScriptModule), name
            found += 1
    assert found > 0
