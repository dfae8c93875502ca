"""quantization_int8 (seed 003's EMA-threshold int8 training op) and its backward op
_quantization_int8_backward, against the spec written out here in plain torch (never the
library's own code):

    QL    = 2**(nbits - 1) - 1
    fresh = (is_weight or training) and x.numel() > 0
    cur   = max|x| (per tensor, or over every dim but channel_axis), in x's dtype, then float32
    t     = weights:     cur if fresh else threshold
            activations: training and fresh: cur if i == 0 else h * (1 - d) + cur * d  (float32)
                         otherwise: threshold
    buffers (training and fresh only): threshold <- t, iteration <- i + 1
    quantize = i >= delay_quant and (fresh or i > 0)
    t_eff = t (minmax) or 2**ceil(log2 t) (power2, exact; 0 stays 0)
    scale = (t_eff / QL in float32).to(x.dtype)       ([] per tensor, C at channel_axis per channel)
    y     = clamp(round(x / scale), -QL, QL) * scale   (x's dtype; +0 where scale == 0, NaN stays)
            or a copy of x when not quantize
    clip_threshold = t_eff.to(x.dtype), or +inf when not quantize
    x's gradient: "ste" passes it; "clip" zeroes it where |x| > clip_threshold.

Readings of the spec where it leaves a choice (each also stated where it is tested):
- the first training batch of an activation uses cur itself (the seed's "history initialized by
  max(abs(act))" followed by 0.99 * history + 0.01 * curr would round in float32);
- scale is returned (t_eff / QL) even when y is a copy of x; only clip_threshold becomes +inf;
- a gradient zeroed by "clip" is +0.0 (the spec's "else 0"), whatever the sign or NaN-ness of the
  incoming gradient there.
"""

import copy
import math
from typing import NamedTuple, Optional

import pytest
import torch
from helpers import DTYPE_IDS, DTYPES, assert_bitwise, meta_like, quant_layouts, rand
from torch import nn
from torch._prims_common import is_non_overlapping_and_dense_or_false

import brevitas_cpp  # noqa: F401  (registers the ops)

OPS = torch.ops.brevitas_cpp
INF = float("inf")
NAN = float("nan")
# The largest nbits whose QL is exact in x's dtype.
MAX_BITS = {torch.float32: 24, torch.float64: 24, torch.float16: 12, torch.bfloat16: 9}

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


# ---- reference (the spec, in plain torch) ---------------------------------------------------


class Ref(NamedTuple):
    y: torch.Tensor
    scale: torch.Tensor
    clip: torch.Tensor
    threshold: torch.Tensor  # the buffers after the call
    iteration: torch.Tensor
    quantize: bool


def ref_max_abs(x: torch.Tensor, channel_axis: Optional[int]) -> torch.Tensor:
    """max|x| in x's dtype (exact), then float32: [] per tensor, [C] per channel."""
    a = x.detach().abs()
    if channel_axis is None:
        return a.amax().float()
    ax = channel_axis % x.dim()
    return a.movedim(ax, 0).reshape(x.shape[ax], -1).amax(dim=1).float()


def ref_power2(t: torch.Tensor) -> torch.Tensor:
    """2**ceil(log2 t) exactly (frexp, not a rounded log2), 0 for 0; float32 in, float32 out."""
    out = []
    for v in t.reshape(-1).tolist():
        if v == 0.0:
            out.append(0.0)
        else:
            m, e = math.frexp(v)  # v = m * 2**e, m in [0.5, 1)
            out.append(2.0 ** (e - 1) if m == 0.5 else 2.0**e)
    return torch.tensor(out, dtype=torch.float32).reshape(t.shape)


def ref_view_shape(x: torch.Tensor, channel_axis: Optional[int]):
    if channel_axis is None:
        return ()
    ax = channel_axis % x.dim()
    return tuple(x.shape[d] if d == ax else 1 for d in range(x.dim()))


def ref_quantization_int8(
    x,
    threshold,
    iteration,
    nbits=8,
    is_weight=False,
    channel_axis=None,
    ema_decay=0.01,
    delay_quant=0,
    grad_mode="ste",
    quant_mode="minmax",
    training=True,
) -> Ref:
    x = x.detach()
    ql = 2 ** (nbits - 1) - 1
    i = int(iteration.reshape(-1)[0])
    h = threshold.detach().clone()
    fresh = (is_weight or training) and x.numel() > 0
    if fresh:
        cur = ref_max_abs(x, channel_axis).reshape(h.shape)
        assert bool(torch.isfinite(cur).all())
        if is_weight or i == 0:
            t = cur
        else:
            t = h * (1 - ema_decay) + cur * ema_decay
    else:
        t = h
    if training and fresh:
        new_threshold, new_iteration = t.clone(), iteration + 1
    else:
        new_threshold, new_iteration = h, iteration.clone()
    quantize = i >= delay_quant and (fresh or i > 0)
    t_eff = ref_power2(t) if quant_mode == "power2" else t
    view = ref_view_shape(x, channel_axis)
    scale = (t_eff / ql).to(x.dtype).reshape(view)
    if quantize:
        clip = t_eff.to(x.dtype).reshape(view)
        y = torch.clamp(torch.round(x / scale), -ql, ql) * scale
        y = torch.where(scale == 0, torch.where(torch.isnan(x), x, torch.zeros_like(x)), y)
    else:
        clip = torch.full(view, INF, dtype=x.dtype)
        y = x.clone()
    return Ref(y, scale, clip, new_threshold, new_iteration, quantize)


def ref_grad(g: torch.Tensor, x: torch.Tensor, clip: torch.Tensor, grad_mode: str) -> torch.Tensor:
    if grad_mode == "ste":
        return g
    return torch.where(x.detach().abs() > clip, torch.zeros_like(g), g)


def expected_strides(x: torch.Tensor):
    """The library's output layout (empty_like's): x's strides when x is dense (non-overlapping
    and dense), else those of x's suggested memory format (channels_last for a sliced
    channels_last x)."""
    if is_non_overlapping_and_dense_or_false(x):
        return x.stride()
    return torch.empty_like(x).stride()


# ---- helpers --------------------------------------------------------------------------------


def buffers(threshold_shape=(), value=0.0, iteration=0, iteration_shape=()):
    th = torch.full(threshold_shape, value, dtype=torch.float32)
    it = torch.full(iteration_shape, iteration, dtype=torch.int64)
    return th, it


def check_step(x, th, it, **kw):
    """One call of the op on (th, it) against the reference on copies of them; returns the op's
    (y, scale, clip) and the reference."""
    want = ref_quantization_int8(x, th.clone(), it.clone(), **kw)
    th_ptr, it_ptr = th.data_ptr(), it.data_ptr()
    y, s, c = OPS.quantization_int8(x, th, it, **kw)
    assert_bitwise(y, want.y)
    assert_bitwise(s, want.scale)
    assert_bitwise(c, want.clip)
    assert_bitwise(th, want.threshold)
    assert it.dtype == torch.int64 and torch.equal(it, want.iteration)
    assert th.data_ptr() == th_ptr and it.data_ptr() == it_ptr  # updated in place
    assert y.stride() == expected_strides(x)
    if x.numel() > 0:
        assert y.data_ptr() != x.data_ptr()
    return (y, s, c), want


