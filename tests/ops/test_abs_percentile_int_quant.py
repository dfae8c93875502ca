"""abs_percentile_int_quant and its backward, against the statistics phase of the stock
activation quantizer written out here (Brevitas's ParameterFromRuntimeStatsScaling with
AbsPercentile, IntScaling and IntQuant), never against the op itself:

    r = relu(x) (with relu) or x;  a = |r|
    s, index = torch.kthvalue(a.view(-1), k)  (Brevitas's selection, ties included)
    stat = clamp_min(s, min_val) (straight-through);  scale = stat / threshold
    y = clamp(round(r / scale)) * scale

with autograd through all of it, including the selected element."""

import pytest
import torch
from helpers import (
    DTYPES,
    MODES,
    _StraightThrough,
    assert_bitwise,
    backward_op_utils,
    rand,
    ref_int_quant,
    ref_max_int,
)

import brevitas_cpp  # noqa: F401  (registers the ops)
from brevitas_cpp.function import abs_percentile_int_quant, int_quant

OPS = torch.ops.brevitas_cpp
SIGNED_NARROW = [(True, False), (True, True), (False, False), (False, True)]


def ref_select(x, k, relu):
    """(value, index) of the k-th smallest of |x| (|relu(x)|) as Brevitas's AbsPercentile gets
    them: torch.kthvalue over the flat values (float16 through float32, the same order)."""
    a = (torch.relu(x) if relu else x).detach().reshape(-1).abs()
    wide = a.float() if a.dtype == torch.float16 else a
    v, i = torch.kthvalue(wide, k)
    return v.to(a.dtype), int(i)


def ref_threshold(b, signed, narrow):
    """IntScaling: -min_int signed (2^(b-1) - narrow), max_int unsigned; in b's dtype."""
    if signed:
        return 2.0 ** (b - 1) - (1.0 if narrow else 0.0)
    return ref_max_int(False, narrow, b)


def ref_forward(x, value, b, k, signed, narrow, min_val, mode, clamp_ste, relu, quant=None):
    """The composition, with Brevitas's autograd. quant: the final IntQuant (default: the
    formula; int_quant the op, for gradients summed in the op's order)."""
    r = torch.relu(x) if relu else x
    _, i = ref_select(x, k, relu)
    stat = r.reshape(-1).index_select(0, torch.tensor([i])).abs().squeeze(0)
    if value is not None:  # zero_grad_link
        stat = torch.where(torch.ones((), dtype=torch.bool), stat, value)
    if min_val is not None:
        lo = torch.tensor(min_val, dtype=x.dtype)
        stat = _StraightThrough.apply(stat, lambda t: torch.where(t < lo, lo, t))
    scale = stat / ref_threshold(b, signed, narrow).to(x.dtype)
    z = torch.zeros((), dtype=x.dtype)
    if quant is None:
        y = ref_int_quant(r, scale, z, b, signed, narrow, mode, clamp_ste)
    else:
        y = quant(r, scale, z, b, signed, narrow, mode, clamp_ste)
    return y, scale, stat.detach(), i


