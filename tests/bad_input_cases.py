"""Bad input for every op of the library, one table: each case calls one op with one bad
argument and names the fragments its RuntimeError must contain (the op, the argument, what was
given or what is accepted). tests/ops/test_bad_inputs_isolated.py runs the table in fresh interpreters
after importing what the test suite imports, where a crash in building an error message (as seen
with torch 2.11 and g++ 13) would kill the interpreter instead of raising."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Tuple

import torch

import brevitas_cpp  # noqa: F401  (loading it registers the ops)

ops = torch.ops.brevitas_cpp


@dataclass(frozen=True)
class BadInput:
    name: str
    call: Callable[[], object]
    fragments: Tuple[str, ...]


def _x() -> torch.Tensor:
    return torch.linspace(-2.0, 2.0, 10).reshape(2, 5)


def _ints() -> torch.Tensor:
    return torch.ones(2, 5, dtype=torch.int32)


def _t(v: float) -> torch.Tensor:
    return torch.tensor(v)


UNARY = [
    "round_ste",
    "ceil_ste",
    "floor_ste",
    "round_to_zero_ste",
    "dpu_round_ste",
    "binary_sign_ste",
    "ternary_sign_ste",
    "abs_binary_sign_grad",
]
ROUNDING_MODES = ["round", "ceil", "floor", "round_to_zero", "dpu"]


def _int_quant(x=None, scale=None, zp=None, bw=None, mode="round"):
    return ops.int_quant(
        _x() if x is None else x,
        _t(0.1) if scale is None else scale,
        _t(0.0) if zp is None else zp,
        _t(8.0) if bw is None else bw,
        True,
        False,
        mode,
    )


def _int_quant_backward(grad=None, x=None, scale=None, mask=(True, True, True, True), mode="round"):
    x = _x() if x is None else x
    return ops._int_quant_backward(
        _x() if grad is None else grad,
        x,
        None,
        _t(0.1) if scale is None else scale,
        _t(0.0),
        _t(8.0),
        True,
        False,
        mode,
        False,
        list(mask),
    )


def _q8(x=None, threshold=None, iteration=None, **kw):
    """quantization_int8 with valid arguments except those given (tensors made in the call, on
    the current default device)."""
    return ops.quantization_int8(
        _x() if x is None else x,
        torch.zeros(()) if threshold is None else threshold,
        torch.zeros((), dtype=torch.int64) if iteration is None else iteration,
        **kw,
    )


def _q8_backward(grad=None, x=None, clip_threshold=None):
    return ops._quantization_int8_backward(
        _x() if grad is None else grad,
        _x() if x is None else x,
        _t(1.0) if clip_threshold is None else clip_threshold,
    )


# What the scale check of int_quant, relu_int_quant and float_quant says (their backward ops too).
NORMAL_SCALE = "scale must be a normal positive finite number"


def _subnormal(dtype: torch.dtype) -> torch.Tensor:
    """A quarter of dtype's smallest normal: a subnormal scale."""
    return torch.tensor(torch.finfo(dtype).tiny / 4, dtype=dtype)


def _fq(x=None, scale=None, **kw):
    """float_quant (OCP e4m3) with valid arguments except those given."""
    args = dict(exponent_bit_width=4, mantissa_bit_width=3, exponent_bias=7, max_value=448.0)
    args.update(kw)
    return ops.float_quant(_x() if x is None else x, _t(0.5) if scale is None else scale, **args)


def _liq(x=None, value=None, threshold=None, zp=None, bw=None, min_val=None, mode="round"):
    """learned_int_quant with valid arguments except those given."""
    return ops.learned_int_quant(
        _x() if x is None else x,
        _t(0.5) if value is None else value,
        _t(127.0) if threshold is None else threshold,
        _t(0.0) if zp is None else zp,
        _t(8.0) if bw is None else bw,
        True,
        False,
        min_val,
        mode,
        False,
        True,
    )


def _liq_backward(grad_y=None, grad_scale=None, threshold=None):
    """_learned_int_quant_backward with valid arguments except those given (grad_y "none": None)."""
    return ops._learned_int_quant_backward(
        None if isinstance(grad_y, str) else (_x() if grad_y is None else grad_y),
        grad_scale,
        _x(),
        _t(0.1),
        _t(127.0) if threshold is None else threshold,
        _t(0.0),
        _t(8.0),
        True,
        False,
        "round",
        False,
        True,
        [True, True],
    )