# ---- the seed's pseudo-code, written out -----------------------------------------------------


@pytest.mark.parametrize("nbits", [8, 4, 2])
def test_seed_weight_per_tensor(nbits):
    """threshold = max(abs(w)); quant_unit = threshold / QUANT_LEVEL;
    quantized_w = round(w / quant_unit) * quant_unit  (no clamp needed: |w| <= threshold)."""
    th, it = buffers()
    for step in range(3):
        w = rand((16, 9), seed=step, spread=1.0 + step)
        QUANT_LEVEL = 2 ** (nbits - 1) - 1
        threshold = torch.max(torch.abs(w))
        quant_unit = threshold / QUANT_LEVEL
        quantized_w = torch.round(w / quant_unit) * quant_unit
        y, s, c = OPS.quantization_int8(w, th, it, nbits, True)
        assert_bitwise(y, quantized_w)
        assert_bitwise(s, quant_unit)
        assert_bitwise(c, threshold)
        assert_bitwise(th, threshold)  # the last training max-abs
        assert it.item() == step + 1


def test_seed_weight_pinned_values():
    """Values computed by hand. nbits 4: QL 7, t 1.75, unit 0.25; ties go to even."""
    w = torch.tensor([1.75, -0.6, 0.125, 0.375, -1.0, 0.3, -0.0])
    th, it = buffers()
    y, s, c = OPS.quantization_int8(w, th, it, nbits=4, is_weight=True)
    # w / unit = [7, -2.4, 0.5, 1.5, -4, 1.2, -0] -> [7, -2, 0, 2, -4, 1, -0]
    assert_bitwise(y, torch.tensor([1.75, -0.5, 0.0, 0.5, -1.0, 0.25, -0.0]))
    assert s.item() == 0.25 and c.item() == 1.75 and th.item() == 1.75 and it.item() == 1
    # nbits 2: QL 1, every value goes to -t, 0 or t; -0.5 and -0.25 round to -0.
    w2 = torch.tensor([2.0, -1.0, 1.5, -0.5, 0.25])
    y2, s2, _ = OPS.quantization_int8(w2, th, it, nbits=2, is_weight=True)
    assert_bitwise(y2, torch.tensor([2.0, -0.0, 2.0, -0.0, 0.0]))
    assert s2.item() == 2.0 and th.item() == 2.0 and it.item() == 2


@pytest.mark.parametrize("ema_decay", [0.01, 0.1, 0.5, 0.9, 1e-4])
@pytest.mark.parametrize("per_channel", [False, True])
def test_seed_activation_ema(ema_decay, per_channel):
    """history_threshold initialized by max(abs(act)) (the first batch uses cur itself), then
    threshold = history * (1 - ema_decay) + curr_max * ema_decay, in float32, per batch;
    quantized_act = clamp(round(act / unit), -QL, QL) * unit (activations can exceed the
    threshold, so the clamp matters here)."""
    nbits, QL = 8, 127
    axis = 1 if per_channel else None
    th, it = buffers((5,) if per_channel else (1,), value=123.0)  # the initial value is ignored
    history = None
    for step in range(6):
        act = rand((4, 5, 3), seed=10 + step, spread=0.5 + step)
        if per_channel:
            curr_max = act.abs().amax(dim=(0, 2))
        else:
            curr_max = act.abs().max().reshape(1)
        if history is None:
            threshold = curr_max
        else:
            threshold = history * (1 - ema_decay) + curr_max * ema_decay
        history = threshold
        unit = threshold / QL
        unit_b = unit.reshape(1, 5, 1) if per_channel else unit.reshape(())
        quantized_act = torch.clamp(torch.round(act / unit_b), -QL, QL) * unit_b
        y, s, c = OPS.quantization_int8(act, th, it, nbits, False, axis, ema_decay)
        assert_bitwise(y, quantized_act)
        assert_bitwise(s, unit_b)
        assert_bitwise(c, threshold.reshape(unit_b.shape))
        assert_bitwise(th, threshold)
        assert it.item() == step + 1
        assert th.shape == ((5,) if per_channel else (1,))


def test_default_arguments():
    """nbits 8, activation, per tensor, ema 0.01, no delay, ste, minmax, training."""
    th, it = buffers()
    for step in range(3):
        x = rand((6, 7), seed=step, spread=1 + step)
        check_step(x, th, it)
    x = rand((6, 7), seed=9)
    states = [(th.clone(), it.clone()) for _ in range(3)]
    a = OPS.quantization_int8(x, *states[0])
    b = OPS.quantization_int8(x, *states[1], 8, False, None, 0.01, 0, "ste", "minmax", True)
    c = OPS.quantization_int8(x, *states[2], nbits=8, training=True, quant_mode="minmax")
    for u, v, w in zip(a, b, c):
        assert_bitwise(u, v)
        assert_bitwise(u, w)
    for st in states[1:]:
        assert_bitwise(st[0], states[0][0])
        assert torch.equal(st[1], states[0][1])


# ---- the reference, bit for bit, over sequences of calls -------------------------------------

CONFIGS = {
    "act_tensor": dict(is_weight=False, channel_axis=None),
    "act_axis1": dict(is_weight=False, channel_axis=1),
    "act_axis-1": dict(is_weight=False, channel_axis=-1),
    "w_tensor": dict(is_weight=True, channel_axis=None),
    "w_axis0": dict(is_weight=True, channel_axis=0),
    "w_axis-1": dict(is_weight=True, channel_axis=-1),
}


def _threshold_shape(x, channel_axis, alt=False):
    if channel_axis is None:
        return (1,) if alt else ()
    return (x.shape[channel_axis],)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("quant_mode", ["minmax", "power2"])