def _x(shape, dtype, seed=0, ties=False):
    x = rand(shape, torch.float64, seed=seed, spread=2.0)
    if ties:  # few distinct values: many elements share the selected one
        x = torch.round(x * 4) / 4
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("ties", [False, True])
def test_forward_bitwise_vs_composition(dtype, relu, ties):
    x = _x((4, 3, 8, 8), dtype, ties=ties)
    n = x.numel()
    for k in (n, n - 2, n - 9, n // 2, 1):
        for signed, narrow in SIGNED_NARROW:
            for min_val in (None, 1e-3):
                if min_val is None and ref_select(x, k, relu)[0] == 0:
                    continue  # a zero scale (see the error test)
                for mode in ("round", "floor"):
                    b = torch.tensor(4.0, dtype=dtype)
                    value = torch.ones((), dtype=dtype)
                    y, s, st, i = abs_percentile_int_quant(
                        x, value, b, k, signed, narrow, min_val, mode, False, relu
                    )
                    wy, ws, wst, wi = ref_forward(
                        x, value, b, k, signed, narrow, min_val, mode, False, relu
                    )
                    assert int(i) == wi and i.dtype == torch.int64 and i.dim() == 0
                    assert_bitwise(st, wst)
                    assert_bitwise(s, ws)
                    assert_bitwise(y, wy)


@pytest.mark.parametrize("n", [100, 5000, 70_000, 300_001])
@pytest.mark.parametrize("relu", [False, True])
def test_selection_across_chunks_and_paths(n, relu):
    """Near the top (a few values kept per chunk of x), far from it (torch.kthvalue), with ties
    (torch.kthvalue's choice among them) and NaN (ranked above every number)."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g) * 3
    x[torch.randint(0, n, (n // 50,), generator=g)] = 2.5  # ties below the top
    x[torch.randint(0, n, (3,), generator=g)] = float("nan")
    x[torch.randint(0, n, (4,), generator=g)] = 9.0  # tied maxima
    b = torch.tensor(8.0)
    for k in sorted({n - 3, n - 4, n - 5, n - 20, n - n // 64, n - n // 64 - 1, n // 2, 3}):
        if k < 1:
            continue
        v, i = ref_select(x, k, relu)
        if v.isnan() or v == 0:
            continue
        _, s, st, idx = abs_percentile_int_quant(
            x, None, b, k, True, False, None, "round", False, relu
        )
        assert int(idx) == i, k
        assert_bitwise(st, v)


def test_selection_over_many_chunks():
    """Eight threads, eight chunks of x: ties and the top values straddle the chunk boundaries
    (every chunk's front is tied with the k-th value)."""
    n = 8 * 40_000
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, generator=g)
    x[torch.arange(7, n, 40_000)] = 6.0  # one per chunk, at its start
    x[torch.arange(39_999, n, 40_000)] = -6.0  # and at its end
    x[123] = 9.0
    before = torch.get_num_threads()
    torch.set_num_threads(8)
    try:
        for k in (n, n - 1, n - 5, n - 16, n - 17, n - 100):
            v, i = ref_select(x, k, False)
            _, _, st, idx = abs_percentile_int_quant(x, None, torch.tensor(8.0), k, True, False)
            assert int(idx) == i and float(st) == float(v), k
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("clamp_ste", [False, True])
@pytest.mark.parametrize("use_scale", [False, True])
def test_gradients_vs_composition(dtype, relu, clamp_ste, use_scale):
    """x's gradient: bit for bit against the composition around the int_quant op (the scale's
    gradient summed in the same order), and close to the formula's; the learned value's is an
    exact zero. use_scale: the scale output is used downstream too (its gradient adds in)."""
    x = _x((2, 4, 6, 6), dtype, seed=3)
    n = x.numel()
    g = rand(x.shape, dtype, seed=4)
    tol = {
        torch.float64: dict(rtol=1e-12, atol=1e-12),
        torch.float32: dict(rtol=1e-5, atol=1e-5),
    }.get(dtype, dict(rtol=2e-2, atol=2e-2))
    for mode in MODES:
        for signed, narrow in SIGNED_NARROW:
            for k in (n, n - 3):
                b = torch.tensor(3.0, dtype=dtype)
                results = []
                for fn in ("op", "composition", "formula"):
                    xx = x.clone().requires_grad_()
                    value = torch.ones((), dtype=dtype, requires_grad=True)
                    if fn == "op":
                        y, s, _, _ = abs_percentile_int_quant(
                            xx, value, b, k, signed, narrow, 1e-8, mode, clamp_ste, relu
                        )
                    else:
                        quant = int_quant if fn == "composition" else None
                        y, s, _, _ = ref_forward(
                            xx, value, b, k, signed, narrow, 1e-8, mode, clamp_ste, relu, quant
                        )
                    loss = (y * g).sum() + (3.0 * s if use_scale else 0.0)
                    loss.backward()
                    results.append((xx.grad, value.grad))
                (gx, gv), (cx, cv), (fx, fv) = results
                assert_bitwise(gx, cx, signed_zero=False)
                torch.testing.assert_close(gx, fx, **tol)
                assert_bitwise(gv, torch.zeros((), dtype=dtype))
                assert_bitwise(gv, cv)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("relu", [False, True])
def test_subnormal_x_vs_composition(dtype, relu):
    """x with subnormal values (issue 29). k = n selects a normal |x|; k = n - 2 a subnormal one,
    which scaling_min_val lifts (Brevitas's stock 1e-10; in float16, which holds no 1e-10, 1.0,
    where the scale's gradient term (x / s) / s stays in float16's range): values bit for bit,
    x's gradient finite and the composition's around the int_quant op.
    Without scaling_min_val the scale would be subnormal: the op raises at its own check, the
    composition at int_quant's."""
    tiny, eps = torch.finfo(dtype).tiny, torch.finfo(dtype).eps
    values = [tiny / 4, -tiny / 2, tiny * eps, 3 * tiny / 4, -tiny * eps, 0.0, 0.5, -1.5]
    x = torch.tensor(values, dtype=torch.float64).to(dtype)
    n, b = x.numel(), torch.tensor(8.0, dtype=dtype)
    g = rand(x.shape, dtype, seed=2)
    for k, min_val in [(n, None), (n, 1e-10), (n - 2, 1.0 if dtype == torch.float16 else 1e-10)]:
        y, s, st, i = abs_percentile_int_quant(x, None, b, k, True, False, min_val, relu=relu)
        wy, ws, wst, wi = ref_forward(x, None, b, k, True, False, min_val, "round", False, relu)
        assert int(i) == wi
        for got, want in ((st, wst), (s, ws), (y, wy)):
            assert_bitwise(got, want)
        grads = []
        for quant in (None, int_quant):
            xx = x.clone().requires_grad_()
            if quant is None:
                y, s, _, _ = abs_percentile_int_quant(
                    xx, None, b, k, True, False, min_val, relu=relu
                )
            else:
                y, s, _, _ = ref_forward(
                    xx, None, b, k, True, False, min_val, "round", False, relu, quant
                )
            ((y * g).sum() + s).backward()
            grads.append(xx.grad)
        assert torch.isfinite(grads[0]).all()
        assert_bitwise(grads[0], grads[1], signed_zero=False)
    with pytest.raises(RuntimeError, match="abs_percentile_int_quant: the scale"):
        abs_percentile_int_quant(x, None, b, n - 2, True, False, None, relu=relu)
    with pytest.raises(RuntimeError, match="int_quant: scale must be a normal"):
        ref_forward(x, None, b, n - 2, True, False, None, "round", False, relu, int_quant)


@pytest.mark.parametrize("relu", [False, True])
def test_only_the_scale_used(relu):
    """y unused (only the scale reaches the loss): as in the composition, int_quant's backward
    does not run, so a NaN elsewhere in x stays out of the scale's gradient."""
    x = _x((3, 5, 7), torch.float32, seed=9)
    x.view(-1)[4] = float("nan")
    n = x.numel()
    grads = []
    for fn in ("op", "composition"):
        xx = x.clone().requires_grad_()
        b = torch.tensor(4.0)
        if fn == "op":
            _, s, _, _ = abs_percentile_int_quant(xx, None, b, n - 3, True, False, 1e-8, relu=relu)
        else:
            _, s, _, _ = ref_forward(
                xx, None, b, n - 3, True, False, 1e-8, "round", False, relu, int_quant
            )
        (2.0 * s).backward()
        grads.append(xx.grad)
    assert not grads[0].isnan().any()
    assert_bitwise(grads[0], grads[1])


def test_gradient_at_the_selected_element_by_hand():
    # x = [-1, 4, 2, 7], k = 4 (max |x| = 7 at index 3), signed narrow 4 bits: threshold 7, scale
    # 1, range [-7, 7]. y = x (on the grid, in range); with loss = sum(y * g): STE gives g, and
    # the scale's gradient sum(g * (q - x / s)) = 0 on the grid, so dx = g everywhere;
    # loss + 5 * scale adds 5 / 7 at index 3 (sgn(7) = 1).
    x = torch.tensor([-1.0, 4.0, 2.0, 7.0], requires_grad=True)
    g = torch.tensor([1.0, 2.0, 3.0, 4.0])
    y, s, st, i = abs_percentile_int_quant(x, None, torch.tensor(4.0), 4, True, True)
    assert (
        torch.equal(y, x.detach()) and float(s.detach()) == 1.0 and float(st) == 7.0 and int(i) == 3
    )
    ((y * g).sum() + 5 * s).backward()
    want = g.clone()
    want[3] = torch.tensor(4.0) + torch.tensor(5.0) / 7
    assert torch.equal(x.grad, want)


def test_relu_masks_the_selected_element():
    # All of x <= 0 but one: k = 1 picks a zero of relu(x) (kthvalue's, one of x <= 0); with a
    # scaling_min_val the scale is min_val / threshold, and x = -3 gets no gradient (ReLU's).
    x = torch.tensor([-3.0, -1.0, 0.5, -2.0], requires_grad=True)
    y, s, st, i = abs_percentile_int_quant(
        x, None, torch.tensor(8.0), 1, False, False, 0.5, relu=True
    )
    assert int(i) == ref_select(x, 1, True)[1] and x[int(i)] <= 0
    assert float(st) == 0.5 and torch.equal(s, torch.tensor(0.5) / 255)
    (y.sum() + s).backward()
    assert x.grad[0] == 0 and x.grad[1] == 0 and x.grad[3] == 0


def test_gradcheck_float64_where_the_derivative_is_true():
    """Finite differences agree with the op where the STE gradient is the true derivative: with
    ReLU, x < 0 gives 0 whatever the scale; the largest value is clamped (y = max_int * scale,
    smooth in the scale) and the second largest, selected (k = n - 1), is y = |x| itself."""
    g = torch.Generator().manual_seed(0)
    neg = -(torch.rand(30, generator=g, dtype=torch.float64) + 0.5)
    x = torch.cat([neg, torch.tensor([3.0, 1.7], dtype=torch.float64)])
    b = torch.tensor(4.0, dtype=torch.float64)
    for mode in MODES:
        assert torch.autograd.gradcheck(
            lambda x_: abs_percentile_int_quant(
                x_, None, b, x.numel() - 1, False, False, None, mode, False, True
            )[:2],
            (x.clone().requires_grad_(),),
            eps=1e-7,
            atol=1e-6,
        )


def test_non_contiguous_x_selects_in_logical_order():
    base = _x((4, 6, 5), torch.float32, seed=6, ties=True)
    for x in (
        base.transpose(0, 2),
        base[:, ::2],
        base.contiguous(memory_format=torch.contiguous_format),
    ):
        n = x.numel()
        b = torch.tensor(8.0)
        y, s, st, i = abs_percentile_int_quant(x, None, b, n - 2, True, False)
        wy, ws, wst, wi = ref_forward(x, None, b, n - 2, True, False, None, "round", False, False)
        assert int(i) == wi
        assert_bitwise(y, wy)
        assert y.stride() == torch.empty_like(x).stride()


def test_no_graph_under_no_grad_and_nothing_big_saved():
    x = rand((8, 16, 4, 4), spread=3.0)
    with torch.no_grad():
        y = abs_percentile_int_quant(
            x.requires_grad_(), None, torch.tensor(8.0), 2000, True, False
        )[0]
    assert y.grad_fn is None
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        abs_percentile_int_quant(
            x, torch.ones((), requires_grad=True), torch.tensor(8.0), 2000, True, False
        )
    big = [t for t in saved if t.numel() == x.numel()]
    assert len(big) == 1 and big[0].data_ptr() == x.data_ptr()


def test_only_the_param_requires_grad():
    value = torch.ones((), requires_grad=True)
    y = abs_percentile_int_quant(torch.randn(10), value, torch.tensor(8.0), 9, True, False)[0]
    y.sum().backward()
    assert_bitwise(value.grad, torch.zeros(()))


def _opcheck_inputs(noncontig, requires_grad):
    x = rand((4, 12, 5), spread=4.0)[:, ::2, :] if noncontig else rand((4, 6, 5), spread=4.0)
    value, b = torch.ones(()), torch.tensor(4.0)
    if requires_grad:
        x, value = x.clone().requires_grad_(), value.clone().requires_grad_()
    return x, value, b


@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("relu", [False, True])
def test_opcheck_abs_percentile_int_quant(noncontig, requires_grad, relu):
    x, value, b = _opcheck_inputs(noncontig, requires_grad)
    torch.library.opcheck(
        OPS.abs_percentile_int_quant, (x, value, b, 118, True, False, 1e-6, "round", False, relu)
    )


@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("with_grad_scale", [False, True])
def test_opcheck_abs_percentile_int_quant_backward(noncontig, requires_grad, with_grad_scale):
    x, _, b = _opcheck_inputs(noncontig, requires_grad)
    _, s, _, i = OPS.abs_percentile_int_quant(x.detach(), None, b, 118, True, False)
    grad = rand(x.shape, seed=5)
    gs = torch.tensor(0.5) if with_grad_scale else None
    for relu in (False, True):
        torch.library.opcheck(
            OPS._abs_percentile_int_quant_backward,
            (grad, gs, x, s, i, b, True, False, "round", False, relu),
            test_utils=backward_op_utils(requires_grad),
        )


def test_cpu_kernels_equal_the_composite_kernels():
    # The composite kernels (what CUDA runs: kthvalue, then int_quant's
    # kernels), called on the CPU through their dispatch key.
    composite = torch._C.DispatchKey.CompositeExplicitAutograd
    x = _x((4, 6, 5), torch.float32, seed=8, ties=True)
    b = torch.tensor(4.0)
    grad = rand(x.shape, seed=5)
    for relu in (False, True):
        for k in (x.numel(), x.numel() - 7):
            args = (x, None, b, k, False, True, 1e-4, "round", False, relu)
            cpu = OPS.abs_percentile_int_quant(*args)
            ref = OPS.abs_percentile_int_quant.default._op_dk(composite, *args)
            for got, want in zip(cpu[:3], ref[:3]):
                assert_bitwise(got, want)
            assert torch.equal(cpu[3], ref[3])
            for gs in (None, torch.tensor(0.25)):
                bargs = (grad, gs, x, cpu[1], cpu[3], b, False, True, "round", False, relu)
                got = OPS._abs_percentile_int_quant_backward(*bargs)
                want = OPS._abs_percentile_int_quant_backward.default._op_dk(composite, *bargs)
                assert_bitwise(got, want, signed_zero=False)


def test_meta_shapes():
    x = torch.empty((3, 4, 5), device="meta").transpose(0, 1)
    y, s, st, i = OPS.abs_percentile_int_quant(
        x, None, torch.empty((), device="meta"), 7, True, False
    )
    assert y.shape == x.shape and y.stride() == torch.empty_like(x).stride()
    assert s.shape == st.shape == i.shape == () and i.dtype == torch.int64


def _call(x=None, b=None, k=5, min_val=None, mode="round", value=None):
    x = torch.randn(2, 3) if x is None else x
    b = torch.tensor(8.0) if b is None else b
    return OPS.abs_percentile_int_quant(x, value, b, k, True, False, min_val, mode)


def _backward_call(grad=None, index=None):
    grad = torch.ones(3) if grad is None else grad
    index = torch.tensor(0) if index is None else index
    return OPS._abs_percentile_int_quant_backward(
        grad,
        None,
        torch.ones(3),
        torch.ones(()),
        index,
        torch.tensor(8.0),
        True,
        False,
        "round",
        False,
        False,
    )


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: _call(x=torch.ones(3, dtype=torch.int32), k=2), r"abs_percentile_int_quant.*x"),
        (lambda: _call(x=torch.ones(0), k=1), r"abs_percentile_int_quant.*x must not be empty"),
        (lambda: _call(k=0), r"abs_percentile_int_quant.*k must be in \[1, x.numel\(\)\]"),
        (lambda: _call(k=7), r"abs_percentile_int_quant.*k must be in \[1, x.numel\(\)\]"),
        (lambda: _call(b=torch.tensor(40.0)), r"abs_percentile_int_quant.*bit_width"),
        (lambda: _call(b=torch.ones(2)), r"abs_percentile_int_quant.*bit_width"),
        (lambda: _call(min_val=-1.0), r"abs_percentile_int_quant.*scaling_min_val"),
        (lambda: _call(min_val=float("inf")), r"abs_percentile_int_quant.*scaling_min_val"),
        (
            lambda: _call(x=torch.ones(4, dtype=torch.float16), k=2, min_val=1e6),
            r"abs_percentile_int_quant.*scaling_min_val",
        ),
        (lambda: _call(mode="nearest"), r"abs_percentile_int_quant.*rounding_mode"),
        (
            lambda: _call(x=torch.zeros(6)),
            r"abs_percentile_int_quant.*scale.*normal positive finite",
        ),
        (
            lambda: _call(x=torch.tensor([1.0, float("nan")]), k=2),
            r"abs_percentile_int_quant.*scale.*normal positive finite",
        ),
        (lambda: _backward_call(grad=torch.ones(4)), r"_abs_percentile_int_quant_backward.*grad"),
        (
            lambda: _backward_call(index=torch.tensor(3)),
            r"_abs_percentile_int_quant_backward.*index must be in",
        ),
        (
            lambda: _backward_call(index=torch.tensor(0.0)),
            r"_abs_percentile_int_quant_backward.*index must be a 0-dim int64",
        ),
    ],
    ids=[
        "int-x",
        "empty-x",
        "k-zero",
        "k-above-numel",
        "bit-width",
        "bit-width-shape",
        "negative-min-val",
        "inf-min-val",
        "min-val-overflows-half",
        "rounding-mode",
        "zero-scale",
        "nan-scale",
        "grad-shape",
        "index-out-of-range",
        "index-dtype",
    ],
)
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()


def test_bit_width_requiring_grad_is_refused():
    with pytest.raises(RuntimeError, match="bit_width must not require grad"):
        abs_percentile_int_quant(
            torch.randn(5, requires_grad=True),
            None,
            torch.tensor(8.0, requires_grad=True),
            5,
            True,
            False,
        )
