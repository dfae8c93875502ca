"""Comparing against float outputs recorded by Brevitas 0.12 on another machine, at the precision
the float kernels define (used by test_golden_models.py and tests/nn/test_quant_{rnn,mha,sdpa}.py).

The convolutions and matrix products (ATen, oneDNN, BLAS) of another CPU or torch version sum in
another order and differ in the last bits; a value sitting at a rounding boundary then lands one
quantization step away. So recorded outputs are compared within KERNEL_ULPS ulps of the tensor's
largest magnitude, a quantized value whose scale was recorded (a QuantTensor's) may be one step
off in at most 1 % of its elements, and each replay also runs under foreign_kernels.py (the
`float_kernels` fixture), which moves every such kernel result by up to an ulp as another CPU
would. What the library computes itself is checked bit for bit in tests/quant/golden; state that
no float kernel has touched (initial and loaded state_dicts) is compared bit for bit by the
callers.

Two rules for what a last bit can do further on:
- gradients (assert_grad_close): within rtol plus the step's summation bound, eps32 * sum|terms|
  of every scale and bit-width gradient the fused quantizer ops sum (SummationBound, measured on
  the replay, or the bound test_golden_models.py recorded), never tighter than KERNEL_ULPS ulps;
- an unquantized output of a quant layer (LayerOperands): when a runtime statistic's last bit
  moved a scale, one operand (an Int32Bias element, an input element) may round the other way:
  the output may then differ by exactly what that one operand one step away moves (a whole
  channel by the accumulator step, or one position by input step x a weight column), in one
  operand per output. A scaling or rounding bug moves every element and fits no single operand.
  That step's gradients are not compared (the flipped rounding changes a scale-gradient term by
  a whole |g|); an OperandFlip warning records it, and a replay may have one such step."""

import importlib.util
import os
import warnings
from typing import Any, Dict, Optional

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

HERE = os.path.dirname(os.path.abspath(__file__))

# 64 ulps of a tensor's largest magnitude bound the summation-order differences of these small
# convolutions and products with a wide margin.
KERNEL_ULPS = 64
# QuantTensor fields other than the value, as flatten() in the test files names them.
QUANT_FIELDS = ("scale", "zero_point", "bit_width")