def test_sequence_vs_reference(dtype, config, quant_mode):
    """Training batches (one with a zero channel), an eval batch, more training, for several
    nbits up to the dtype's largest: outputs, scale, clip_threshold and both buffers."""
    kw = dict(CONFIGS[config], quant_mode=quant_mode)
    for nbits in sorted({2, 3, 5, 8, MAX_BITS[dtype]}):
        xs = [rand((4, 6, 5), torch.float64, seed=s, spread=0.3 * (s + 1)) for s in range(6)]
        xs[2][:, 3] = 0.0  # a zero channel along dim 1 (and a zero slice along the others)
        xs[2][1] = 0.0
        th, it = buffers(_threshold_shape(xs[0], kw["channel_axis"], alt=nbits % 2 == 1))
        for step, x in enumerate(xs):
            training = step != 3
            check_step(x.to(dtype), th, it, nbits=nbits, training=training, **kw)
        assert it.item() == 5


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_per_channel_axes(dtype, axis):
    """Weights and activations per channel along every axis (negative axes normalised): the
    threshold buffer has C = x.shape[axis] values, scale and clip_threshold C at axis."""
    x0 = rand((3, 4, 5), torch.float64, seed=1).to(dtype)
    x1 = rand((3, 4, 5), torch.float64, seed=2, spread=2.0).to(dtype)
    c = x0.shape[axis]
    view = [1, 1, 1]
    view[axis] = c
    for is_weight in (True, False):
        th, it = buffers((c,))
        for x in (x0, x1, x0):
            (y, s, clip), _ = check_step(x, th, it, is_weight=is_weight, channel_axis=axis)
            assert s.shape == tuple(view) and clip.shape == tuple(view)
            assert th.shape == (c,)
        if is_weight:
            assert_bitwise(th, ref_max_abs(x0, axis))  # the last training max-abs


def test_per_channel_one_dim_x():
    x = torch.tensor([0.5, -2.0, 0.0, 3.0])
    for is_weight in (True, False):
        th, it = buffers((4,))
        (y, s, c), _ = check_step(x, th, it, is_weight=is_weight, channel_axis=0, nbits=4)
        assert s.shape == (4,) and y[2].item() == 0.0
        assert_bitwise(th, torch.tensor([0.5, 2.0, 0.0, 3.0]))


def test_zero_channel_gives_zero_and_keeps_nan():
    """A zero threshold gives scale 0 and y = +0.0 there (also for -0.0 and +-inf x), NaN x
    stays NaN; in other channels NaN stays NaN and +-inf saturates to +-QL * scale."""
    th = torch.tensor([0.0, 1.27, 2.54])
    it = torch.tensor(1)
    x = torch.tensor(
        [
            [0.0, -0.0, 5.0, -5.0, INF, -INF, NAN, 1e-30],
            [0.0, -0.0, 5.0, -5.0, INF, -INF, NAN, 1e-30],
            [0.0, -0.0, 5.0, -5.0, INF, -INF, NAN, 1e-30],
        ]
    )
    # eval mode: the activation's threshold is read (x's NaN would be rejected when fresh)
    (y, s, c), _ = check_step(x, th, it, channel_axis=0, training=False)
    assert s[0].item() == 0.0 and c[0].item() == 0.0
    assert_bitwise(y[0, :6], torch.zeros(6))
    assert torch.isnan(y[:, 6]).all()
    assert y[1, 4].item() == (127 * s[1]).item() and y[1, 5].item() == (-127 * s[1]).item()
    assert torch.signbit(y[1, 1]) and torch.signbit(y[2, 1])  # -0.0 / s rounds to -0.0


def test_weight_all_zero_channel_per_channel_and_per_tensor():
    w = rand((4, 3))
    w[2] = 0.0
    w[2, 1] = -0.0
    th, it = buffers((4,))
    (y, s, c), _ = check_step(w, th, it, is_weight=True, channel_axis=0)
    assert_bitwise(y[2], torch.zeros(3))  # +0.0 even for -0.0
    assert s[2].item() == 0.0 and c[2].item() == 0.0 and th[2].item() == 0.0
    z = torch.tensor([[0.0, -0.0], [-0.0, 0.0]])
    for quant_mode in ("minmax", "power2"):
        th, it = buffers()
        (y, s, c), _ = check_step(z, th, it, is_weight=True, quant_mode=quant_mode)
        assert_bitwise(y, torch.zeros(2, 2))
        assert s.item() == 0.0 and c.item() == 0.0 and th.item() == 0.0


def test_scale_underflow_in_float16_gives_zero():
    """t = 2**-20 is a float16 value, t / 127 is below half float16's smallest subnormal: the
    float16 scale is 0, so y is +0.0 while clip_threshold stays t."""
    x = torch.tensor([2.0**-20, -(2.0**-21), 2.0**-22], dtype=torch.float16)
    th, it = buffers()
    (y, s, c), _ = check_step(x, th, it, is_weight=True)
    assert s.item() == 0.0 and c.item() == 2.0**-20
    assert_bitwise(y, torch.zeros(3, dtype=torch.float16))


def test_float64_scale_is_the_float32_quotient():
    """scale = (t_eff / QL) in float32, then converted: not t / QL in double; and max|x| of a
    float64 x is rounded to float32 (so the largest |x| may lie beyond clip_threshold)."""
    x = torch.tensor([0.1, -0.3, 1.0 / 3.0], dtype=torch.float64)
    th, it = buffers()
    (y, s, c), _ = check_step(x, th, it, is_weight=True)
    t32 = torch.tensor(1.0 / 3.0, dtype=torch.float32)
    assert th.item() == t32.item()
    assert s.item() == (t32 / 127).double().item() != (1.0 / 3.0) / 127
    assert c.item() == t32.double().item()


# ---- delay_quant, eval mode, empty and 0-dim x ----------------------------------------------


@pytest.mark.parametrize("is_weight", [False, True])
@pytest.mark.parametrize("grad_mode", ["ste", "clip"])
def test_delay_quant(is_weight, grad_mode):
    """The first delay_quant training calls return copies of x (clip_threshold +inf, scale
    t / QL nevertheless) while the statistics move and the counter counts; then quantized."""
    delay = 3
    th, it = buffers()
    for step in range(6):
        x = rand((5, 4), seed=step, spread=1.0 + step).requires_grad_()
        (y, s, c), want = check_step(
            x, th, it, is_weight=is_weight, delay_quant=delay, grad_mode=grad_mode
        )
        assert want.quantize == (step >= delay)
        if step < delay:
            assert_bitwise(y, x.detach())
            assert c.item() == INF
        else:
            assert not torch.equal(y, x.detach())
        assert it.item() == step + 1
        g = rand((5, 4), seed=50 + step)
        y.backward(g)
        assert_bitwise(x.grad, ref_grad(g, x, c, grad_mode))
        if step < delay:
            assert_bitwise(x.grad, g)  # identity phase: everything passes


def test_delay_quant_eval_stays_identity_before_delay():
    th, it = buffers(value=2.0, iteration=2)
    x = rand((4, 4), seed=3)
    for is_weight in (False, True):
        (y, s, c), want = check_step(x, th, it, is_weight=is_weight, delay_quant=3, training=False)
        assert not want.quantize and c.item() == INF
        assert_bitwise(y, x)
    assert th.item() == 2.0 and it.item() == 2


def test_eval_activation_never_trained_is_identity_and_writes_nothing():
    for value in (0.0, 5.0):
        for quant_mode in ("minmax", "power2"):
            th, it = buffers(value=value)
            x = torch.tensor([[1.0, -7.0, NAN], [INF, -0.0, 3.25]])  # not fresh: no finite check
            (y, s, c), want = check_step(x, th, it, training=False, quant_mode=quant_mode)
            assert not want.quantize
            assert_bitwise(y, x)
            assert c.item() == INF
            assert th.item() == value and it.item() == 0