def cases() -> List[BadInput]:
    out: List[BadInput] = []
    add = lambda name, call, *fragments: out.append(BadInput(name, call, fragments))  # noqa: E731

    for op in UNARY:
        add(
            f"{op}-int-x",
            lambda op=op: getattr(ops, op)(_ints()),
            f"brevitas_cpp::{op}",
            "x must be a floating-point tensor",
            "Int",
        )
    add(
        "_abs_binary_sign_grad_backward-int-grad",
        lambda: ops._abs_binary_sign_grad_backward(_ints(), _x()),
        "_abs_binary_sign_grad_backward",
    )

    # Shapes in messages (SymInt sizes formatted into the error: the path that crashed).
    add(
        "tensor_clamp_ste-min-shape",
        lambda: ops.tensor_clamp_ste(_x(), torch.zeros(3), torch.ones(1)),
        "tensor_clamp_ste",
        "min_val of shape [3] does not broadcast to x of shape [2, 5]",
    )
    add(
        "tensor_clamp_ste-max-shape",
        lambda: ops.tensor_clamp_ste(_x(), torch.zeros(1), torch.ones(4, 2, 5)),
        "tensor_clamp_ste",
        "max_val of shape [4, 2, 5] does not broadcast",
    )
    add(
        "tensor_clamp_ste-int-x",
        lambda: ops.tensor_clamp_ste(_ints(), _t(0.0), _t(1.0)),
        "tensor_clamp_ste",
        "x must be a floating-point tensor",
    )
    add(
        "scalar_clamp_ste-min-above-max",
        lambda: ops.scalar_clamp_ste(_x(), 1.0, -1.0),
        "scalar_clamp_ste",
        "min_val",
    )
    add(
        "scalar_clamp_ste-nan",
        lambda: ops.scalar_clamp_ste(_x(), float("nan"), 1.0),
        "scalar_clamp_ste",
        "min_val must not be NaN",
    )
    add(
        "scalar_clamp_min_ste-nan",
        lambda: ops.scalar_clamp_min_ste(_x(), float("nan")),
        "scalar_clamp_min_ste",
        "min_val",
    )
    add(
        "scalar_clamp_min_ste-int-x",
        lambda: ops.scalar_clamp_min_ste(_ints(), 0.0),
        "scalar_clamp_min_ste",
        "x must be a floating-point tensor",
    )
    add(
        "scalar_signed_clamp_min_ste-nan",
        lambda: ops.scalar_signed_clamp_min_ste(_x(), float("nan")),
        "scalar_signed_clamp_min_ste",
        "min_val",
    )
    add(
        "scalar_signed_clamp_min_ste-int-x",
        lambda: ops.scalar_signed_clamp_min_ste(_ints(), 0.0),
        "scalar_signed_clamp_min_ste",
        "x must be a floating-point tensor",
    )

    add(
        "int_quant-int-x",
        lambda: _int_quant(x=_ints()),
        "int_quant",
        "x must be a floating-point tensor",
    )
    add(
        "int_quant-scale-shape",
        lambda: _int_quant(scale=torch.ones(3)),
        "int_quant",
        "scale of shape [3] does not broadcast to x of shape [2, 5]",
    )
    add(
        "int_quant-zero-point-shape",
        lambda: _int_quant(zp=torch.zeros(2, 1, 1, 1)),
        "int_quant",
        "zero_point of shape [2, 1, 1, 1] does not broadcast",
    )
    add(
        "int_quant-scale-dtype",
        lambda: _int_quant(scale=torch.tensor(0.1, dtype=torch.float64)),
        "int_quant",
        "scale must have the dtype of x",
    )
    for v in (0.0, -1.0, float("inf"), float("nan")):
        add(
            f"int_quant-scale-{v}",
            lambda v=v: _int_quant(scale=_t(v)),
            "int_quant",
            NORMAL_SCALE,
        )
    add(
        "int_quant-zero-point-nan",
        lambda: _int_quant(zp=_t(float("nan"))),
        "int_quant",
        "zero_point",
    )
    for bw in (0.0, 33.0, 4.5, float("nan")):
        add(
            f"int_quant-bit-width-{bw}",
            lambda bw=bw: _int_quant(bw=_t(bw)),
            "int_quant",
            "bit_width must be an integer in [1, 32]",
        )
    add(
        "int_quant-bit-width-shape",
        lambda: _int_quant(bw=torch.tensor([8.0, 8.0])),
        "int_quant",
        "bit_width must hold exactly one value",
        "[2]",
    )
    add(
        "int_quant-rounding-mode",
        lambda: _int_quant(mode="nearest"),
        "int_quant",
        "nearest",
        "round",
    )
    add(
        "int_quant-device",
        lambda: _int_quant(scale=torch.tensor(0.1, device="meta")),
        "int_quant",
        "scale is on meta but x is on cpu",
    )
    # abs_max_int_quant: the stock weight quantizer in one op.
    amq = "brevitas_cpp::abs_max_int_quant"

    def _amq(w=None, bw=None, dim=0, min_val=None, mode="round"):
        return ops.abs_max_int_quant(
            _x() if w is None else w, _t(8.0) if bw is None else bw, dim, True, True, min_val, mode
        )

    add(
        "abs_max_int_quant-int-w", lambda: _amq(w=_ints()), amq, "w must be a floating-point tensor"
    )
    add("abs_max_int_quant-empty-w", lambda: _amq(w=torch.ones(0, 5)), amq, "w must not be empty")
    add("abs_max_int_quant-channel-dim", lambda: _amq(dim=2), amq, "channel_dim", "got 2")
    add("abs_max_int_quant-min-val", lambda: _amq(min_val=-1.0), amq, "scaling_min_val", ">= 0")
    add(
        "abs_max_int_quant-bit-width-shape",
        lambda: _amq(bw=torch.tensor([8.0, 8.0])),
        amq,
        "bit_width",
    )
    add("abs_max_int_quant-bit-width-value", lambda: _amq(bw=_t(33.0)), amq, "bit_width")
    add("abs_max_int_quant-rounding-mode", lambda: _amq(mode="nearest"), amq, "rounding_mode")
    add(
        "abs_max_int_quant-zero-w",
        lambda: _amq(w=torch.zeros(2, 5)),
        amq,
        "scale",
        "normal positive finite",
    )
    add(
        "_abs_max_int_quant_backward-grad-shape",
        lambda: ops._abs_max_int_quant_backward(
            torch.ones(5, 2),
            torch.ones(2, 1),
            _x(),
            torch.ones(2, 1),
            _t(8.0),
            0,
            True,
            True,
            None,
            "round",
            False,
        ),
        "brevitas_cpp::_abs_max_int_quant_backward",
        "grad of shape",
    )
    add(
        "_int_quant_with_mask-scale-shape",
        lambda: ops._int_quant_with_mask(_x(), torch.ones(3), _t(0.0), _t(8.0), True, False),
        # The mask-keeping forward of int_quant reports as int_quant, the op the user called.
        "brevitas_cpp::int_quant",
        "scale of shape [3] does not broadcast",
    )
    add(
        "_int_quant_backward-grad-dtype",
        lambda: _int_quant_backward(grad=_x().double()),
        "_int_quant_backward",
        "grad",
    )
    add(
        "_int_quant_backward-scale-shape",
        lambda: _int_quant_backward(scale=torch.ones(3)),
        "_int_quant_backward",
        "scale of shape [3] does not broadcast",
    )
    add(
        "_int_quant_backward-rounding-mode",
        lambda: _int_quant_backward(mode="nearest"),
        "_int_quant_backward",
        "nearest",
    )

    for op in ("binary_quant", "clamped_binary_quant"):
        add(
            f"{op}-int-x",
            lambda op=op: getattr(ops, op)(_ints(), torch.tensor(1, dtype=torch.int32)),
            op,
            "x must be a floating-point tensor",
        )
        add(
            f"{op}-scale-shape",
            lambda op=op: getattr(ops, op)(_x(), torch.ones(3)),
            op,
            "scale of shape [3] does not broadcast to x of shape [2, 5]",
        )
        add(
            f"{op}-scale-zero",
            lambda op=op: getattr(ops, op)(_x(), _t(0.0)),
            op,
            "scale must be positive and finite",
        )
        add(
            f"_{op}_backward-scale-shape",
            lambda op=op: getattr(ops, f"_{op}_backward")(_x(), _x(), torch.ones(3), [True, True]),
            f"_{op}_backward",
            "scale of shape [3] does not broadcast",
        )
    add(
        "ternary_quant-threshold",
        lambda: ops.ternary_quant(_x(), _t(1.0), -0.5),
        "ternary_quant",
        "threshold",
    )
    add(
        "ternary_quant-scale-shape",
        lambda: ops.ternary_quant(_x(), torch.ones(3), 0.5),
        "ternary_quant",
        "scale of shape [3] does not broadcast",
    )
    add(
        "_ternary_quant_backward-threshold",
        lambda: ops._ternary_quant_backward(_x(), _x(), _t(1.0), float("nan"), [True, True]),
        "_ternary_quant_backward",
        "threshold",
    )
    add(
        "_all_reduce_mean-unknown-group",
        lambda: ops._all_reduce_mean(_x(), "no-such-group"),
        "_all_reduce_mean",
        "no-such-group",
    )

    # quantization_int8 and its backward op: one case per argument (and per bound of nbits).
    q8 = "brevitas_cpp::quantization_int8"
    add("quantization_int8-int-x", lambda: _q8(x=_ints()), q8, "x")
    add(
        "quantization_int8-threshold-dtype",
        lambda: _q8(threshold=torch.zeros((), dtype=torch.float64)),
        q8,
        "threshold",
    )
    add(
        "quantization_int8-threshold-numel",
        lambda: _q8(threshold=torch.zeros(2)),
        q8,
        "threshold",
    )
    add(
        "quantization_int8-threshold-channels",
        lambda: _q8(threshold=torch.zeros(4), channel_axis=1),
        q8,
        "threshold",
    )
    add(
        "quantization_int8-threshold-device",
        lambda: _q8(threshold=torch.zeros((), device="meta")),
        q8,
        "threshold",
    )
    add(
        "quantization_int8-iteration-dtype",
        lambda: _q8(iteration=torch.zeros((), dtype=torch.int32)),
        q8,
        "iteration",
    )
    add(
        "quantization_int8-iteration-numel",
        lambda: _q8(iteration=torch.zeros(2, dtype=torch.int64)),
        q8,
        "iteration",
    )
    add(
        "quantization_int8-iteration-device",
        lambda: _q8(iteration=torch.zeros((), dtype=torch.int64, device="meta")),
        q8,
        "iteration",
    )
    for axis in (2, -3):
        add(
            f"quantization_int8-channel-axis-{axis}",
            lambda axis=axis: _q8(threshold=torch.zeros(5), channel_axis=axis),
            q8,
            "channel_axis",
        )
    for nbits, dtype in [(1, None), (25, None), (13, torch.float16), (10, torch.bfloat16)]:
        add(
            f"quantization_int8-nbits-{nbits}-{dtype}",
            lambda nbits=nbits, dtype=dtype: _q8(
                x=None if dtype is None else _x().to(dtype), nbits=nbits
            ),
            q8,
            "nbits",
        )
    for decay in (0.0, 1.0, float("nan")):
        add(
            f"quantization_int8-ema-decay-{decay}",
            lambda decay=decay: _q8(ema_decay=decay),
            q8,
            "ema_decay",
        )
    add("quantization_int8-delay-quant", lambda: _q8(delay_quant=-1), q8, "delay_quant")
    add("quantization_int8-grad-mode", lambda: _q8(grad_mode="STE"), q8, "grad_mode")
    add("quantization_int8-quant-mode", lambda: _q8(quant_mode="log"), q8, "quant_mode")
    for v in (float("nan"), float("inf")):
        add(
            f"quantization_int8-x-{v}",
            lambda v=v: _q8(x=torch.tensor([[0.5, v], [1.0, -2.0]])),
            q8,
            "x",
            "finite",
        )
    q8b = "brevitas_cpp::_quantization_int8_backward"
    add(
        "_quantization_int8_backward-grad-dtype",
        lambda: _q8_backward(grad=_x().double()),
        q8b,
        "grad",
    )
    add(
        "_quantization_int8_backward-grad-shape",
        lambda: _q8_backward(grad=torch.zeros(2, 4)),
        q8b,
        "grad",
    )
    add(
        "_quantization_int8_backward-clip-threshold-dtype",
        lambda: _q8_backward(clip_threshold=torch.tensor(1.0, dtype=torch.float64)),
        q8b,
        "clip_threshold",
    )
    add(
        "_quantization_int8_backward-clip-threshold-shape",
        lambda: _q8_backward(clip_threshold=torch.ones(3)),
        q8b,
        "clip_threshold",
    )
    add(
        "_quantization_int8_backward-clip-threshold-device",
        lambda: _q8_backward(clip_threshold=torch.tensor(1.0, device="meta")),
        q8b,
        "clip_threshold",
    )

    # float_quant: the format's arguments, the scale, x.
    fq = "brevitas_cpp::float_quant"
    add(
        "float_quant-mantissa-0",
        lambda: _fq(mantissa_bit_width=0),
        fq,
        "mantissa_bit_width",
        "got 0",
    )
    add("float_quant-exponent-0", lambda: _fq(exponent_bit_width=0), fq, "exponent_bit_width")
    add("float_quant-exponent-9", lambda: _fq(exponent_bit_width=9), fq, "exponent_bit_width")
    add("float_quant-max-value", lambda: _fq(max_value=1e6), fq, "max_value", "480")
    add("float_quant-max-value-nan", lambda: _fq(max_value=float("nan")), fq, "max_value")
    add("float_quant-bias", lambda: _fq(exponent_bias=5000), fq, "exponent_bias")
    add(
        "float_quant-non-saturating",
        lambda: _fq(saturating=False),
        fq,
        "inf_values or nan_values",
    )
    add("float_quant-rounding", lambda: _fq(rounding_mode="nearest"), fq, "rounding_mode")
    add("float_quant-scale-zero", lambda: _fq(scale=_t(0.0)), fq, "scale", "positive")
    add("float_quant-scale-dtype", lambda: _fq(scale=_t(0.5).double()), fq, "scale", "dtype")
    add("float_quant-scale-shape", lambda: _fq(scale=torch.ones(3)), fq, "scale", "broadcast")
    add("float_quant-int-x", lambda: _fq(x=_ints()), fq, "x must be a floating-point tensor")
    # Subnormal scales (issue 29): x / s, and the scale's gradient (x / s) / s, would overflow.
    for dtype, bound in [
        (torch.float32, "(>= 1.17549e-38 for float32)"),
        (torch.float64, "(>= 2.22507e-308 for float64)"),
        (torch.float16, "(>= 6.10352e-05 for float16)"),
        (torch.bfloat16, "(>= 1.17549e-38 for bfloat16)"),
    ]:
        name = str(dtype).replace("torch.", "")
        x, s = (lambda d=dtype: _x().to(d)), (lambda d=dtype: _subnormal(d))
        z = lambda d=dtype: torch.zeros((), dtype=d)  # noqa: E731
        add(
            f"int_quant-scale-subnormal-{name}",
            lambda x=x, s=s, z=z: _int_quant(x=x(), scale=s(), zp=z()),
            "brevitas_cpp::int_quant",
            NORMAL_SCALE,
            bound,
        )
        add(
            f"float_quant-scale-subnormal-{name}",
            lambda x=x, s=s: _fq(x=x(), scale=s()),
            fq,
            NORMAL_SCALE,
            bound,
        )
        add(
            f"relu_int_quant-scale-subnormal-{name}",
            lambda x=x, s=s, z=z: ops.relu_int_quant(x(), s(), z(), _t(8.0), True, False),
            "brevitas_cpp::relu_int_quant",
            NORMAL_SCALE,
            bound,
        )
    add(
        "float_quant-scale-1e-40",  # the call: all NaN before
        lambda: ops.float_quant(
            torch.randn(4), _t(1e-40), 4, 3, 7, 448.0, True, True, False, False, "round"
        ),
        fq,
        NORMAL_SCALE,
        "got 9.99995e-41",
    )
    add(
        "_float_quant_backward-scale-1e-45",
        lambda: ops._float_quant_backward(
            _x(), _x(), _t(1e-45), 4, 3, 7, 448.0, True, True, False, False, "round", [True, True]
        ),
        "brevitas_cpp::_float_quant_backward",
        NORMAL_SCALE,
    )
    add(
        "_int_quant_with_mask-scale-subnormal",
        lambda: ops._int_quant_with_mask(_x(), _t(1e-40), _t(0.0), _t(8.0), True, False),
        "brevitas_cpp::int_quant",
        NORMAL_SCALE,
    )
    add(
        "_int_quant_backward-scale-subnormal",
        lambda: _int_quant_backward(scale=_t(1e-40)),
        "brevitas_cpp::_int_quant_backward",
        NORMAL_SCALE,
    )
    # x > 0: at x <= 0 ReLU's mask gives x's gradient 0 whatever the scale (NaN elsewhere on a GPU).
    add(
        "_relu_int_quant_backward-scale-subnormal",
        lambda: ops._relu_int_quant_backward(
            _x(),
            _x().abs() + 0.5,
            _t(1e-40),
            _t(0.0),
            _t(8.0),
            True,
            False,
            "round",
            False,
            [True] * 4,
        ),
        "brevitas_cpp::_relu_int_quant_backward",
        NORMAL_SCALE,
    )
    # A subnormal statistic without scaling_min_val: the scale it gives is subnormal.
    add(
        "abs_max_int_quant-subnormal-w",
        lambda: ops.abs_max_int_quant(_x() * 1e-39, _t(8.0), None, True, True, None, "round"),
        "brevitas_cpp::abs_max_int_quant",
        "the scale max|w| / threshold must be a normal positive finite number",
        "without scaling_min_val",
    )
    add(
        "abs_percentile_int_quant-subnormal-x",
        lambda: ops.abs_percentile_int_quant(_x() * 1e-39, None, _t(8.0), 9, True, False),
        "brevitas_cpp::abs_percentile_int_quant",
        "must be a normal positive finite number",
        "without scaling_min_val",
    )
    # learned_int_quant: the stock activation quantizer's learned phase in one op.
    liq = "brevitas_cpp::learned_int_quant"
    add(
        "learned_int_quant-int-x", lambda: _liq(x=_ints()), liq, "x must be a floating-point tensor"
    )
    add(
        "learned_int_quant-value-dtype",
        lambda: _liq(value=_t(0.5).double()),
        liq,
        "value must have the dtype of x",
    )
    add(
        "learned_int_quant-threshold-dtype",
        lambda: _liq(threshold=_t(127.0).double()),
        liq,
        "threshold must have the dtype of x",
    )
    add(
        "learned_int_quant-value-shape",
        lambda: _liq(value=torch.ones(3)),
        liq,
        "value of shape [3] does not broadcast to x of shape [2, 5]",
    )
    add(
        "learned_int_quant-threshold-shape",
        lambda: _liq(threshold=torch.ones(2, 1, 1)),
        liq,
        "threshold of shape [2, 1, 1] does not broadcast",
    )
    for v in (float("nan"), float("inf"), -1.0):
        add(
            f"learned_int_quant-min-val-{v}",
            lambda v=v: _liq(min_val=v),
            liq,
            "min_val must be a finite number >= 0",
        )
    add(
        "learned_int_quant-min-val-overflow",
        lambda: _liq(
            x=_x().half(),
            value=_t(0.5).half(),
            threshold=_t(127.0).half(),
            zp=_t(0.0).half(),
            min_val=1e6,
        ),
        liq,
        "min_val",
        "overflow",
    )
    for arg in ("threshold", "zp", "bw"):
        name = {"zp": "zero_point", "bw": "bit_width"}.get(arg, arg)
        add(
            f"learned_int_quant-{name}-requires-grad",
            lambda arg=arg: _liq(**{arg: _t(8.0).requires_grad_()}),
            liq,
            f"{name} must not require grad",
        )
    add("learned_int_quant-rounding-mode", lambda: _liq(mode="nearest"), liq, "nearest")
    add(
        "learned_int_quant-bit-width-shape",
        lambda: _liq(bw=torch.tensor([8.0, 8.0])),
        liq,
        "bit_width must hold exactly one value",
    )
    add(
        "learned_int_quant-device",
        lambda: _liq(value=torch.tensor(0.5, device="meta")),
        liq,
        "value is on meta but x is on cpu",
    )
    # A scale value / threshold that is not normal: int_quant's value check, under this op's name.
    add("learned_int_quant-zero-value", lambda: _liq(value=_t(0.0)), liq, NORMAL_SCALE)
    liqb = "brevitas_cpp::_learned_int_quant_backward"
    add(
        "_learned_int_quant_backward-grad-y-shape",
        lambda: _liq_backward(grad_y=torch.ones(5, 2)),
        liqb,
        "grad_y of shape [5, 2] must have the shape of x",
    )
    add(
        "_learned_int_quant_backward-grad-scale-shape",
        lambda: _liq_backward(grad_y="none", grad_scale=torch.ones(3)),
        liqb,
        "grad_scale of shape [3] must have the shape of scale",
    )
    add(
        "_learned_int_quant_backward-threshold-shape",
        lambda: _liq_backward(threshold=torch.ones(1, 5)),
        liqb,
        "threshold of shape [1, 5] does not broadcast to scale",
    )
    add(
        "float_quant-half-max-value",
        lambda: _fq(x=_x().half(), scale=_t(0.5).half(), exponent_bit_width=8, max_value=1e38),
        fq,
        "max_value",
    )
    return out
