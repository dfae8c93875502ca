"""Helpers shared by the pytest files under tests/ (references, comparisons, call recording).

pytest runs with --import-mode=importlib, so test files cannot import each other; this module is
found through `pythonpath = ["tests"]` in pyproject.toml instead. It never imports brevitas_cpp:
the references below are plain torch, independent of the library under test."""

import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

Tensor = torch.Tensor

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DTYPE_IDS = ["f32", "f64", "f16", "bf16"]
# Same-width integer dtypes, to compare floats bit for bit (signed zeros, NaN payloads).
INT_VIEW = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}
BAD_DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool, torch.complex64]


class RecordedCalls(TorchDispatchMode):
    """Records the name of every op dispatched inside its ``with`` block (``.names``), e.g.
    brevitas_cpp.int_quant.default, to count calls or check that a kernel was (not) reached."""

    def __init__(self) -> None:
        super().__init__()
        self.names: List[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


# ---- bitwise comparisons -----------------------------------------------------------------------
# Two flavours, kept apart because the suites rely on their differences: assert_same wants NaN
# exactly where expected has NaN; assert_bitwise compares raw bits and can ignore the sign of zero.


def assert_same(actual: Tensor, expected: Tensor) -> None:
    """Bitwise equality: dtype, shape, values (NaN == NaN) and the sign of zeros."""
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    # Integer results (max_int/min_int) have no NaN and no signed zero.
    nan = (
        torch.isnan(expected)
        if expected.is_floating_point()
        else torch.zeros_like(expected, dtype=torch.bool)
    )
    same = torch.equal(
        torch.isnan(actual) if actual.is_floating_point() else nan, nan
    ) and torch.equal(actual[~nan], expected[~nan])
    if not same:  # assert_close only for its report (it is slow on large tensors)
        torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
        raise AssertionError("not bitwise equal")
    if expected.is_floating_point():
        assert torch.equal(torch.signbit(actual)[~nan], torch.signbit(expected)[~nan]), (
            "sign of zero differs"
        )


def assert_bitwise(y: Tensor, ref: Tensor, signed_zero: bool = True) -> None:
    """Bit-for-bit equality (so -0.0 != +0.0 when signed_zero), any NaN matching any NaN."""
    assert y.dtype == ref.dtype and y.shape == ref.shape
    nan = torch.isnan(y) & torch.isnan(ref)
    if signed_zero:
        same = (
            y.contiguous().view(INT_VIEW[y.dtype]) == ref.contiguous().view(INT_VIEW[y.dtype])
        ) | nan
    else:
        same = (y == ref) | nan
    if not bool(same.all()):
        raise AssertionError(
            f"mismatch: got {y[~same][:5].tolist()}, want {ref[~same][:5].tolist()}"
        )


# ---- references (Brevitas's formulas in plain torch) ----------------------------------------------


def ref_round_to_zero(u: Tensor) -> Tensor:
    return torch.sign(u) * torch.floor(torch.abs(u))


def ref_dpu_round(u: Tensor) -> Tensor:
    """Negative x.5 goes up (ceil), everything else half to even."""
    return torch.where((u < 0.0) & (u - torch.floor(u) == 0.5), torch.ceil(u), torch.round(u))


ROUND: Dict[str, Callable[[Tensor], Tensor]] = {
    "round": torch.round,
    "ceil": torch.ceil,
    "floor": torch.floor,
    "round_to_zero": ref_round_to_zero,
    "dpu": ref_dpu_round,
}
# int_quant's rounding modes (ROUND's keys), in the order the suites parametrize them.
MODES = list(ROUND)


def ref_binary_sign(x: Tensor) -> Tensor:
    """+1 for x >= 0 (including -0.0), -1 for x < 0; NaN stays NaN (the ops' contract)."""
    s = torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))
    return torch.where(torch.isnan(x), x, s)


def ref_ternary_sign(x: Tensor) -> Tensor:
    """torch.sign (sign(+-0) = +0); NaN stays NaN (torch.sign(NaN) is 0)."""
    return torch.where(torch.isnan(x), x, torch.sign(x))