def test_eval_activation_uses_buffer_and_writes_nothing():
    th, it = buffers()
    for step in range(3):
        check_step(rand((8, 3), seed=step), th, it)
    th_before, it_before = th.clone(), it.clone()
    for step in range(3):
        x = rand((8, 3), seed=20 + step, spread=5.0)  # beyond the threshold: clamped
        (y, s, c), _ = check_step(x, th, it, training=False)
        assert c.item() == th_before.item()
        assert y.abs().max().item() == pytest.approx(th_before.item(), rel=1e-6)
    assert_bitwise(th, th_before)
    assert torch.equal(it, it_before)


def test_eval_weights_use_fresh_max_abs_and_write_nothing():
    th, it = buffers()
    w0 = rand((6, 5), seed=0)
    check_step(w0, th, it, is_weight=True)
    th_before = th.clone()
    w1 = rand((6, 5), seed=1, spread=3.0)
    (y, s, c), _ = check_step(w1, th, it, is_weight=True, training=False)
    assert c.item() == w1.abs().max().item() != th_before.item()
    assert_bitwise(th, th_before)
    assert it.item() == 1
    # also for weights never trained (i = 0): fresh, so quantized
    th2, it2 = buffers()
    (y2, _, c2), want = check_step(w1, th2, it2, is_weight=True, training=False)
    assert want.quantize and c2.item() == w1.abs().max().item()
    assert th2.item() == 0.0 and it2.item() == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("is_weight", [False, True])
@pytest.mark.parametrize("training", [False, True])
def test_empty_x_writes_nothing(dtype, is_weight, training):
    for shape, axis in [((0, 3), None), ((0, 3), 1), ((3, 0), 0), ((2, 0, 4), -1)]:
        for i in (0, 2):
            c = 1 if axis is None else shape[axis]
            th, it = buffers((c,) if axis is not None else (), value=1.5, iteration=i)
            x = torch.empty(shape, dtype=dtype, requires_grad=True)
            (y, s, clip), want = check_step(
                x, th, it, is_weight=is_weight, channel_axis=axis, training=training
            )
            assert want.quantize == (i > 0)  # has a threshold only when it saw data before
            assert y.shape == shape and th.tolist() == torch.full(th.shape, 1.5).tolist()
            assert it.item() == i
            y.sum().backward()
            assert x.grad.shape == shape


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_zero_dim_x(dtype):
    x = torch.tensor(0.7, dtype=torch.float64).to(dtype)
    for is_weight in (False, True):
        for th_shape in ((), (1,)):
            th, it = buffers(th_shape)
            (y, s, c), _ = check_step(x, th, it, is_weight=is_weight)
            assert y.shape == () and s.shape == () and c.shape == ()
            assert th.shape == th_shape and it.item() == 1
            (y, s, c), _ = check_step(-x, th, it, is_weight=is_weight, nbits=3)


def test_iteration_of_shape_one():
    th, it = buffers(iteration_shape=(1,))
    for step in range(3):
        check_step(rand((3, 3), seed=step), th, it)
    assert it.shape == (1,) and it.item() == 3


def test_large_iteration_and_delay():
    th, it = buffers(value=1.0, iteration=2**40)
    check_step(rand((3, 3)), th, it, delay_quant=2**40 + 1)
    assert it.item() == 2**40 + 1
    check_step(rand((3, 3)), th, it, delay_quant=2**40 + 1)


# ---- power2 -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "t,want",
    [
        (1.0, 1.0),
        (0.5, 0.5),
        (2.0**-10, 2.0**-10),
        (2.0**20, 2.0**20),
        (2.0**20 * (1 + 2.0**-23), 2.0**21),  # log2 rounds to exactly 20 in float32
        (2.0**20 * (1 - 2.0**-24), 2.0**20),
        (3.0, 4.0),
        (0.75, 1.0),
        (1.0 + 2.0**-23, 2.0),
        (2.0**-140, 2.0**-140),  # a float32 subnormal
        (3 * 2.0**-140, 2.0**-138),
        (0.0, 0.0),
    ],
)
def test_power2_threshold(t, want):
    """t_eff = 2**ceil(log2 t), exactly; the buffer keeps t itself."""
    assert torch.tensor(t, dtype=torch.float32).item() == t  # exact in float32
    x = torch.tensor([t, -t / 2, 0.0, t / 4], dtype=torch.float32)
    th, it = buffers()
    (y, s, c), _ = check_step(x, th, it, is_weight=True, quant_mode="power2")
    assert c.item() == want
    assert s.item() == torch.tensor(want / 127, dtype=torch.float32).item()
    assert th.item() == t  # not t_eff
    # the same for an activation's EMA value kept in the buffer, read in eval mode
    th2, it2 = buffers(value=t, iteration=4)
    (_, _, c2), _ = check_step(rand((3, 3)), th2, it2, quant_mode="power2", training=False)
    assert c2.item() == want


def test_power2_powers_of_two_are_exact_in_every_dtype():
    for dtype in DTYPES:
        for e in range(-6, 7):
            x = torch.tensor([2.0**e, -(2.0**e) / 3], dtype=torch.float64).to(dtype)
            th, it = buffers()
            (_, _, c), _ = check_step(x, th, it, is_weight=True, quant_mode="power2", nbits=4)
            assert c.item() == 2.0**e


# ---- gradients ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("grad_mode", ["ste", "clip"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_gradients_vs_reference(dtype, grad_mode, config):
    kw = dict(CONFIGS[config], grad_mode=grad_mode)
    th, it = buffers(_threshold_shape(rand((4, 6, 5)), kw["channel_axis"]))
    for step in range(4):
        x = rand((4, 6, 5), torch.float64, seed=step, spread=1.0 + step).to(dtype)
        x.requires_grad_()
        (y, s, c), _ = check_step(x, th, it, training=step != 2, **kw)
        assert y.requires_grad and not s.requires_grad and not c.requires_grad
        g = rand((4, 6, 5), torch.float64, seed=30 + step).to(dtype)
        y.backward(g)
        assert_bitwise(x.grad, ref_grad(g, x, c, grad_mode))


def test_clip_gradient_pinned():
    """Eval with a threshold of 1.0: |x| == t passes, |x| > t is zeroed, NaN passes; the
    zeroed gradient is +0.0 whatever the incoming one (also a NaN or -g)."""
    th, it = buffers(value=1.0, iteration=1)
    x = torch.tensor([1.0, -1.0, 1.0000001, -1.5, NAN, 0.5, INF, -INF, -0.0], requires_grad=True)
    y, s, c = OPS.quantization_int8(x, th, it, training=False, grad_mode="clip")
    g = torch.tensor([1.0, 2.0, -3.0, NAN, 5.0, 6.0, -7.0, 8.0, 9.0])
    y.backward(g)
    assert_bitwise(x.grad, torch.tensor([1.0, 2.0, 0.0, 0.0, 5.0, 6.0, 0.0, 0.0, 9.0]))
    # ste passes everything, NaN gradients included
    x2 = x.detach().clone().requires_grad_()
    OPS.quantization_int8(x2, th, it, training=False, grad_mode="ste")[0].backward(g)
    assert_bitwise(x2.grad, g)


