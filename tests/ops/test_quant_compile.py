"""The fused quantizers under torch.compile (fullgraph), torch.jit.script and torch.jit.trace:
forward and backward equal to eager and to the unfused Brevitas composition."""

import pytest
import torch

import brevitas_cpp  # noqa: F401  (registers the ops)
from brevitas_cpp.function import binary_quant, clamped_binary_quant, int_quant, ternary_quant

OPS = torch.ops.brevitas_cpp

# torch.jit.script/trace are deprecated in this torch but still supported (the contract requires them).
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


def ref_int_quant(x, scale, zero_point, bit_width, signed, narrow_range, clamp_ste=False):
    """Unfused composition, round-half-even, STE round (and clamp when clamp_ste)."""
    t = x / scale
    u = t + zero_point
    r = u + (torch.round(u) - u).detach()
    if signed:
        hi = (2 ** (bit_width - 1)) - 1
        lo = -(2 ** (bit_width - 1)) + (1 if narrow_range else 0)
    else:
        hi = (2**bit_width) - (2 if narrow_range else 1)
        lo = 0 * bit_width

    def clamp(v):
        c = torch.where(v > hi, hi.type_as(v), v)
        return torch.where(c < lo, lo.type_as(c), c)

    c = r + (clamp(r) - r).detach() if clamp_ste else clamp(r)
    return (c - zero_point) * scale


def quant_block(x, scale, zero_point, bit_width):
    # A learned per-channel scale and bit width around the fused op, with ops before and after.
    y = int_quant(
        torch.relu(x) - 0.5, scale.abs() + 1e-3, zero_point, bit_width, True, False, "round", False
    )
    return (y * 1.5).sum(dim=1)


def ref_block(x, scale, zero_point, bit_width):
    y = ref_int_quant(torch.relu(x) - 0.5, scale.abs() + 1e-3, zero_point, bit_width, True, False)
    return (y * 1.5).sum(dim=1)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 4, 5, 5, generator=g) * 2
    scale = torch.rand(1, 4, 1, 1, generator=g) * 0.2 + 0.05
    zp = torch.zeros(())
    bw = torch.tensor(4.0)
    gout = torch.randn(8, 5, 5, generator=g)
    return x, scale, zp, bw, gout


def _run(fn, x, scale, zp, bw, gout):
    leaves = [t.detach().clone().requires_grad_() for t in (x, scale, zp, bw)]
    y = fn(*leaves)
    y.backward(gout)
    return y.detach(), [t.grad for t in leaves]


def _check_against(y, grads, y_want, grads_want, exact_x=True):
    torch.testing.assert_close(y, y_want, rtol=1e-5, atol=1e-5)
    if exact_x:
        torch.testing.assert_close(grads[0], grads_want[0], rtol=0, atol=0)
    for got, want in zip(grads[1:], grads_want[1:]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_forward_backward(backend):
    torch._dynamo.reset()
    x, scale, zp, bw, gout = _inputs()
    compiled = torch.compile(quant_block, backend=backend, fullgraph=True)
    y, grads = _run(compiled, x, scale, zp, bw, gout)
    y_e, grads_e = _run(quant_block, x, scale, zp, bw, gout)
    y_r, grads_r = _run(ref_block, x, scale, zp, bw, gout)
    # Inductor may fuse the surrounding relu/abs/sum differently: allow rounding there.
    exact = backend == "aot_eager"
    _check_against(y, grads, y_e, grads_e, exact_x=exact)
    _check_against(y, grads, y_r, grads_r, exact_x=exact)
    # A second call with new values reuses the graph and stays correct.
    x2, scale2, zp2, bw2, gout2 = _inputs(seed=1)
    y2, grads2 = _run(compiled, x2, scale2, zp2, bw2, gout2)
    y2_r, grads2_r = _run(ref_block, x2, scale2, zp2, bw2, gout2)
    _check_against(y2, grads2, y2_r, grads2_r, exact_x=exact)


def test_compile_fullgraph_all_quantizers_aot_eager():
    torch._dynamo.reset()

    def f(x, s):
        a = binary_quant(x, s)
        b = clamped_binary_quant(x, s)
        c = ternary_quant(x, s, 0.5)
        d = OPS.int_quant(x, s, torch.zeros(()), torch.tensor(3.0), False, True, "dpu", True)
        return a + 2 * b + 3 * c + 4 * d

    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 7, generator=g)
    s = torch.rand(6, 1, generator=g) + 0.1
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    xe, se = x.clone().requires_grad_(), s.clone().requires_grad_()
    xc, sc = x.clone().requires_grad_(), s.clone().requires_grad_()
    ye, yc = f(xe, se), compiled(xc, sc)
    assert torch.equal(ye, yc)
    gout = torch.randn(6, 7, generator=g)
    ye.backward(gout)
    yc.backward(gout)
    assert torch.equal(xe.grad, xc.grad)
    torch.testing.assert_close(se.grad, sc.grad, rtol=1e-6, atol=1e-6)