def ref_sign_ste(sign: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
    """sign(x) straight-through: its value, with the identity gradient when x needs one."""
    return sign(x).detach() + (x - x.detach()) if x.requires_grad else sign(x)


def ref_tensor_clamp(x: Tensor, min_val: Tensor, max_val: Tensor) -> Tensor:
    """Brevitas's tensor_clamp: first > max, then < min (so min wins where min > max)."""
    out = torch.where(x > max_val, max_val.type_as(x), x)
    return torch.where(out < min_val, min_val.type_as(out), out)


def ref_max_int(signed: bool, narrow_range: bool, bit_width: Tensor) -> Tensor:
    if not signed and not narrow_range:
        return (2**bit_width) - 1
    if not signed and narrow_range:
        return (2**bit_width) - 2
    return (2 ** (bit_width - 1)) - 1


def ref_min_int(signed: bool, narrow_range: bool, bit_width: Tensor) -> Tensor:
    if signed and narrow_range:
        return -(2 ** (bit_width - 1)) + 1
    if signed and not narrow_range:
        return -(2 ** (bit_width - 1))
    return 0 * bit_width


class _StraightThrough(torch.autograd.Function):
    """y = f(u) forward, identity backward: the definition of an STE. (The detach trick
    u + (f(u) - u).detach() gives NaN at u = +-inf, where inf - inf appears.)"""

    @staticmethod
    def forward(ctx, u: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
        return fn(u)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad, None


def ref_int_quant(
    x: Tensor,
    scale: Tensor,
    zero_point: Tensor,
    bit_width: Tensor,
    signed: bool,
    narrow_range: bool,
    rounding_mode: str = "round",
    clamp_ste: bool = False,
) -> Tensor:
    """The unfused IntQuant composition: round(x / s + z) (STE), clamp to [min_int, max_int], (c - z) * s."""
    rnd = ROUND[rounding_mode.lower()]
    t = x / scale
    u = t + zero_point
    r = _StraightThrough.apply(u, rnd)
    hi = ref_max_int(signed, narrow_range, bit_width)
    lo = ref_min_int(signed, narrow_range, bit_width)
    if clamp_ste:
        c = _StraightThrough.apply(r, lambda v: ref_tensor_clamp(v, lo.detach(), hi.detach()))
    else:
        c = ref_tensor_clamp(r, lo, hi)
    return (c - zero_point) * scale


# ---- inputs of the fused quantizers ----------------------------------------------------------------


def rand(
    shape: Sequence[int], dtype: torch.dtype = torch.float32, seed: int = 0, spread: float = 1.0
) -> Tensor:
    """Seeded normal values, drawn in float64 so every dtype sees the same numbers."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * spread).to(dtype)


def rand_pos(shape: Sequence[int], dtype: torch.dtype = torch.float32, seed: int = 1) -> Tensor:
    """Seeded values in [0.1, 1): valid scales."""
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float64) * 0.9 + 0.1).to(dtype)


# (x shape, scale shape) for the scale granularities Brevitas uses.
SCALE_SHAPES = {
    "per_tensor_0d": ((4, 3, 5), ()),
    "per_tensor_1": ((4, 3, 5), (1,)),
    "dim0": ((4, 3, 2, 2), (4, 1, 1, 1)),
    "dim1": ((2, 4, 3, 3), (1, 4, 1, 1)),
    "last": ((6, 7), (1, 7)),
    "per_group": ((3, 4, 5), (3, 4, 1)),
}


def quant_layouts() -> Dict[str, Tensor]:
    """Non-contiguous inputs (4-d) for the quantizers."""
    base = rand((4, 6, 5, 3))
    return {
        "channels_last": base.contiguous(memory_format=torch.channels_last),
        "permuted": base.permute(2, 0, 3, 1),
        "transposed": base.transpose(0, 1),
        "sliced": base[:, 1:5:2, :, 1:],
        "expanded": rand((1, 6, 5, 1)).expand(4, 6, 5, 3),
    }


def param_shape(x: Tensor, param_dim: Optional[int]) -> Sequence[int]:
    """Shape of a parameter over x's dim param_dim (per tensor, [1], when None)."""
    return (
        (1,) if param_dim is None else [x.shape[d] if d == param_dim else 1 for d in range(x.dim())]
    )


def grads(
    fn: Callable[..., Tensor], leaves: Sequence[Tensor], g: Tensor, which: Sequence[bool]
) -> Tuple[Tensor, List[Optional[Tensor]]]:
    """fn(*leaves) and the gradients of g through it, on fresh copies of the leaves; which says
    which copies require grad (the others get None)."""
    copies = [t.detach().clone().requires_grad_(bool(w)) for t, w in zip(leaves, which)]
    y = fn(*copies)
    y.backward(g)
    return y.detach(), [t.grad for t in copies]


# ---- layouts -----------------------------------------------------------------------------------------


def meta_like(t: Tensor) -> Tensor:
    """A meta tensor with t's sizes, strides and dtype, to run an op's Meta kernel."""
    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")


def randn_reversed_layout(x: Tensor) -> Tensor:
    """Random values of x's shape stored with reversed dims: a non-contiguous upstream gradient
    (draws from the global generator)."""
    return torch.randn(x.shape[::-1]).permute(*reversed(range(x.dim())))


def assert_layout_kept(fn: Callable[[Tensor], Tensor], x: Tensor, expected: Tensor) -> None:
    """fn(x) equals expected with the strides empty_like(x) gives, and fn's Meta kernel agrees."""
    out = fn(x)
    assert_same(out, expected)
    assert out.stride() == torch.empty_like(x).stride()
    xm = meta_like(x)
    om = fn(xm)
    assert om.device.type == "meta" and om.shape == x.shape and om.dtype == x.dtype
    assert om.stride() == torch.empty_like(xm).stride()


# ---- opcheck -----------------------------------------------------------------------------------------

# The internal backward ops are deliberately not differentiable (autogradNotImplementedFallback), so
# with inputs requiring grad opcheck must skip test_aot_dispatch_dynamic, which differentiates them.
NO_AOT = ("test_schema", "test_autograd_registration", "test_faketensor")
MASKS2 = [[True, False], [False, True], [True, True], [False, False]]
# output_mask values for the int_quant-family backward ops (x, scale, zero point, bit width).
MASKS4 = [
    [True, False, False, False],
    [False, True, False, False],
    [False, False, True, False],
    [False, False, False, True],
    [True, True, True, True],
    [False, True, True, True],
    [True, True, False, False],
    [False, False, False, False],
]


def backward_op_utils(requires_grad: bool) -> Tuple[str, ...]:
    return NO_AOT if requires_grad else NO_AOT + ("test_aot_dispatch_dynamic",)


def quant_opcheck_inputs(noncontig: bool, requires_grad: bool) -> Tuple[Tensor, Tensor]:
    """x (optionally a strided slice) and a per-channel scale for opcheck of the quantizers."""
    x = rand((4, 12, 5))[:, ::2, :] if noncontig else rand((4, 6, 5))
    s = rand_pos((1, 6, 1))
    if requires_grad:
        x, s = x.clone().requires_grad_(), s.clone().requires_grad_()
    return x, s


# ---- minifloat formats, enumerated from their bit fields ----


def format_values(e: int, m: int, bias: int, max_value: float) -> torch.Tensor:
    """Every non-negative value of the format up to max_value, from its bit fields: subnormals
    (exponent field 0) M / 2^m * 2^(1 - bias), normals (1 + M / 2^m) * 2^(E - bias)."""
    values = []
    for exponent_field in range(2**e):
        for mantissa_field in range(2**m):
            if exponent_field == 0:
                v = mantissa_field / 2**m * 2.0 ** (1 - bias)
            else:
                v = (1 + mantissa_field / 2**m) * 2.0 ** (exponent_field - bias)
            if v <= max_value:
                values.append((v, mantissa_field))
    return values


def nearest(u: float, grid) -> float:
    """The format value nearest to u, ties to the even mantissa field, saturating at the top."""
    a = abs(u)
    best = min(grid, key=lambda vm: (abs(vm[0] - a), vm[1] % 2))
    return math.copysign(best[0], u)


def brevitas_format(state: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """A state_dict as Brevitas saves it: the same entries and per-module metadata (torch's
    ``_metadata``, for the root module at least), without brevitas_cpp's own metadata entries
    (step counters, warm-up state, the quantizer record)."""
    metadata = getattr(state, "_metadata", None) or {"": {"version": 1}}
    copy = OrderedDictWithMetadata(state)
    copy._metadata = {
        path: {key: value for key, value in entry.items() if key != "brevitas_cpp"}
        for path, entry in metadata.items()
    }
    return copy


class OrderedDictWithMetadata(dict):
    """A plain dict that can carry torch's ``_metadata`` attribute, as an OrderedDict does."""


# QuantMultiheadAttention's activation quantizers enabled by default, by keyword prefix.
MHA_PREFIXES = (
    "in_proj_input_",
    "out_proj_input_",
    "attn_output_weights_",
    "q_scaled_",
    "k_transposed_",
    "v_",
)


def short_warmup(*prefixes: str) -> dict:
    """Two statistics steps for each activation quantizer (keywords of a layer whose quantizers
    have these prefixes), so a few batches reach the learned phase (the default is 300)."""
    return {f"{prefix}collect_stats_steps": 2 for prefix in prefixes}