def test_clip_gradient_weight_max_passes():
    """Weights: t = max|w|, so the largest |w| lies on the boundary and passes (float32)."""
    w = torch.tensor([[0.3, -2.5], [2.5, 1.0]], requires_grad=True)
    th, it = buffers()
    y, _, c = OPS.quantization_int8(w, th, it, is_weight=True, grad_mode="clip")
    assert c.item() == 2.5
    y.backward(torch.ones(2, 2))
    assert_bitwise(w.grad, torch.ones(2, 2))


def test_clip_gradient_activation_beyond_ema_threshold():
    th, it = buffers()
    OPS.quantization_int8(torch.tensor([1.0, -0.5]), th, it, grad_mode="clip")
    x = torch.tensor([1.0, 3.0, -2.0, 0.9, -1.01], requires_grad=True)
    y, _, c = OPS.quantization_int8(x, th, it, grad_mode="clip")  # t = 0.99 + 0.03 = 1.02
    assert c.item() == (torch.tensor([1.0]) * 0.99 + torch.tensor([3.0]) * 0.01).item()
    y.backward(torch.full((5,), 2.0))
    assert_bitwise(x.grad, torch.tensor([2.0, 0.0, 0.0, 2.0, 2.0]))


def test_no_graph_without_grad_and_under_no_grad():
    th, it = buffers()
    x = rand((3, 4))
    y, s, c = OPS.quantization_int8(x, th, it)
    assert not y.requires_grad
    xr = x.clone().requires_grad_()
    with torch.no_grad():
        y, _, _ = OPS.quantization_int8(xr, th, it)
    assert not y.requires_grad and it.item() == 2


def test_buffers_are_not_part_of_the_graph():
    th, it = buffers()
    x = rand((3, 4)).requires_grad_()
    y, _, _ = OPS.quantization_int8(x, th, it, grad_mode="clip")
    assert not th.requires_grad and th.grad_fn is None
    y.sum().backward()
    assert th.grad is None


def test_double_backward_through_clip():
    """x's gradient is the backward op, linear in grad: differentiable again in grad."""
    th, it = buffers(value=1.0, iteration=1)
    x = torch.tensor([0.5, 2.0, -1.0, -3.0, NAN], dtype=torch.float64, requires_grad=True)
    y, _, c = OPS.quantization_int8(x, th, it, training=False, grad_mode="clip")
    g = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(y, x, g, create_graph=True)
    assert_bitwise(gx.detach(), torch.tensor([1.0, 0.0, 3.0, 0.0, 5.0], dtype=torch.float64))
    v = torch.tensor([10.0, 20.0, 30.0, 40.0, 50.0], dtype=torch.float64)
    gx.backward(v)
    assert_bitwise(g.grad, torch.tensor([10.0, 0.0, 30.0, 0.0, 50.0], dtype=torch.float64))


# ---- the backward op ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_backward_op_vs_reference(dtype):
    x = rand((4, 6, 5), torch.float64, seed=1, spread=2.0).to(dtype)
    x[0, 0, 0], x[1, 1, 1], x[2, 2, 2] = NAN, INF, -INF
    g = rand((4, 6, 5), torch.float64, seed=2).to(dtype)
    for clip_shape in [(), (1,), (1, 6, 1), (4, 1, 1), (1, 1, 5), (4, 6, 5)]:
        clip = (torch.rand(clip_shape, generator=torch.Generator().manual_seed(3)) * 3).to(dtype)
        assert_bitwise(OPS._quantization_int8_backward(g, x, clip), ref_grad(g, x, clip, "clip"))
    for v in (INF, 0.0):
        clip = torch.tensor(v, dtype=dtype)
        assert_bitwise(OPS._quantization_int8_backward(g, x, clip), ref_grad(g, x, clip, "clip"))
    # boundary and the gradient's own NaN/-0 where zeroed
    xb = torch.tensor([1.0, -1.0, 1.5, NAN, -0.0], dtype=dtype)
    gb = torch.tensor([NAN, -0.0, NAN, 3.0, -2.0], dtype=dtype)
    got = OPS._quantization_int8_backward(gb, xb, torch.tensor(1.0, dtype=dtype))
    assert_bitwise(got, torch.tensor([NAN, -0.0, 0.0, 3.0, -2.0], dtype=dtype))


def test_backward_op_layouts():
    for name, x in quant_layouts().items():
        g = torch.randn(x.shape[::-1], generator=torch.Generator().manual_seed(4)).permute(
            *reversed(range(x.dim()))
        )
        clip = torch.full((1, x.shape[1], 1, 1), 0.8)
        got = OPS._quantization_int8_backward(g, x, clip)
        assert_bitwise(got, ref_grad(g, x, clip, "clip"))
    empty = torch.empty(0, 3)
    assert OPS._quantization_int8_backward(empty, empty, torch.tensor(1.0)).shape == (0, 3)


def test_backward_op_gradcheck_and_gradgradcheck():
    x = rand((4, 5), torch.float64, seed=1, spread=2.0)
    clip = torch.tensor([[0.5], [1.0], [1.5], [INF]], dtype=torch.float64)
    g = rand((4, 5), torch.float64, seed=2).requires_grad_()
    fn = lambda g_: OPS._quantization_int8_backward(g_, x, clip)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (g,))
    assert torch.autograd.gradgradcheck(fn, (g,))
    # its backward is itself with the new grad
    out = fn(g)
    v = rand((4, 5), torch.float64, seed=3)
    out.backward(v)
    assert_bitwise(g.grad, ref_grad(v, x, clip, "clip"))


@pytest.mark.parametrize("grad_mode", ["ste", "clip"])
def test_gradcheck_forward_identity_phase(grad_mode):
    """In the identity phase (delay_quant not reached, or an activation never trained in eval)
    y = x: the true derivative, which gradcheck (and gradgradcheck) can see."""
    x = rand((3, 4), torch.float64, seed=1).requires_grad_()

    def delayed(x_):
        th, it = buffers()
        return OPS.quantization_int8(x_, th, it, delay_quant=10**6, grad_mode=grad_mode)[0]

    def untrained(x_):
        th, it = buffers(value=0.3)
        return OPS.quantization_int8(x_, th, it, training=False, grad_mode=grad_mode)[0]

    for fn in (delayed, untrained):
        assert torch.autograd.gradcheck(fn, (x,))
        assert torch.autograd.gradgradcheck(fn, (x,))