def _load_foreign_kernels():
    # pytest runs with --import-mode=importlib: sibling files are loaded by path.
    spec = importlib.util.spec_from_file_location(
        "nn_golden_foreign_kernels", os.path.join(HERE, "foreign_kernels.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fk = _load_foreign_kernels()


def float_kernels_fixture(seed: int):
    """A test file's `float_kernels` fixture (assign it to that name): every replay runs once on
    this machine's kernels and once under ForeignFloatKernels(seed)."""

    @pytest.fixture(params=["native", "foreign"])
    def float_kernels(request):
        """native: this machine's float kernels. foreign: every convolution and matrix-product
        result (forward and backward) moved by up to an ulp (foreign_kernels.py), standing in for
        another CPU or torch version, under which the same comparisons must hold."""
        if request.param == "native":
            yield
            return
        with fk.ForeignFloatKernels(seed=seed):
            yield

    return float_kernels


def check_like(actual: Any, expected: torch.Tensor, what: str) -> None:
    assert isinstance(actual, torch.Tensor), f"{what}: got {actual!r}, want a tensor"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, want {expected.dtype}"
    assert actual.shape == expected.shape, (
        f"{what}: shape {tuple(actual.shape)}, want {tuple(expected.shape)}"
    )


def kernel_tolerance(expected: torch.Tensor) -> float:
    """KERNEL_ULPS ulps of the tensor's largest magnitude (0 for integer tensors)."""
    eps = torch.finfo(expected.dtype).eps if expected.is_floating_point() else 0.0
    return KERNEL_ULPS * eps * float(expected.abs().max())


class LayerOperands:
    """The quantized operands of a quant layer's latest call, kept by forward hooks on its input,
    weight and bias quantizers (only on this layer's, so every other quantizer keeps its own
    path): the input's scale, the quantized weight and the bias's scale, the accumulator step of
    an Int32Bias. `channel_dim` is the output's channel dimension (-1: a linear layer's)."""

    def __init__(self, layer: torch.nn.Module, channel_dim: int = -1) -> None:
        self.channel_dim = channel_dim
        self.seen: Dict[str, Any] = {}
        for name in ("input_quant", "weight_quant", "bias_quant"):
            getattr(layer, name).register_forward_hook(self._keeper(name))

    def _keeper(self, name: str):
        def keep(module, args, out) -> None:
            if hasattr(out, "scale") and hasattr(out, "value"):
                self.seen[name] = (out.value.detach(), out.scale.detach())

        return keep

    def snapshot(self) -> "LayerOperands":
        """The operands of the latest call, kept apart from later calls (no hooks)."""
        copy = LayerOperands.__new__(LayerOperands)
        copy.channel_dim, copy.seen = self.channel_dim, dict(self.seen)
        return copy

    def one_flip(self, diff: torch.Tensor, tol: float) -> Optional[str]:
        """Which quantized operand one step away moves every element of diff beyond tol, if one
        does: a bias element (every position of its channel by the bias step, the accumulator
        step of an Int32Bias, with one sign) or an input element (its position, each channel c
        by input step x weight[c, j])."""
        d = diff.movedim(self.channel_dim, -1)
        d = d.reshape(-1, d.shape[-1])
        off = d.abs() > tol
        rows = off.any(dim=1).nonzero().flatten()
        cols = off.any(dim=0).nonzero().flatten()
        if "bias_quant" in self.seen and len(cols) == 1:
            step = self.seen["bias_quant"][1].flatten()
            step = step[int(cols[0])] if step.numel() > 1 else step[0]
            column = d[:, int(cols[0])]
            if any(bool(((column - sign * step).abs() <= tol).all()) for sign in (1, -1)):
                return f"bias element {int(cols[0])} (step {float(step):.3g})"
        if "input_quant" in self.seen and "weight_quant" in self.seen and len(rows) == 1:
            weight = self.seen["weight_quant"][0]
            if weight.dim() > 2 and weight[0, 0].numel() != 1:  # a kxk convolution: no such row
                return None
            moves = self.seen["input_quant"][1].flatten()[0] * weight.reshape(weight.shape[0], -1)
            row = d[int(rows[0])].unsqueeze(1)  # (channels, 1) against (channels, inputs)
            for sign in (1, -1):
                fits = ((row - sign * moves).abs() <= tol).all(dim=0).nonzero().flatten()
                if len(fits):
                    return f"input element {int(fits[0])} at output position {int(rows[0])}"
        return None


def assert_at_kernel_precision(
    actual: Optional[torch.Tensor],
    expected: Optional[torch.Tensor],
    what: str,
    step: Optional[torch.Tensor] = None,
    layer: Optional[LayerOperands] = None,
) -> Optional[str]:
    """Equal up to what the float kernels (convolution, matrix products) define: within
    KERNEL_ULPS ulps of the tensor's largest magnitude (norm-wise, as a summation-order difference
    is bounded). A quantized value (`step`: its scale) may also land one quantization step away
    where a kernel's last bit moved its input across a rounding boundary, in at most
    max(1, 1 %) of the elements. An unquantized output of a quant layer (`layer`: its operands)
    may differ by what one of its quantized operands one step away moves (LayerOperands.one_flip:
    a runtime statistic's last bit moved a scale, and one operand rounded the other way); returns
    which operand then, so that the caller can leave that step's gradients out."""
    if expected is None:
        assert actual is None, f"{what}: got a tensor, want None"
        return None
    check_like(actual, expected, what)
    a = actual.detach()
    if torch.equal(a, expected):
        return None
    tol = kernel_tolerance(expected)
    diff = (a - expected).abs()
    off = diff > tol
    if step is None:
        flip = layer.one_flip(a - expected, tol) if layer is not None and off.any() else None
        if flip is not None:
            return f"{what}: {flip}"
        assert not off.any(), (
            f"{what}: {int(off.sum())} of {expected.numel()} elements differ by "
            f"more than {KERNEL_ULPS} ulps of max|want| ({tol:.3g}); largest "
            f"{float(diff.max()):.3g}"
        )
        return None
    step_slack = 1 + KERNEL_ULPS * torch.finfo(expected.dtype).eps
    one_step = step.detach().expand_as(expected) * step_slack + tol
    assert bool((diff <= one_step).all()), (
        f"{what}: an element is more than one quantization step off"
    )
    allowed = max(1, expected.numel() // 100)
    assert int(off.sum()) <= allowed, (
        f"{what}: {int(off.sum())} of {expected.numel()} elements a "
        f"quantization step off (at most {allowed} allowed)"
    )
    return None


def assert_flat_at_kernel_precision(
    got: Dict[str, torch.Tensor],
    expected: Dict[str, torch.Tensor],
    what: str,
    layers: Optional[Dict[str, LayerOperands]] = None,
) -> Optional[str]:
    """Flattened outputs (flatten() of the recurrent and attention tests: a QuantTensor's value
    under its name, its fields under name.scale, name.zero_point, name.bit_width): the same keys,
    every tensor at kernel precision, a value with a recorded scale within one step of it, an
    output of a layer in `layers` within one operand flip of it. Returns the flip, if any."""
    assert list(got) == list(expected), f"{what}: keys {list(got)}, want {list(expected)}"
    flips = []
    for key, want in expected.items():
        is_field = key.rpartition(".")[2] in QUANT_FIELDS
        step = None if is_field else expected.get(f"{key}.scale")
        layer = (layers or {}).get(key)
        flips.append(assert_at_kernel_precision(got[key], want, f"{what} {key}", step, layer))
    return "; ".join(f for f in flips if f) or None


def assert_grad_close(
    actual: Optional[torch.Tensor],
    expected: Optional[torch.Tensor],
    what: str,
    bound: float,
    rtol: float,
) -> None:
    """A gradient: within rtol plus `bound` (the step's SummationBound, or 0), and never tighter
    than KERNEL_ULPS ulps of its largest magnitude (an element that cancels to near zero carries
    the kernels' rounding of the larger terms)."""
    if expected is None:
        assert actual is None, f"{what}: got a tensor, want None"
        return
    check_like(actual, expected, what)
    if torch.equal(actual.detach(), expected):
        return
    torch.testing.assert_close(
        actual.detach(),
        expected,
        rtol=rtol,
        atol=max(bound, kernel_tolerance(expected)),
        msg=lambda m: f"{what}: {m}",
    )


class OperandFlip(UserWarning):
    """A replay step whose output needed the one-operand-flip allowance: its gradients were not
    compared (a rounding that went the other way changes a scale-gradient term by a whole |g|,
    not by an ulp)."""


def note_flip(flip: str, flips: int) -> int:
    """Records (as an OperandFlip warning) that a step's gradients are left out, and allows one
    such step per replay; returns the new count."""
    warnings.warn(OperandFlip(f"{flip} one step away: the step's gradients are not compared"))
    assert flips == 0, f"{flip}: a second step with an operand flip (one allowed per replay)"
    return flips + 1


def _named_args(func, args, kwargs) -> Dict[str, Any]:
    schema = func._schema.arguments
    named = {a.name: a.default_value for a in schema if a.has_default_value()}
    named.update(zip([a.name for a in schema], args))
    named.update(kwargs or {})
    return named


def _scale_terms(a: Dict[str, Any], x: torch.Tensor, scale: torch.Tensor, zero_point) -> Any:
    """The terms of a scale's gradient, one per element of x: the library's own backward, with
    the scale given to every element on its own so that nothing is summed."""
    return torch.ops.brevitas_cpp._int_quant_backward(
        a["grad"],
        x,
        None,
        scale.expand_as(x).contiguous(),
        zero_point,
        a["bit_width"],
        a["signed"],
        a["narrow_range"],
        a["rounding_mode"],
        a["clamp_ste"],
        [False, True, False, False],
    )[1]


class SummationBound(TorchDispatchMode):
    """The summation bound of a training step's gradients, measured on the replay: each scale (or
    bit-width) gradient that a fused quantizer's backward sums up, Brevitas's autograd sums in
    another order, which moves it by at most eps * sum|terms| (the standard bound of a reordered
    sum; eps of the dtype, float32's in these replays). take() returns eps * sum|terms| over all
    such sums since the last take():
    the quantizer-level bound of tests/quant/golden with the terms themselves, where the recorded
    one of test_golden_models.py bounds each term by |g| * max(1, max|value / scale|). A learned
    bit width's terms (none in these cases) count as 2 |g x| (ln 2 * 2^(b-1) * scale * |g|)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0.0

    def take(self) -> float:
        total, self.total = self.total, 0.0
        return total

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._schema.name
        if name == "brevitas_cpp::_int_quant_backward":
            a = _named_args(func, args, kwargs)
            if a["x"] is not None and (a["output_mask"][1] or a["output_mask"][3]):
                with torch.no_grad():
                    terms = 0.0
                    if a["output_mask"][1]:
                        terms += float(
                            _scale_terms(a, a["x"], a["scale"], a["zero_point"]).abs().sum()
                        )
                    if a["output_mask"][3]:
                        terms += 2 * float((a["grad"] * a["x"]).abs().sum())
                self.total += torch.finfo(a["grad"].dtype).eps * terms
        elif name == "brevitas_cpp::_abs_max_int_quant_backward":
            a = _named_args(func, args, kwargs)
            w, scale = a["w"], a["scale"]
            if scale.numel() > 1:  # per channel: along channel_dim
                shape = [1] * w.dim()
                shape[a["channel_dim"]] = scale.numel()
                scale = scale.reshape(shape)
            with torch.no_grad():
                terms = _scale_terms(a, w, scale, torch.zeros((), dtype=w.dtype))
                terms = float(terms.abs().sum()) + float(a["grad_scale"].abs().sum())
            self.total += torch.finfo(w.dtype).eps * terms
        return out


class FloorInsteadOfRound(TorchDispatchMode):
    """A bug of the kind the replays exist to catch: every fused quantizer floors instead of
    rounding (rewrites the rounding_mode argument of the brevitas_cpp ops, also where a caller
    leaves it at its default "round")."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func.namespace == "brevitas_cpp":
            names = [a.name for a in func._schema.arguments]
            if "rounding_mode" in names:
                i = names.index("rounding_mode")
                default = func._schema.arguments[i].default_value
                if i < len(args):
                    args = tuple(
                        "floor" if k == i and a == "round" else a for k, a in enumerate(args)
                    )
                elif kwargs.get("rounding_mode", default) == "round":
                    kwargs["rounding_mode"] = "floor"
        return func(*args, **kwargs)
