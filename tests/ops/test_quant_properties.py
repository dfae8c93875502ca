"""Property-based test of int_quant: random shapes, memory layouts, dtypes, bit widths,
signedness, rounding modes and scale/zero-point granularities, against the unfused Brevitas
composition (forward bitwise, gradient of x bitwise)."""

import pytest
import torch
from helpers import DTYPES, MODES, assert_bitwise, ref_int_quant

import brevitas_cpp  # noqa: F401  (registers the ops)
from brevitas_cpp.function import int_quant

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def cases(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from(DTYPES))
    b = draw(st.integers(1, 16))
    signed = draw(st.booleans())
    narrow = draw(st.booleans())
    mode = draw(st.sampled_from(MODES))
    clamp_ste = draw(st.booleans())
    granularity = draw(st.sampled_from(["tensor_0d", "tensor_1", "channel"]))
    ch_dim = draw(st.integers(0, ndim - 1))
    zp_granularity = draw(st.sampled_from(["tensor", "same", "zero"]))
    pow2 = draw(st.booleans())
    perm = draw(st.permutations(list(range(ndim))))
    slice_dim = draw(st.one_of(st.none(), st.integers(0, ndim - 1)))
    seed = draw(st.integers(0, 2**31 - 1))
    return dict(
        shape=shape,
        dtype=dtype,
        b=b,
        signed=signed,
        narrow=narrow,
        mode=mode,
        clamp_ste=clamp_ste,
        granularity=granularity,
        ch_dim=ch_dim,
        zp_granularity=zp_granularity,
        pow2=pow2,
        perm=perm,
        slice_dim=slice_dim,
        seed=seed,
    )


def _strided(values, perm, slice_dim):
    """A tensor equal to `values` (float64, shape S) with a permuted and/or sliced memory layout."""
    shape = list(values.shape)
    if slice_dim is not None:
        big = list(shape)
        big[slice_dim] *= 2
        holder = torch.full(big, 12345.0, dtype=values.dtype)
        idx = [slice(None)] * len(shape)
        idx[slice_dim] = slice(0, None, 2)
        holder[tuple(idx)] = values
        values = holder[tuple(idx)]
    # Store in permuted order, view back to the logical order.
    stored = values.permute(*perm).contiguous()
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return stored.permute(*inv)


def _build(c):
    g = torch.Generator().manual_seed(c["seed"])
    shape, ndim, dtype = c["shape"], len(c["shape"]), c["dtype"]
    if c["granularity"] == "channel":
        pshape = [1] * ndim
        pshape[c["ch_dim"]] = shape[c["ch_dim"]]
    elif c["granularity"] == "tensor_1":
        pshape = [1]
    else:
        pshape = []
    if c["pow2"]:
        s = 2.0 ** torch.randint(-4, 3, pshape, generator=g).double()
    else:
        s = torch.rand(pshape, generator=g, dtype=torch.float64) * 3.0 + 0.01
    zshape = {"tensor": [], "same": pshape, "zero": []}[c["zp_granularity"]]
    z = torch.randint(-3, 4, zshape, generator=g).double()
    if c["zp_granularity"] == "zero":
        z = z * 0
    b, signed, narrow = c["b"], c["signed"], c["narrow"]
    lo = -(2.0 ** (b - 1)) + (1.0 if narrow else 0.0) if signed else 0.0
    hi = 2.0 ** (b - 1) - 1.0 if signed else 2.0**b - (2.0 if narrow else 1.0)
    # Target values of x/s + z: half-integers (ties), integers and uniform values around the range.
    n = 1
    for d in shape:
        n *= d
    span = hi - lo + 6.0
    uniform = torch.rand(n, generator=g, dtype=torch.float64) * span + (lo - 3.0)
    halves = torch.floor(uniform * 2.0) / 2.0
    kind = torch.randint(0, 3, (n,), generator=g)
    u = torch.where(kind == 0, uniform, halves).reshape(shape)
    x = _strided((u - z) * s, c["perm"], c["slice_dim"]).to(dtype)
    return x, s.to(dtype), z.to(dtype), torch.tensor(float(b))


@settings(max_examples=60, deadline=None, database=None)
@given(cases())
def test_int_quant_matches_composition(c):
    x, s, z, bw = _build(c)
    args = (c["signed"], c["narrow"], c["mode"], c["clamp_ste"])
    y = int_quant(x, s, z, bw, *args)
    assert_bitwise(y, ref_int_quant(x, s, z, bw, *args))
    assert y.stride() == torch.empty_like(x).stride()

    g = torch.randn(
        x.shape, generator=torch.Generator().manual_seed(c["seed"] + 1), dtype=torch.float64
    ).to(x.dtype)
    xa = x.detach().clone().requires_grad_()
    int_quant(xa, s, z, bw, *args).backward(g)
    xr = x.detach().clone().requires_grad_()
    ref_int_quant(xr, s, z, bw, *args).backward(g)
    assert torch.equal(xa.grad, xr.grad)

    if x.dtype == torch.float64:  # parameter gradients: equal up to summation order
        leaves = [t.detach().clone().requires_grad_() for t in (s, z, bw)]
        int_quant(x, *leaves, *args).backward(g)
        ref_leaves = [t.detach().clone().requires_grad_() for t in (s, z, bw)]
        ref_int_quant(x, *ref_leaves, *args).backward(g)
        magnitude = float((g.abs() * (x.abs() / s + z.abs() + 2.0 ** c["b"])).sum())
        for got, want in zip(leaves, ref_leaves):
            if want.grad is None:
                assert got.grad is None
            else:
                # bit_width is float32: its gradient is only float32-accurate in the composition.
                rtol = 1e-9 if got.dtype == torch.float64 else 1e-5
                torch.testing.assert_close(got.grad, want.grad, rtol=rtol, atol=1e-13 * magnitude)