# ---- layouts and meta ---------------------------------------------------------------------


def _layouts():
    out = dict(quant_layouts())
    base = rand((4, 6, 5, 3), seed=7)
    out["channels_last_sliced"] = base.contiguous(memory_format=torch.channels_last)[:, :, 1:]
    return out


@pytest.mark.parametrize("layout", list(_layouts()))
@pytest.mark.parametrize("axis", [None, 1, 3])
@pytest.mark.parametrize("grad_mode", ["ste", "clip"])
def test_layouts(layout, axis, grad_mode):
    """y keeps x's strides when x is dense (channels_last, permuted), else takes empty_like's
    (a sliced channels_last x gives a dense channels_last y), as every op of the library."""
    x0 = _layouts()[layout]
    for is_weight in (False, True):
        c = 1 if axis is None else x0.shape[axis]
        th, it = buffers((c,) if axis is not None else ())
        for step in range(2):  # the second call: the EMA for activations
            x = x0.detach().requires_grad_()
            (y, s, clip), _ = check_step(
                x, th, it, is_weight=is_weight, channel_axis=axis, grad_mode=grad_mode
            )
            g = torch.randn(x.shape[::-1], generator=torch.Generator().manual_seed(step))
            g = g.permute(*reversed(range(x.dim())))
            y.backward(g)
            assert_bitwise(x.grad, ref_grad(g, x, clip, grad_mode))
        # identity phase (eval, never trained): a copy, in the same layout
        th2, it2 = buffers((c,) if axis is not None else ())
        (y, _, _), _ = check_step(x0, th2, it2, channel_axis=axis, training=False)
        assert_bitwise(y, x0)


def test_meta_shapes_and_strides():
    x = torch.empty(2, 4, 3, 5, device="meta").contiguous(memory_format=torch.channels_last)
    for axis, view in [(None, ()), (1, (1, 4, 1, 1)), (-1, (1, 1, 1, 5))]:
        c = 1 if axis is None else x.shape[axis]
        th = torch.empty((c,) if axis is not None else (), device="meta")
        it = torch.empty((), dtype=torch.int64, device="meta")
        for dtype in DTYPES:
            xd = meta_like(x.to(dtype))
            y, s, clip = OPS.quantization_int8(xd, th, it, channel_axis=axis)
            assert y.device.type == "meta" and y.shape == x.shape and y.stride() == x.stride()
            assert y.dtype == s.dtype == clip.dtype == dtype
            assert s.shape == view and clip.shape == view
        g = torch.empty_like(x)
        bw = OPS._quantization_int8_backward(g, x, torch.empty(view, device="meta"))
        assert bw.device.type == "meta" and bw.shape == x.shape


# ---- state, TorchScript, torch.compile ---------------------------------------------------


class Int8Quant(nn.Module):
    """The op with its two buffers, as a layer would hold them."""

    channel_axis: Optional[int]

    def __init__(
        self,
        channels: int = 1,
        is_weight: bool = False,
        channel_axis: Optional[int] = None,
        nbits: int = 8,
        ema_decay: float = 0.01,
        delay_quant: int = 0,
        grad_mode: str = "ste",
        quant_mode: str = "minmax",
    ) -> None:
        super().__init__()
        self.nbits = nbits
        self.is_weight = is_weight
        self.channel_axis = channel_axis
        self.ema_decay = ema_decay
        self.delay_quant = delay_quant
        self.grad_mode = grad_mode
        self.quant_mode = quant_mode
        shape = [channels] if channel_axis is not None else []
        self.register_buffer("threshold", torch.zeros(shape))
        self.register_buffer("iteration", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor):
        return torch.ops.brevitas_cpp.quantization_int8(
            x,
            self.threshold,
            self.iteration,
            self.nbits,
            self.is_weight,
            self.channel_axis,
            self.ema_decay,
            self.delay_quant,
            self.grad_mode,
            self.quant_mode,
            self.training,
        )