def test_compile_dynamic_shapes_aot_eager():
    torch._dynamo.reset()

    def f(x, s):
        return OPS.int_quant(x, s, torch.zeros(()), torch.tensor(4.0), True, False, "round", False)

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True, dynamic=True)
    for n in (3, 5, 9):
        x = torch.randn(n, 6) * 3
        s = torch.rand(1, 6) + 0.1
        want = ref_int_quant(x, s, torch.zeros(()), torch.tensor(4.0), True, False)
        assert torch.equal(compiled(x, s), want)


# ---- TorchScript -----------------------------------------------------------------------------


def _scripted_body(
    x: torch.Tensor, scale: torch.Tensor, zp: torch.Tensor, bw: torch.Tensor
) -> torch.Tensor:
    a = torch.ops.brevitas_cpp.int_quant(x, scale, zp, bw, True, False, "round", False)
    b = int_quant(x, scale, zp, bw, True, True, "floor", True)
    return a + 2.0 * b


def _eager_composition(x, scale, zp, bw):
    t = x / scale + zp
    a_r = t + (torch.round(t) - t).detach()
    a_c = torch.where(a_r > 2 ** (bw - 1) - 1, (2 ** (bw - 1) - 1).type_as(a_r), a_r)
    a_c = torch.where(a_c < -(2 ** (bw - 1)), (-(2 ** (bw - 1))).type_as(a_c), a_c)
    a = (a_c - zp) * scale
    b = ref_int_quant_floor_ste(x, scale, zp, bw)
    return a + 2.0 * b


def ref_int_quant_floor_ste(x, scale, zp, bw):
    u = x / scale + zp
    r = u + (torch.floor(u) - u).detach()
    hi = 2 ** (bw - 1) - 1
    lo = -(2 ** (bw - 1)) + 1
    c = torch.where(r > hi, hi.type_as(r), r)
    c = torch.where(c < lo, lo.type_as(c), c)
    c = r + (c - r).detach()
    return (c - zp) * scale


def test_jit_script_int_quant():
    scripted = torch.jit.script(_scripted_body)
    x, scale, zp, bw, _ = _inputs()
    gout = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))
    y_s, grads_s = _run(scripted, x, scale, zp, bw, gout)
    y_e, grads_e = _run(_scripted_body, x, scale, zp, bw, gout)
    y_r, grads_r = _run(_eager_composition, x, scale, zp, bw, gout)
    assert torch.equal(y_s, y_e) and torch.equal(y_s, y_r)
    for got, want in zip(grads_s, grads_e):
        assert torch.equal(got, want)
    _check_against(y_s, grads_s, y_r, grads_r)


def test_jit_script_wrappers():
    wrappers = [
        torch.jit.script(f) for f in (int_quant, binary_quant, clamped_binary_quant, ternary_quant)
    ]
    s_int, s_bin, s_cbin, s_ter = wrappers
    g = torch.Generator().manual_seed(2)
    x = torch.randn(5, 6, generator=g)
    s = torch.rand(5, 1, generator=g) + 0.1

    def run(fn, *args):
        xl, sl = x.clone().requires_grad_(), s.clone().requires_grad_()
        y = fn(xl, sl, *args)
        y.backward(torch.ones_like(y))
        return y.detach(), xl.grad, sl.grad

    cases = [
        (s_int, int_quant, (torch.zeros(()), torch.tensor(3.0), True, False, "dpu", False)),
        (s_bin, binary_quant, ()),
        (s_cbin, clamped_binary_quant, ()),
        (s_ter, ternary_quant, (0.3,)),
    ]
    for scripted, eager, extra in cases:
        ys, gxs, gss = run(scripted, *extra)
        ye, gxe, gse = run(eager, *extra)
        assert torch.equal(ys, ye) and torch.equal(gxs, gxe) and torch.equal(gss, gse)
    # Spot-check the scripted binary quantizer against its composition.
    sgn = torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))
    assert torch.equal(s_bin(x, s), sgn * s)


def test_jit_trace():
    x, scale, zp, bw, gout = _inputs()
    traced = torch.jit.trace(quant_block, (x, scale, zp, bw))
    y_t, grads_t = _run(traced, x, scale, zp, bw, gout)
    y_r, grads_r = _run(ref_block, x, scale, zp, bw, gout)
    _check_against(y_t, grads_t, y_r, grads_r)
    # Traced with other values: the op is recorded, not its result.
    x2, scale2, zp2, bw2, gout2 = _inputs(seed=4)
    y2, grads2 = _run(traced, x2, scale2, zp2, bw2, gout2)
    y2_r, grads2_r = _run(ref_block, x2, scale2, zp2, bw2, gout2)
    _check_against(y2, grads2, y2_r, grads2_r)
