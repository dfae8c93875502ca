"""The CUDA kernels of every op, on a GPU (skipped without one).

References: the forward of each op is compared bit for bit with its unfused composition
(helpers.ref_*, plain torch evaluated on the CPU) and with the CPU kernel; x's gradient bit for
bit with the CPU kernel's (itself checked against autograd through the composition in the
CPU suites). Parameter gradients are sums in another order than on the CPU: compared at the
precision of the dtype, and required to give the same bits on every run."""

from typing import Callable, Dict, List, Sequence, Tuple

import pytest
import torch
from helpers import (
    DTYPE_IDS,
    DTYPES,
    MODES,
    ROUND,
    assert_bitwise,
    rand,
    rand_pos,
    ref_binary_sign,
    ref_int_quant,
    ref_tensor_clamp,
    ref_ternary_sign,
)

import brevitas_cpp

OPS = torch.ops.brevitas_cpp
HAS_CUDA = torch.cuda.is_available() and brevitas_cpp.build_info()["cuda"]
pytestmark = pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU and a CUDA build of brevitas_cpp")
CUDA = "cuda"

# (x shape, parameter shape, memory layout of x)
LAYOUTS: Dict[str, Tuple[Tuple[int, ...], Tuple[int, ...], str]] = {
    "per_tensor": ((4, 6, 5, 3), (), "contiguous"),
    "per_tensor_1": ((4, 6, 5, 3), (1,), "contiguous"),
    "dim0": ((8, 6, 3, 3), (8, 1, 1, 1), "contiguous"),
    "dim1": ((4, 6, 5, 3), (1, 6, 1, 1), "contiguous"),
    "dim1_channels_last": ((4, 6, 5, 3), (1, 6, 1, 1), "channels_last"),
    "last": ((12, 7), (1, 7), "contiguous"),
    "per_group": ((3, 4, 16), (3, 4, 1), "contiguous"),
    "sliced": ((4, 12, 5, 3), (1, 6, 1, 1), "sliced"),
    "large": ((64, 33, 17, 9), (1, 33, 1, 1), "contiguous"),
}


def make_x(shape, layout: str, dtype, seed=0, spread=3.0) -> torch.Tensor:
    x = rand(shape, dtype=torch.float64, seed=seed, spread=spread)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "sliced":
        x = x[:, ::2]
    return x.to(dtype)