class TinyNet(nn.Module):
    """An activation quantizer (per tensor, EMA, clip) and a weight quantizer (per channel,
    power2) around a matmul."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(rand((5, 6), seed=42))
        self.act = Int8Quant(grad_mode="clip", ema_decay=0.1, delay_quant=1)
        self.wq = Int8Quant(5, True, 0, nbits=4, grad_mode="clip", quant_mode="power2")

    def forward(self, x: torch.Tensor):
        qx, sx, _ = self.act(x * 1.5)
        qw, sw, _ = self.wq(self.weight)
        return torch.matmul(qx, qw.t()), sx, sw


def _batches(n=5):
    return [rand((7, 6), seed=100 + k, spread=1.0 + 0.5 * k) for k in range(n)]


def _train_steps(model, batches, training=True):
    """Per batch: outputs, x's and the weight's gradients, and the buffers after the step."""
    model.train(training)
    out = []
    for x in batches:
        xl = x.clone().requires_grad_()
        model.zero_grad(set_to_none=True)
        y, sx, sw = model(xl)
        y.backward(torch.ones_like(y))
        bufs = [b.detach().clone() for b in model.buffers()]
        out.append((y.detach(), sx, sw, xl.grad, model.weight.grad.clone(), bufs))
    return out


def _assert_runs_equal(a, b, exact=True):
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        for u, v in zip(ra[:5], rb[:5]):
            if exact:
                assert_bitwise(u, v)
            else:
                torch.testing.assert_close(u, v, rtol=1e-6, atol=1e-6)
        for u, v in zip(ra[5], rb[5]):
            if u.is_floating_point():
                assert_bitwise(u, v)
            else:
                assert torch.equal(u, v)


def _ref_tiny_run(batches, training=True):
    """TinyNet by hand from the reference: the same steps without the library."""
    w = rand((5, 6), seed=42)
    ath, ait = torch.zeros(()), torch.zeros((), dtype=torch.int64)
    wth, wit = torch.zeros(5), torch.zeros((), dtype=torch.int64)
    out = []
    for x in batches:
        xa = x * 1.5
        ra = ref_quantization_int8(
            xa, ath, ait, ema_decay=0.1, delay_quant=1, grad_mode="clip", training=training
        )
        rw = ref_quantization_int8(
            w, wth, wit, 4, True, 0, grad_mode="clip", quant_mode="power2", training=training
        )
        ath, ait, wth, wit = ra.threshold, ra.iteration, rw.threshold, rw.iteration
        y = torch.matmul(ra.y, rw.y.t())
        ones = torch.ones_like(y)
        gqx, gqw = ones.mm(rw.y), ra.y.t().mm(ones).t()
        gx = ref_grad(gqx, xa, ra.clip, "clip") * 1.5
        gw = ref_grad(gqw, w, rw.clip, "clip")
        out.append((y, ra.scale, rw.scale, gx, gw, [ath, ait, wth, wit]))
    return out


def test_module_matches_reference():
    model = TinyNet()
    assert [n for n, _ in model.named_buffers()] == [
        "act.threshold",
        "act.iteration",
        "wq.threshold",
        "wq.iteration",
    ]
    batches = _batches()
    _assert_runs_equal(_train_steps(model, batches), _ref_tiny_run(batches))


def test_state_round_trip():
    """The buffers saved through state_dict and loaded into a fresh module continue exactly
    like the uninterrupted module (training, then eval)."""
    batches = _batches(6)
    whole = TinyNet()
    want = _train_steps(whole, batches)
    want_eval = _train_steps(whole, batches[:2], training=False)
    first = TinyNet()
    _train_steps(first, batches[:3])
    state = first.state_dict()
    assert set(state) == {
        "weight",
        "act.threshold",
        "act.iteration",
        "wq.threshold",
        "wq.iteration",
    }
    assert state["act.iteration"].item() == 3 and state["act.threshold"].item() > 0
    resumed = TinyNet()
    resumed.load_state_dict(copy.deepcopy(state))
    assert resumed.act.iteration.item() == 3
    _assert_runs_equal(_train_steps(resumed, batches[3:]), want[3:])
    _assert_runs_equal(_train_steps(resumed, batches[:2], training=False), want_eval)
    # an untouched fresh module differs (its activation has not seen data yet)
    fresh = _train_steps(TinyNet(), batches[3:4])
    assert not torch.equal(fresh[0][0], want[3][0])


def test_torchscript_module_matches_eager():
    eager, scripted_src = TinyNet(), TinyNet()
    scripted = torch.jit.script(scripted_src)
    batches = _batches()
    _assert_runs_equal(_train_steps(scripted, batches), _train_steps(eager, batches))
    _assert_runs_equal(
        _train_steps(scripted, batches[:2], training=False),
        _train_steps(eager, batches[:2], training=False),
    )
    # the scripted module's buffers are the ones updated
    assert scripted.act.iteration.item() == 5 and scripted.wq.iteration.item() == 5
    # one quantizer alone, every argument through the script
    q = torch.jit.script(Int8Quant(6, False, -1, nbits=5, ema_decay=0.25, quant_mode="power2"))
    th, it = buffers((6,))
    for step in range(3):
        x = rand((3, 6), seed=step, spread=1 + step)
        (y, s, c), _ = check_step(
            x, th, it, nbits=5, channel_axis=-1, ema_decay=0.25, quant_mode="power2"
        )
        ys, ss, cs = q(x)
        for u, v in [(ys, y), (ss, s), (cs, c), (q.threshold, th)]:
            assert_bitwise(u, v)
        assert torch.equal(q.iteration, it)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_compile_module_matches_eager(backend):
    """fullgraph torch.compile of the module in training, with backward, over several steps
    (the delay phase included), then in eval: outputs, gradients and buffers equal to eager."""
    torch._dynamo.reset()
    eager, compiled_src = TinyNet(), TinyNet()
    compiled = torch.compile(compiled_src, backend=backend, fullgraph=True)
    batches = _batches()
    got = _train_steps(compiled, batches)
    want = _train_steps(eager, batches)
    # Inductor may reorder the matmul's backward sums; the quantizers' inputs are exact.
    _assert_runs_equal(got, want, exact=backend != "inductor")
    assert compiled_src.act.iteration.item() == 5
    _assert_runs_equal(
        _train_steps(compiled, batches[:2], training=False),
        _train_steps(eager, batches[:2], training=False),
        exact=backend != "inductor",
    )
    assert compiled_src.act.iteration.item() == 5


def test_compile_function_with_buffers_as_inputs():
    """The op on buffers passed as graph inputs (aot_eager): mutated like eager."""
    torch._dynamo.reset()

    def f(x, th, it):
        y, s, c = OPS.quantization_int8(x, th, it, 6, False, 1, 0.2, 0, "clip", "minmax", True)
        return y * 2.0, s, c

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    th_e, it_e = buffers((4,))
    th_c, it_c = buffers((4,))
    for step in range(4):
        x = rand((3, 4, 2), seed=step, spread=1 + step)
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        ye, yc = f(xe, th_e, it_e), compiled(xc, th_c, it_c)
        for u, v in zip(ye, yc):
            assert_bitwise(u.detach(), v.detach())
        ye[0].sum().backward()
        yc[0].sum().backward()
        assert_bitwise(xe.grad, xc.grad)
        assert_bitwise(th_e, th_c)
        assert torch.equal(it_e, it_c)
    assert it_c.item() == 4


# ---- opcheck ------------------------------------------------------------------------------


def _opcheck_samples(requires_grad: bool):
    base = rand((4, 6, 5, 3), seed=3)
    samples = [
        (base, (), 0, dict()),
        (base, (), 4, dict(ema_decay=0.3, grad_mode="clip")),
        (base, (6,), 2, dict(channel_axis=1, grad_mode="clip", quant_mode="power2")),
        (base, (4,), 0, dict(is_weight=True, channel_axis=0, nbits=4, grad_mode="clip")),
        (base.contiguous(memory_format=torch.channels_last), (6,), 1, dict(channel_axis=1)),
        (base[:, ::2, :, 1:], (2,), 0, dict(channel_axis=-1, is_weight=True)),
        (base.permute(2, 0, 3, 1), (), 3, dict(training=False, grad_mode="clip")),
        (base, (), 0, dict(training=False)),  # identity: never trained
        (base, (1,), 1, dict(delay_quant=5, grad_mode="clip")),  # identity: delay
        (base.double(), (), 0, dict(is_weight=True, training=False)),
        (base.half(), (5,), 0, dict(channel_axis=2, nbits=12)),
        (base.bfloat16(), (), 2, dict(nbits=9, quant_mode="power2")),
        (torch.empty(0, 6), (6,), 1, dict(channel_axis=1)),
        (torch.tensor(0.4), (), 0, dict(is_weight=True)),
    ]
    for x, th_shape, i, kw in samples:
        if requires_grad:
            x = x.detach().requires_grad_()
        th, it = buffers(th_shape, value=0.7, iteration=i)
        yield x, th, it, kw


@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_forward(requires_grad):
    """opcheck clones the tensor arguments for each of its checks, so the buffers given here
    are not mutated by it (it checks the declared mutation through the schema check)."""
    for x, th, it, kw in _opcheck_samples(requires_grad):
        th0, it0 = th.clone(), it.clone()
        args = (
            x,
            th,
            it,
            kw.get("nbits", 8),
            kw.get("is_weight", False),
            kw.get("channel_axis"),
            kw.get("ema_decay", 0.01),
            kw.get("delay_quant", 0),
            kw.get("grad_mode", "ste"),
            kw.get("quant_mode", "minmax"),
            kw.get("training", True),
        )
        torch.library.opcheck(OPS.quantization_int8, args)
        assert_bitwise(th, th0)
        assert torch.equal(it, it0)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_backward(requires_grad):
    base = rand((4, 6, 5, 3), seed=3)
    cases = [
        (base, torch.tensor(0.8)),
        (base, torch.full((1, 6, 1, 1), 0.5)),
        (base.contiguous(memory_format=torch.channels_last), torch.full((1, 6, 1, 1), 0.5)),
        (base[:, ::2], torch.tensor(INF)),
        (base.permute(2, 0, 3, 1), torch.full((1, 1, 1, 6), 0.3)),
        (base.double(), torch.tensor(0.8, dtype=torch.float64)),
        (base.half(), torch.tensor(0.8, dtype=torch.float16)),
    ]
    for x, clip in cases:
        g = rand(x.shape, x.dtype, seed=9)
        if requires_grad:
            g = g.requires_grad_()
        torch.library.opcheck(OPS._quantization_int8_backward, (g, x, clip))


# ---- bad input (the table in tests/bad_input_cases.py has one case per argument) ----------


def _call(x=None, th=None, it=None, **kw):
    x = rand((2, 5)) if x is None else x
    th = torch.zeros(()) if th is None else th
    it = torch.zeros((), dtype=torch.int64) if it is None else it
    return OPS.quantization_int8(x, th, it, **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_nbits_bounds_per_dtype(dtype):
    """nbits in [2, 24], and QL exact in x's dtype: float16 up to 12, bfloat16 up to 9."""
    x = rand((2, 5), dtype)
    for nbits in (2, MAX_BITS[dtype]):
        th, it = buffers()
        check_step(x, th, it, nbits=nbits)
    for nbits in (1, 0, -3, MAX_BITS[dtype] + 1, 25, 64):
        th, it = buffers()
        with pytest.raises(RuntimeError, match=r"(?s)brevitas_cpp::quantization_int8.*nbits"):
            _call(x, th, it, nbits=nbits)
        assert th.item() == 0.0 and it.item() == 0


@pytest.mark.parametrize(
    "kw,fragment",
    [
        (dict(x=torch.ones(2, 5, dtype=torch.int32)), "x"),
        (dict(x=torch.ones(2, 5, dtype=torch.complex64)), "x"),
        (dict(th=torch.zeros((), dtype=torch.float64)), "threshold"),
        (dict(th=torch.zeros((), dtype=torch.float16)), "threshold"),
        (dict(th=torch.zeros(2)), "threshold"),
        (dict(th=torch.zeros(0)), "threshold"),
        (dict(th=torch.zeros(5), channel_axis=0), "threshold"),
        (dict(th=torch.zeros(1, 5), channel_axis=1), "threshold"),
        (dict(th=torch.zeros(()), channel_axis=1), "threshold"),
        (dict(th=torch.zeros((), device="meta")), "threshold"),
        (dict(it=torch.zeros((), dtype=torch.int32)), "iteration"),
        (dict(it=torch.zeros(())), "iteration"),
        (dict(it=torch.zeros(2, dtype=torch.int64)), "iteration"),
        (dict(it=torch.zeros(0, dtype=torch.int64)), "iteration"),
        (dict(it=torch.zeros((), dtype=torch.int64, device="meta")), "iteration"),
        (dict(th=torch.zeros(5), channel_axis=2), "channel_axis"),
        (dict(th=torch.zeros(5), channel_axis=-3), "channel_axis"),
        (dict(x=torch.tensor(1.0), th=torch.zeros(1), channel_axis=0), "channel_axis"),
        (dict(ema_decay=0.0), "ema_decay"),
        (dict(ema_decay=1.0), "ema_decay"),
        (dict(ema_decay=-0.5), "ema_decay"),
        (dict(ema_decay=1.5), "ema_decay"),
        (dict(ema_decay=NAN), "ema_decay"),
        (dict(delay_quant=-1), "delay_quant"),
        (dict(grad_mode="STE"), "grad_mode"),
        (dict(grad_mode="none"), "grad_mode"),
        (dict(quant_mode="MinMax"), "quant_mode"),
        (dict(quant_mode="log"), "quant_mode"),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else None,
)
def test_bad_arguments(kw, fragment):
    th = kw.get("th", torch.zeros(()))
    it = kw.get("it", torch.zeros((), dtype=torch.int64))
    rest = {k: v for k, v in kw.items() if k not in ("x", "th", "it")}
    th0 = th.clone() if th.device.type == "cpu" else None
    with pytest.raises(RuntimeError) as info:
        _call(kw.get("x"), th, it, **rest)
    assert "brevitas_cpp::quantization_int8" in str(info.value)
    assert fragment in str(info.value)
    if th0 is not None and th0.shape == th.shape:
        assert torch.equal(th, th0)


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_non_finite_x_raises_when_fresh(bad):
    x = rand((3, 4))
    x[1, 2] = bad
    for kw in [dict(), dict(is_weight=True), dict(is_weight=True, training=False)]:
        for axis in (None, 1):
            th, it = buffers((4,) if axis is not None else (), value=1.0, iteration=1)
            with pytest.raises(RuntimeError, match=r"brevitas_cpp::quantization_int8") as info:
                _call(x, th, it, channel_axis=axis, **kw)
            assert "x" in str(info.value) and "finite" in str(info.value)
    # not fresh (activation in eval): no statistic taken, no error
    th, it = buffers(value=1.0, iteration=1)
    (y, _, _), _ = check_step(x, th, it, training=False)


def test_backward_op_bad_inputs():
    x, g = rand((2, 5)), rand((2, 5), seed=1)
    bad = [
        ((g.double(), x, torch.tensor(1.0)), "grad"),
        ((g[:, :4], x, torch.tensor(1.0)), "grad"),
        ((g, x, torch.tensor(1.0, dtype=torch.float64)), "clip_threshold"),
        ((g, x, torch.ones(3)), "clip_threshold"),
        ((g, x, torch.ones(2, 2, 5)), "clip_threshold"),
        ((g, x, torch.tensor(1.0, device="meta")), "clip_threshold"),
        ((g.int(), x.int(), torch.tensor(1, dtype=torch.int32)), "x"),
    ]
    for args, fragment in bad:
        with pytest.raises(RuntimeError) as info:
            OPS._quantization_int8_backward(*args)
        assert "_quantization_int8_backward" in str(info.value), str(info.value)
        assert fragment in str(info.value), str(info.value)


def test_large_tensors():
    """Several parallel chunks for the max-abs reductions and the elementwise pass."""
    for shape, axis in [((64, 33, 17, 9), None), ((64, 33, 17, 9), 1), ((3, 100003), 0)]:
        for is_weight in (True, False):
            c = 1 if axis is None else shape[axis]
            th, it = buffers((c,) if axis is not None else ())
            for step in range(2):
                x = rand(shape, seed=step, spread=1 + step)
                check_step(x, th, it, is_weight=is_weight, channel_axis=axis, grad_mode="clip")