def layout_case(name: str, dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    shape, pshape, layout = LAYOUTS[name]
    x = make_x(shape, layout, dtype)
    s = rand_pos(pshape, dtype=dtype, seed=3) * 0.5
    return x, s


def to_cuda(args: Sequence) -> List:
    return [a.to(CUDA) if isinstance(a, torch.Tensor) else a for a in args]


def leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(t.is_floating_point())


def grad_tolerance(dtype) -> Dict[str, float]:
    return {
        torch.float64: dict(rtol=1e-10, atol=1e-10),
        torch.float32: dict(rtol=2e-5, atol=1e-5),
        torch.float16: dict(rtol=2e-2, atol=2e-2),
        torch.bfloat16: dict(rtol=5e-2, atol=5e-2),
    }[dtype]


def run_with_grads(fn: Callable, args: Sequence, wants: Sequence[bool], g: torch.Tensor):
    """fn(*args) and the gradients of g through it for the tensor args flagged in wants."""
    leaves = [leaf(a) if w else a for a, w in zip(args, wants)]
    y = fn(*leaves)
    y.backward(g)
    return y.detach(), [a.grad if w else None for a, w in zip(leaves, wants)]


def compare_cpu_cuda(
    fn: Callable, args: Sequence, wants: Sequence[bool], bitwise_grads: Sequence[bool]
):
    """Runs fn with gradients on the CPU and on the GPU; returns the CUDA results."""
    y_cpu = fn(*args)
    g = rand(tuple(y_cpu.shape), dtype=torch.float64, seed=11).to(y_cpu.dtype)
    y_cpu, g_cpu = run_with_grads(fn, args, wants, g)
    y_gpu, g_gpu = run_with_grads(fn, to_cuda(args), wants, g.to(CUDA))
    assert y_gpu.device.type == CUDA
    assert y_gpu.stride() == y_cpu.stride(), "output layout differs from the CPU kernel's"
    assert_bitwise(y_gpu.cpu(), y_cpu)
    for a, b, bitwise in zip(g_gpu, g_cpu, bitwise_grads):
        if b is None:
            continue
        assert a is not None and a.device.type == CUDA and a.shape == b.shape and a.dtype == b.dtype
        if bitwise:
            assert_bitwise(a.cpu(), b)
        else:
            torch.testing.assert_close(a.cpu(), b, **grad_tolerance(b.dtype))
    return y_gpu, g_gpu


# ---- elementwise STE ops --------------------------------------------------------------------------

UNARY = {
    "round_ste": ROUND["round"],
    "ceil_ste": ROUND["ceil"],
    "floor_ste": ROUND["floor"],
    "round_to_zero_ste": ROUND["round_to_zero"],
    "dpu_round_ste": ROUND["dpu"],
    "binary_sign_ste": ref_binary_sign,
    "ternary_sign_ste": ref_ternary_sign,
    "abs_binary_sign_grad": torch.abs,
}


def special_values(dtype) -> torch.Tensor:
    """Ties, near-ties, signed zeros, infinities, NaN and random values."""
    v = [k + 0.5 for k in range(-6, 6)] + [k + 0.25 for k in range(-4, 4)] + [0.0, -0.0, 1e6, -1e6]
    v += [float("inf"), float("-inf"), float("nan")]
    r = rand((4, 97), dtype=torch.float64, seed=5, spread=4.0).flatten().tolist()
    return torch.tensor(v + r, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_match_composition_and_cpu(name, dtype):
    x = special_values(dtype)
    op = getattr(OPS, name)
    y = op(x.to(CUDA)).cpu()
    assert_bitwise(y, UNARY[name](x))
    assert_bitwise(y, op(x))
    # x's gradient (straight through, or grad * binary_sign(x)) through the autograd kernel
    finite = x[torch.isfinite(x)]
    compare_cpu_cuda(op, [finite], [True], [True])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
def test_unary_ops_keep_layout(dtype, layout):
    x = make_x((4, 6, 5, 3), layout, dtype)
    for name in UNARY:
        compare_cpu_cuda(getattr(OPS, name), [x], [True], [True])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_tensor_clamp_ste(layout, dtype):
    x, s = layout_case(layout, dtype)
    lo, hi = -s, s * 2.0
    y, _ = compare_cpu_cuda(OPS.tensor_clamp_ste, [x, lo, hi], [True, False, False], [True])
    assert_bitwise(y.cpu(), ref_tensor_clamp(x, lo, hi))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_scalar_clamps(dtype):
    x = special_values(dtype)
    for name, args, ref in [
        ("scalar_clamp_ste", (-1.3, 2.7), lambda v: torch.clamp(v, -1.3, 2.7)),
        ("scalar_clamp_min_ste", (0.3,), lambda v: torch.clamp_min(v, 0.3)),
        (
            "scalar_signed_clamp_min_ste",
            (0.3,),
            lambda v: torch.where(v >= 0, torch.clamp_min(v.abs(), 0.3), torch.clamp_max(v, -0.3)),
        ),
    ]:
        op = getattr(OPS, name)
        y = op(x.to(CUDA), *args).cpu()
        assert_bitwise(y, op(x, *args))
        assert_bitwise(y, ref(x), signed_zero=False)
        compare_cpu_cuda(lambda v: op(v, *args), [x[torch.isfinite(x)]], [True], [True])


# ---- int_quant ------------------------------------------------------------------------------------

SIGNED_NARROW = [(True, False), (True, True), (False, False), (False, True)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("signed,narrow", SIGNED_NARROW)
@pytest.mark.parametrize("bits", [1, 2, 4, 8, 16])
def test_int_quant_forward_matches_composition(dtype, mode, signed, narrow, bits):
    x, s = layout_case("dim1", dtype)
    x = x * 2.0 ** max(0, bits - 4)  # reach the clamp at every bit width
    z = torch.zeros_like(s) if signed else torch.full_like(s, 3.0)
    b = torch.tensor(float(bits))
    y = OPS.int_quant(*to_cuda([x, s, z, b, signed, narrow, mode, False])).cpu()
    assert_bitwise(y, ref_int_quant(x, s, z, b, signed, narrow, mode))
    assert_bitwise(y, OPS.int_quant(x, s, z, b, signed, narrow, mode, False))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("clamp_ste", [False, True])
def test_int_quant_grads_match_cpu(layout, dtype, clamp_ste):
    x, s = layout_case(layout, dtype)
    z = (rand_pos(s.shape, dtype=torch.float64, seed=4) * 3.0).round().to(dtype)
    b = torch.tensor(4.0, dtype=dtype)

    def fn(x_, s_, z_, b_):
        return OPS.int_quant(x_, s_, z_, b_, True, False, "round", clamp_ste)

    compare_cpu_cuda(
        fn, [x, s, z, b], [True, True, True, not clamp_ste], [True, False, False, False]
    )
    # x's gradient alone goes through the saved mask (no parameter needs x)
    compare_cpu_cuda(fn, [x, s, z, b], [True, False, False, False], [True])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_int_quant_backward_op_variants(dtype):
    """_int_quant_backward called directly: from the mask, straight through, and from x."""
    x, s = layout_case("dim1", dtype)
    z, b = torch.zeros_like(s), torch.tensor(3.0)
    g = rand(tuple(x.shape), dtype=torch.float64, seed=9).to(dtype)
    _, mask = OPS._int_quant_with_mask(x, s, z, b, True, False, "round")
    for xa, ma, clamp_ste, out_mask in [
        (None, mask, False, [True, False, False, False]),
        (None, None, True, [True, False, False, False]),
        (x, None, False, [True, True, True, True]),
        (x, None, False, [False, True, False, True]),
        (x, None, True, [True, True, True, False]),
    ]:
        args = [g, xa, ma, s, z, b, True, False, "round", clamp_ste, out_mask]
        want = OPS._int_quant_backward(*args)
        got = OPS._int_quant_backward(*to_cuda(args))
        for i, (a, w) in enumerate(zip(got, want)):
            assert (a is None) == (w is None), (i, out_mask)
            if w is None:
                continue
            if i == 0:
                assert_bitwise(a.cpu(), w)
            else:
                torch.testing.assert_close(a.cpu(), w, **grad_tolerance(dtype))
    y_mask = OPS._int_quant_with_mask(*to_cuda([x, s, z, b, True, False, "round"]))
    assert torch.equal(y_mask[1].cpu(), mask)


def test_int_quant_bit_width_on_gpu_in_any_dtype():
    x, s = layout_case("per_tensor", torch.float32)
    z = torch.zeros(())
    for bdtype in [
        torch.float32,
        torch.float64,
        torch.float16,
        torch.int64,
        torch.int32,
        torch.uint8,
    ]:
        b = torch.tensor(5, dtype=bdtype)
        y = OPS.int_quant(*to_cuda([x, s, z, b, True, True, "round", False])).cpu()
        assert_bitwise(y, OPS.int_quant(x, s, z, b, True, True, "round", False))


def test_parameter_gradients_are_deterministic():
    x, s = layout_case("large", torch.float32)
    x, s = x.to(CUDA), s.to(CUDA)
    z, b = torch.zeros_like(s), torch.tensor(4.0, device=CUDA)
    g = torch.randn_like(x)
    runs = []
    for _ in range(3):
        args = [leaf(x), leaf(s), leaf(z), leaf(b)]
        OPS.int_quant(*args, True, False, "round", False).backward(g)
        sb = [leaf(x), leaf(s)]
        OPS.ternary_quant(*sb, 0.5).backward(g)
        runs.append([a.grad.clone() for a in args + sb])
    for other in runs[1:]:
        for a, b_ in zip(runs[0], other):
            assert_bitwise(a, b_)


# ---- binary and ternary ------------------------------------------------------------------------------

SCALED = {
    "binary_quant": (lambda x, s: OPS.binary_quant(x, s), lambda x, s: ref_binary_sign(x) * s),
    "clamped_binary_quant": (
        lambda x, s: OPS.clamped_binary_quant(x, s),
        lambda x, s: ref_binary_sign(ref_tensor_clamp(x, -s, s)) * s,
    ),
    "ternary_quant": (
        lambda x, s: OPS.ternary_quant(x, s, 0.5),
        lambda x, s: (x.abs() > s * 0.5).to(x.dtype) * ref_ternary_sign(x) * s,
    ),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(SCALED))
def test_scaled_quant_ops(name, layout, dtype):
    fn, ref = SCALED[name]
    x, s = layout_case(layout, dtype)
    y, _ = compare_cpu_cuda(fn, [x, s], [True, True], [True, False])
    assert_bitwise(y.cpu(), ref(x, s))
    compare_cpu_cuda(fn, [x, s], [True, False], [True])


# ---- what the CPU kernels raise on ------------------------------------------------------------------


def test_tensors_on_different_devices_are_rejected_by_name():
    x, s = layout_case("dim1", torch.float32)
    z, b = torch.zeros_like(s), torch.tensor(8.0)
    xc = x.to(CUDA)
    with pytest.raises(RuntimeError, match="scale is on cpu but x is on cuda"):
        OPS.int_quant(xc, s, z.to(CUDA), b.to(CUDA), True, False, "round", False)
    with pytest.raises(RuntimeError, match="bit_width is on cpu but x is on cuda"):
        OPS.int_quant(xc, s.to(CUDA), z.to(CUDA), b, True, False, "round", False)
    with pytest.raises(RuntimeError, match="scale"):
        OPS.binary_quant(xc, s)
    with pytest.raises(RuntimeError, match="min_val"):
        OPS.tensor_clamp_ste(xc, s, s.to(CUDA))


def test_invalid_values_give_nan_on_the_gpu():
    """The CPU kernels raise on them; reading them on the GPU would synchronise every call."""
    x = torch.linspace(-2, 2, 16, device=CUDA)
    s = torch.tensor([1.0, 0.0, -1.0, float("inf")], device=CUDA).repeat_interleave(4).reshape(16)
    z, b = torch.zeros(16, device=CUDA), torch.tensor(4.0, device=CUDA)
    y = OPS.int_quant(x, s, z, b, True, False, "round", False)
    assert torch.isfinite(y[:4]).all() and torch.isnan(y[4:]).all()
    for bad_bits in [0.0, 2.5, 33.0, float("nan")]:
        y = OPS.int_quant(
            x,
            s[:4].repeat(4).abs().clamp_min(1),
            z,
            torch.tensor(bad_bits, device=CUDA),
            True,
            False,
            "round",
            False,
        )
        assert torch.isnan(y).all(), bad_bits
    for name in SCALED:
        y = SCALED[name][0](x, s)
        assert torch.isfinite(y[:4]).all() and torch.isnan(y[4:]).all(), name


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_subnormal_scales_on_the_gpu(dtype):
    """Where the CPU kernels raise on a subnormal scale (int_quant, float_quant and their
    backward ops), the GPU computes with NaN for it: every output of that channel that reads the
    scale is NaN, the normal channel's are the CPU's. The binary and ternary quantizers take it,
    exactly (sign(x) * s), as on the CPU."""
    tiny = torch.finfo(dtype).tiny
    x = make_x((2, 6), "contiguous", dtype)
    s = torch.tensor([[0.5], [tiny / 4]], dtype=dtype)
    z, b = torch.zeros((), dtype=dtype), torch.tensor(8.0)
    xc, sc, zc, bc = to_cuda([x, s, z, b])
    g = torch.ones_like(xc)
    y = OPS.int_quant(xc, sc, zc, bc, True, False, "round", False)
    want = OPS.int_quant(x, s[:1], z, b, True, False, "round", False)[0]
    assert_bitwise(y[0].cpu(), want)
    assert torch.isnan(y[1]).all()
    gx, gs, gz, _ = OPS._int_quant_backward(
        g, xc, None, sc, zc, bc, True, False, "round", False, [True, True, True, True]
    )
    assert torch.isnan(gx[1]).all() and torch.isnan(gs[1]).all() and torch.isnan(gz)
    assert torch.isfinite(gx[0]).all() and torch.isfinite(gs[0]).all()
    fmt = (4, 3, 7, 448.0, True, True, False, False, "round")
    y = OPS.float_quant(xc, sc, *fmt)
    assert torch.isfinite(y[0]).all() and torch.isnan(y[1]).all()
    gx, gs = OPS._float_quant_backward(g, xc, sc, *fmt, [True, True])
    assert torch.isnan(gx[1]).all() and torch.isnan(gs[1]).all() and torch.isfinite(gs[0]).all()
    for fn, ref in SCALED.values():
        assert_bitwise(fn(xc, sc).cpu(), ref(x, s))


def test_bad_input_table_raises_the_cpu_messages_on_the_gpu():
    """Every case of the CPU table, with its tensors made on the GPU, raises the CPU kernel's
    message there; the value checks (scale, zero point, bit width: values the CPU kernels read
    and the GPU ones never copy to the host) give NaN instead. Every wrong case is named."""
    from bad_input_cases import cases

    value_checks = (
        "must be positive and finite",
        "normal positive finite",
        "bit_width must be an integer",
        "zero-point-nan",
    )
    # abs_max_int_quant's scale and bit width reach int_quant's CUDA kernel as device values;
    # float_quant's scale is read on the device too.
    value_cases = {
        "abs_max_int_quant-bit-width-value",
        "abs_max_int_quant-zero-w",
        "float_quant-scale-zero",
    }
    raised = gave_nan = 0
    wrong = []
    for case in cases():
        if case.name.endswith("-device") or case.name.startswith("_all_reduce"):
            continue  # device mix-ups: test_tensors_on_different_devices...; not a kernel of ours
        joined = " ".join(case.fragments)
        is_value_check = case.name in value_cases or any(
            v in case.name or v in joined for v in value_checks
        )
        with torch.device(CUDA):
            try:
                y = case.call()
            except RuntimeError as exc:
                missing = [f for f in case.fragments if f not in str(exc)]
                if missing:
                    wrong.append(f"{case.name}: message lacks {missing}: {exc}")
                raised += 1
                continue
        y = y[0] if isinstance(y, (tuple, list)) else y
        if not is_value_check:
            wrong.append(f"{case.name}: did not raise")
        elif not (y.device.type == CUDA and torch.isnan(y).all()):
            wrong.append(f"{case.name}: neither raised nor gave NaN everywhere")
        else:
            gave_nan += 1
    assert not wrong, "\n".join(wrong)
    assert raised >= 35 and gave_nan >= 10


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_empty_inputs(dtype):
    x = torch.empty(0, 3, device=CUDA, dtype=dtype)
    s = torch.ones(1, 3, device=CUDA, dtype=dtype)
    b = torch.tensor(8.0, device=CUDA)
    for y in [
        OPS.round_ste(x),
        OPS.int_quant(x, s, torch.zeros_like(s), b, True, False, "round", False),
        OPS.binary_quant(x, s),
        OPS.ternary_quant(x, s, 0.5),
        OPS.tensor_clamp_ste(x, -s, s),
    ]:
        assert y.shape == (0, 3) and y.device.type == CUDA
    xs, ss = leaf(x), leaf(s)
    OPS.int_quant(xs, ss, torch.zeros_like(s), b, True, False, "round", False).sum().backward()
    assert torch.equal(ss.grad, torch.zeros_like(s))


# ---- opcheck and gradcheck on the GPU --------------------------------------------------------------


def opcheck_cases() -> List[Tuple[str, Callable, List]]:
    x = rand((4, 6, 5), dtype=torch.float32).to(CUDA)
    s = rand_pos((1, 6, 1)).to(CUDA)
    z, b = torch.zeros_like(s), torch.tensor(4.0, device=CUDA)
    g = torch.randn_like(x)
    cases = [(n, getattr(OPS, n), [x]) for n in UNARY]
    cases += [
        ("tensor_clamp_ste", OPS.tensor_clamp_ste, [x, -s, s]),
        ("scalar_clamp_ste", OPS.scalar_clamp_ste, [x, -0.5, 0.5]),
        ("scalar_clamp_min_ste", OPS.scalar_clamp_min_ste, [x, 0.1]),
        ("scalar_signed_clamp_min_ste", OPS.scalar_signed_clamp_min_ste, [x, 0.1]),
        ("int_quant", OPS.int_quant, [x, s, z, b, True, False, "round", False]),
        ("_int_quant_with_mask", OPS._int_quant_with_mask, [x, s, z, b, True, False, "round"]),
        (
            "_int_quant_backward",
            OPS._int_quant_backward,
            [g, x, None, s, z, b, True, False, "round", False, [True, True, True, True]],
        ),
        ("binary_quant", OPS.binary_quant, [x, s]),
        ("clamped_binary_quant", OPS.clamped_binary_quant, [x, s]),
        ("ternary_quant", OPS.ternary_quant, [x, s, 0.5]),
        ("_binary_quant_backward", OPS._binary_quant_backward, [g, x, s, [True, True]]),
        (
            "_clamped_binary_quant_backward",
            OPS._clamped_binary_quant_backward,
            [g, x, s, [True, True]],
        ),
        ("_ternary_quant_backward", OPS._ternary_quant_backward, [g, x, s, 0.5, [True, True]]),
        ("_abs_binary_sign_grad_backward", OPS._abs_binary_sign_grad_backward, [g, x]),
        (
            "quantization_int8",
            OPS.quantization_int8,
            [
                x,
                torch.full((6,), 0.5, device=CUDA),
                torch.ones((), dtype=torch.int64, device=CUDA),
                8,
                False,
                1,
                0.1,
                0,
                "clip",
                "minmax",
                True,
            ],
        ),
        (
            "_quantization_int8_backward",
            OPS._quantization_int8_backward,
            [g, x, torch.full((1, 6, 1), 0.5, device=CUDA)],
        ),
        ("float_quant", OPS.float_quant, [x, s, 4, 3, 7, 448.0]),
        (
            "_float_quant_backward",
            OPS._float_quant_backward,
            [g, x, s, 4, 3, 7, 448.0, True, True, False, False, "round", [True, True]],
        ),
    ]
    return cases


@pytest.mark.parametrize("index", range(26))
def test_opcheck_on_gpu(index):
    cases = opcheck_cases()
    name, op, args = cases[index]
    utils = (
        "test_schema",
        "test_autograd_registration",
        "test_faketensor",
        "test_aot_dispatch_dynamic",
    )
    if name.startswith("_") and name != "_quantization_int8_backward":  # that one is differentiable
        utils = utils[:3]
    torch.library.opcheck(op, args, test_utils=utils)


def test_every_op_has_a_cuda_kernel():
    """Its own CUDA kernel, not the composite one (which would also answer for CUDA)."""
    names = {n for n, _, _ in opcheck_cases()}
    for name in names:
        registered = torch._C._dispatch_dump(f"brevitas_cpp::{name}")
        assert "\nCUDA:" in registered, (name, registered)


def test_gradcheck_float64_on_gpu():
    x = (rand((3, 4, 5), dtype=torch.float64) * 3.0).to(CUDA)
    s = (rand_pos((1, 4, 1), dtype=torch.float64) + 0.3).to(CUDA)
    z = torch.zeros_like(s)
    b = torch.tensor(4.0, dtype=torch.float64, device=CUDA)
    # Where every x is clamped, int_quant is (max_int - z) * s or (min_int - z) * s: smooth in s
    # and z, and its straight-through gradients are the true ones.
    big = x.sign() * 100.0
    assert torch.autograd.gradcheck(
        lambda s_, z_: OPS.int_quant(big, s_, z_, b, True, False, "round", False),
        (leaf(s), leaf(z)),
        eps=1e-7,
        atol=1e-5,
    )
    assert torch.autograd.gradcheck(lambda s_: OPS.binary_quant(x, s_), (leaf(s),), eps=1e-7)
    assert torch.autograd.gradcheck(
        lambda s_: OPS.ternary_quant(x, s_, 0.5), (leaf(s),), eps=1e-7, atol=1e-5
    )


# ---- quantization_int8 ----------------------------------------------------------------------------

# (is_weight, channel_axis, quant_mode, layout of x)
INT8_CASES = {
    "act_tensor": (False, None, "minmax", "per_tensor"),
    "act_dim1_channels_last": (False, 1, "minmax", "dim1_channels_last"),
    "act_last_power2": (False, -1, "power2", "last"),
    "w_tensor_power2": (True, None, "power2", "per_tensor"),
    "w_dim0": (True, 0, "minmax", "dim0"),
    "w_dim1_sliced": (True, 1, "minmax", "sliced"),
    "act_large": (False, 1, "minmax", "large"),
    "w_large": (True, None, "minmax", "large"),
}


def int8_state(x, axis, device):
    shape = () if axis is None else (x.shape[axis],)
    return torch.zeros(shape, device=device), torch.zeros((), dtype=torch.int64, device=device)


def int8_x(layout: str, dtype, seed: int, device) -> torch.Tensor:
    """x of LAYOUTS[layout], made on device in its dtype before the layout is applied (so that a
    sliced x stays a strided view), channel 0 of dim 1 zeroed for even seeds; a leaf."""
    shape, _, memory = LAYOUTS[layout]
    x = rand(shape, dtype=torch.float64, seed=seed, spread=1.0 + seed).to(dtype).to(device)
    if seed % 2 == 0:
        x[:, 0] = 0.0
    if memory == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif memory == "sliced":
        x = x[:, ::2]
    return x.detach().requires_grad_()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", sorted(INT8_CASES))
@pytest.mark.parametrize("grad_mode", ["ste", "clip"])
def test_quantization_int8_matches_cpu(case, dtype, grad_mode):
    """A sequence (delay phase, EMA, zero channels, eval) on both devices from the same state:
    outputs, scale, clip_threshold, both buffers and x's gradient bit for bit (max|x| is exact
    in any order, the EMA is the same float32 arithmetic)."""
    is_weight, axis, quant_mode, layout = INT8_CASES[case]
    x0 = int8_x(layout, dtype, 0, "cpu")
    cpu_state, gpu_state = int8_state(x0, axis, "cpu"), int8_state(x0, axis, CUDA)
    for step in range(6):
        xc, xg = int8_x(layout, dtype, step, "cpu"), int8_x(layout, dtype, step, CUDA)
        assert xg.stride() == xc.stride()
        training = step != 4
        args = (8, is_weight, axis, 0.1, 1, grad_mode, quant_mode, training)
        want = OPS.quantization_int8(xc, *cpu_state, *args)
        got = OPS.quantization_int8(xg, *gpu_state, *args)
        for a, w in zip(got, want):
            assert a.device.type == CUDA
            assert_bitwise(a.detach().cpu(), w.detach())
        assert got[0].stride() == want[0].stride()
        assert_bitwise(gpu_state[0].cpu(), cpu_state[0])
        assert torch.equal(gpu_state[1].cpu(), cpu_state[1])
        g = rand(tuple(xc.shape), dtype=torch.float64, seed=20 + step).to(dtype)
        want[0].backward(g)
        got[0].backward(g.to(CUDA))
        assert_bitwise(xg.grad.cpu(), xc.grad)
    assert cpu_state[1].item() == 5


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_quantization_int8_backward_op_matches_cpu(dtype):
    x = special_values(dtype).reshape(1, -1)
    g = rand(tuple(x.shape), dtype=torch.float64, seed=3).to(dtype)
    for clip in [torch.tensor(1.5), torch.tensor(float("inf")), torch.tensor(0.0)]:
        clip = clip.to(dtype)
        want = OPS._quantization_int8_backward(g, x, clip)
        got = OPS._quantization_int8_backward(*to_cuda([g, x, clip]))
        assert_bitwise(got.cpu(), want)
        assert_bitwise(want, torch.where(x.abs() > clip, torch.zeros_like(g), g))
    xs, _ = layout_case("dim1_channels_last", dtype)
    gs = rand(tuple(xs.shape), dtype=torch.float64, seed=4).to(dtype)
    clip = torch.full((1, 6, 1, 1), 1.0, dtype=dtype)
    want = OPS._quantization_int8_backward(gs, xs, clip)
    got = OPS._quantization_int8_backward(*to_cuda([gs, xs, clip]))
    assert_bitwise(got.cpu(), want)


def test_quantization_int8_eval_and_empty_on_gpu():
    th = torch.tensor([0.0, 1.0, 2.0], device=CUDA)
    it = torch.ones((), dtype=torch.int64, device=CUDA)
    x = torch.tensor([[float("nan"), 1.0, -5.0]] * 3, device=CUDA).t().contiguous()
    y, s, c = OPS.quantization_int8(x, th, it, 8, False, 0, 0.01, 0, "ste", "minmax", False)
    want = OPS.quantization_int8(
        x.cpu(), th.cpu(), it.cpu(), 8, False, 0, 0.01, 0, "ste", "minmax", False
    )
    for a, w in zip((y, s, c), want):
        assert_bitwise(a.cpu(), w)
    assert th.tolist() == [0.0, 1.0, 2.0] and it.item() == 1
    e = torch.empty(0, 3, device=CUDA)
    y, s, c = OPS.quantization_int8(e, th, it, 8, True, 1, 0.01, 0, "ste", "minmax", True)
    assert y.shape == (0, 3) and y.device.type == CUDA and s.shape == (1, 3)
    assert th.tolist() == [0.0, 1.0, 2.0] and it.item() == 1


def test_quantization_int8_rejects_cpu_buffers_and_non_finite_x():
    x = torch.randn(4, 5, device=CUDA)
    with pytest.raises(RuntimeError, match="threshold"):
        OPS.quantization_int8(x, torch.zeros(()), torch.zeros((), dtype=torch.int64, device=CUDA))
    with pytest.raises(RuntimeError, match="iteration"):
        OPS.quantization_int8(x, torch.zeros((), device=CUDA), torch.zeros((), dtype=torch.int64))
    x[1, 2] = float("nan")
    th, it = torch.zeros((), device=CUDA), torch.zeros((), dtype=torch.int64, device=CUDA)
    with pytest.raises(RuntimeError, match="finite"):
        OPS.quantization_int8(x, th, it)


# ---- float_quant ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("fmt", [(4, 3, 7, 448.0), (5, 2, 15, 57344.0), (2, 1, 1, 6.0)])
def test_float_quant_matches_cpu(dtype, fmt):
    """Forward and x's gradient bit for bit (the same scalar arithmetic, compiled without FMA
    contraction), the scale's gradient at the dtype's precision (another summation order)."""
    x = (rand((4, 6, 5), dtype=torch.float64, spread=30.0)).to(dtype)
    x[0, 0, :4] = torch.tensor([float("inf"), float("nan"), 0.0, 1e4])
    s = rand_pos((1, 6, 1)).to(dtype)
    g = torch.randn(4, 6, 5).to(dtype)
    args = (*fmt, True, True, False, False, "round")
    want = OPS.float_quant(x, s, *args)
    got = OPS.float_quant(*to_cuda([x, s]), *args).cpu()
    assert_bitwise(got, want)
    gx, gs = OPS._float_quant_backward(g, x, s, *args, [True, True])
    cgx, cgs = OPS._float_quant_backward(*to_cuda([g, x, s]), *args, [True, True])
    assert_bitwise(cgx.cpu(), gx)
    tol = {torch.float64: 1e-12, torch.float32: 1e-5}.get(dtype, 5e-2)
    torch.testing.assert_close(cgs.cpu(), gs, rtol=tol, atol=tol, equal_nan=True)


# ---- abs_max_int_quant (the composite kernel serves CUDA) ----------------------------------------

ABS_MAX_LAYOUTS = {  # (w shape, channel_dim, memory layout)
    "per_tensor": ((8, 6, 3, 3), None, "contiguous"),
    "dim0": ((8, 6, 3, 3), 0, "contiguous"),
    "dim0_channels_last": ((8, 6, 3, 3), 0, "channels_last"),
    "dim1_convtranspose": ((6, 8, 3, 3), 1, "contiguous"),
    "linear_sliced": ((12, 20), 0, "sliced"),
    "large": ((512, 256, 3, 3), 0, "contiguous"),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("layout", sorted(ABS_MAX_LAYOUTS))
@pytest.mark.parametrize("clamp_ste", [False, True])
def test_abs_max_int_quant_matches_cpu(layout, dtype, clamp_ste):
    """Forward (output and scale) bit for bit; the weight's gradient, which adds the scale's
    path into the maxima, at the dtype's precision (another summation order)."""
    shape, dim, mem = ABS_MAX_LAYOUTS[layout]
    w = make_x(shape, mem, dtype)
    bw = torch.tensor(8.0)
    args = (dim, True, True, 1e-8, "round", clamp_ste)
    g = rand(tuple(w.shape), dtype=torch.float64, seed=11).to(dtype)

    def run(device):
        leaf_w = leaf(w.to(device))
        y, s = OPS.abs_max_int_quant(leaf_w, bw.to(device), *args)
        (y * g.to(device)).sum().backward()
        return y.detach().cpu(), s.detach().cpu(), leaf_w.grad.cpu()

    y, s, gw = run("cpu")
    cy, cs, cgw = run(CUDA)
    assert_bitwise(cy, y)
    assert_bitwise(cs, s)
    # The scale's gradient, a sum over a channel, reaches each channel's max element: there the
    # two summation orders may differ by the sum's rounding, eps * sum |terms|.
    terms = (g.double() * y.double() / s.double()).abs()
    bound = 4 * torch.finfo(dtype).eps * float(terms.sum())
    tol = grad_tolerance(dtype)
    torch.testing.assert_close(cgw, gw, rtol=tol["rtol"], atol=max(tol["atol"], bound))


def test_abs_max_int_quant_opcheck_and_no_host_sync_on_gpu():
    w = make_x((8, 6, 3, 3), "contiguous", torch.float32).to(CUDA)
    bw = torch.tensor(4.0, device=CUDA)
    for dim in (None, 0):
        torch.library.opcheck(OPS.abs_max_int_quant, (w, bw, dim, True, True))
    wl = leaf(w)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        y, s = OPS.abs_max_int_quant(wl, bw, 0, True, True)
        y.sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert wl.grad.device.type == CUDA


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("clamp_ste", [False, True])
def test_relu_int_quant_matches_cpu(dtype, clamp_ste):
    """relu_int_quant on CUDA (its composite: torch.relu, then int_quant's CUDA kernels) against
    the CPU kernel: values and x's gradient bit for bit, the scale's at the dtype's precision; and
    no host synchronisation in forward and backward."""
    x = make_x((4, 6, 5, 3), "channels_last", dtype)
    s = (rand_pos((1, 6, 1, 1), dtype=torch.float64) * 0.3).to(dtype)
    z, bw = torch.zeros((), dtype=dtype), torch.tensor(4.0)
    g = rand(tuple(x.shape), dtype=torch.float64, seed=11).to(dtype)

    def run(device):
        xd, sd, zd, bd, gd = (t.to(device) for t in (x, s, z, bw, g))
        torch.cuda.synchronize()
        if device == CUDA:
            torch.cuda.set_sync_debug_mode("error")
        try:
            lx, ls = leaf(xd), leaf(sd)
            y = OPS.relu_int_quant(lx, ls, zd, bd, False, False, "round", clamp_ste)
            (y * gd).sum().backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return y.detach().cpu(), lx.grad.cpu(), ls.grad.cpu()

    y, gx, gs = run("cpu")
    cy, cgx, cgs = run(CUDA)
    assert_bitwise(cy, y)
    assert_bitwise(cgx, gx)
    tol = grad_tolerance(dtype)
    torch.testing.assert_close(cgs, gs, rtol=tol["rtol"], atol=max(tol["atol"], 1e-3))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("relu", [False, True])
def test_abs_percentile_int_quant_matches_cpu(dtype, relu):
    """abs_percentile_int_quant on CUDA (its composite: kthvalue, then int_quant's CUDA kernels)
    against the CPU kernel: values, scale, statistic and index bit for bit; x's gradient bit for
    bit but at the selected element, where the scale's gradient (a reduction) is summed in
    another order. The top values are distinct in every dtype: among equal values CUDA's
    kthvalue picks any."""
    base = rand((4, 6, 5, 3), dtype=torch.float64, seed=0)
    base.view(-1)[torch.tensor([3, 50, 97, 150, 201])] = torch.tensor(
        [7.0, -6.5, 6.0, -5.5, 5.0], dtype=torch.float64
    )
    x = base.contiguous(memory_format=torch.channels_last).to(dtype)
    assert int((x.abs() >= 5.0).sum()) == 5, "the five largest |x| must be the ones set"
    bw = torch.tensor(4.0, dtype=dtype)
    g = rand(tuple(x.shape), dtype=torch.float64, seed=11).to(dtype)
    k = x.numel() - 3

    def run(device):
        xd, bd, gd = (t.to(device) for t in (x, bw, g))
        lx = leaf(xd)
        value = torch.ones((), dtype=dtype, device=device, requires_grad=True)
        y, s, st, i = OPS.abs_percentile_int_quant(
            lx, value, bd, k, True, False, 1e-6, "round", False, relu
        )
        ((y * gd).sum() + s).backward()
        return [t.detach().cpu() for t in (y, s, st, i, lx.grad, value.grad)]

    y, s, st, i, gx, gv = run("cpu")
    cy, cs, cst, ci, cgx, cgv = run(CUDA)
    for got, want in ((cy, y), (cs, s), (cst, st), (ci, i), (cgv, gv)):
        assert_bitwise(got, want)
    flat = torch.ones(x.numel(), dtype=torch.bool)
    flat[int(i)] = False
    mask = flat.view(x.shape)
    assert_bitwise(cgx[mask], gx[mask], signed_zero=False)
    tol = grad_tolerance(dtype)
    torch.testing.assert_close(cgx[~mask], gx[~mask], rtol=tol["rtol"], atol=max(tol["atol"], 1e-3))


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("min_val", [None, 0.05])
def test_learned_int_quant_matches_cpu(dtype, relu, min_val):
    """learned_int_quant on CUDA (its composite: scalar_signed_clamp_min_ste, div, then
    int_quant's / relu_int_quant's CUDA kernels) against the CPU kernel: y, scale and x's gradient
    bit for bit, value's at the dtype's precision (int_quant's scale gradient is a reduction); and
    no host synchronisation in forward and backward."""
    x = make_x((4, 6, 5, 3), "channels_last", dtype)
    value = (rand_pos((1, 6, 1, 1), dtype=torch.float64) * 2.0).to(dtype)
    value.view(-1)[0] = 0.03125  # below min_val: the clamp acts when there is one
    threshold, z, bw = (
        torch.tensor(7.0, dtype=dtype),
        torch.zeros((), dtype=dtype),
        torch.tensor(4.0),
    )
    g = rand(tuple(x.shape), dtype=torch.float64, seed=11).to(dtype)
    w = rand(tuple(value.shape), dtype=torch.float64, seed=12).to(dtype)

    def run(device):
        xd, vd, td, zd, bd, gd, wd = (t.to(device) for t in (x, value, threshold, z, bw, g, w))
        torch.cuda.synchronize()
        if device == CUDA:
            torch.cuda.set_sync_debug_mode("error")
        try:
            lx, lv = leaf(xd), leaf(vd)
            y, s = OPS.learned_int_quant(
                lx, lv, td, zd, bd, True, False, min_val, "round", False, relu
            )
            ((y * gd).sum() + (s * wd).sum()).backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return [t.detach().cpu() for t in (y, s, lx.grad, lv.grad)]

    y, s, gx, gv = run("cpu")
    cy, cs, cgx, cgv = run(CUDA)
    assert_bitwise(cy, y)
    assert_bitwise(cs, s)
    assert_bitwise(cgx, gx)
    tol = grad_tolerance(dtype)
    torch.testing.assert_close(cgv, gv, rtol=tol["rtol"], atol=max(tol["atol"], 1e-3))
