"""Record Brevitas 0.12's minifloat (FP8) quantizers as golden numbers for test_golden_float.py.

Run by hand, from anywhere, in the environment scripts/make_brevitas_env.sh builds (Brevitas
0.12.1 beside torch 2.13), with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv
    env -u BREVITAS_JIT /tmp/brevenv/bin/python tests/quant/golden/generate_float.py

It writes brevitas_0_12_float.pt next to this file; the test reads it with plain torch and never
imports brevitas.

The cases are every quantizer class defined in brevitas.quant.experimental.float,
float_quant_ocp and float_quant_fnuz (found by importing the modules: the classes defined there
that have a proxy_class), driven through layers as users drive them:
  - a weight quantizer in QuantLinear(16, 8), a per-channel one also in QuantConv2d(3, 4, 3);
  - an activation quantizer in QuantIdentity(return_quant_tensor=True), a per-channel-2d one
    (ScalingPerOutputType.CHANNEL, scaling_stats_permute_dims (1, 0, 2, 3)) with
    let(per_channel_broadcastable_shape=(1, 4, 1, 1)) on a (2, 4, 3, 3) input; one whose scale
    starts from runtime statistics twice: as shipped (collect_stats_steps 300, a few steps, all in
    the warm-up) and with let(collect_stats_steps=3) (*_collect3: warm-up, switch, learned steps);
  - QuantLinear(16, 8) with weight_quant=Fp8e4m3WeightPerTensorFloat and
    input_quant=Fp8e4m3ActPerTensorFloat (return_quant_tensor=False), also as *_collect3;
  - three non-saturating variants (let(saturating=False)) of OCP activation quantizers.
The format-generic classes (FpOCP*, FpFNUZ*) have no bit widths, so Brevitas refuses to build
them: the refusal is recorded as a skip (with Brevitas's message), and each is recorded again
completed with a format by let() (OCP: FP4 e2m1, FNUZ: FP6 e3m2), named <class>_<format>.

Every step runs in training mode: forward, loss = sum(out * g) for a random g, backward, one SGD
step (no momentum; the layer's weight and bias at LAYER_LR, the quantizers' parameters at
QUANT_LR). Recorded per step: the input, the layer output, the quantizer's FloatQuantTensor fields
(layer.weight_quant(layer.weight) after the backward, or QuantIdentity's own output; for the
combined layer also its input quantizer's output, taken by a forward hook), g, the gradients of
the input and of every parameter, the float32 summation term of every quantizer call, and the
state_dict after the SGD step. Eval-mode outputs are recorded for the fresh layer, during training,
after it, and for a fresh layer loaded with the trained state_dict.

The inputs hit the edges of each format: weights and activations whose largest magnitude is the
format's largest value times a power of two (so the scale is a power of two and the edge values
below are exact), grid ties (x.5 ulp of a binade, ties to the even mantissa), the smallest normal
and subnormal values and the ties around them, zeros of both signs, a float32 subnormal, values
beyond the format's range (saturation; inf or NaN when not saturating) and, for the quantizers
without statistics, inf / -inf / NaN.

Every case is recorded in float32 and again in float64 (*_float64 twins: built in float32 as the
float32 case, then converted with .to(torch.float64), as `.double()` does; the same inputs in
float64). Brevitas 0.12 runs every case recorded here in float64.
"""

import inspect
import math
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

import brevitas
import brevitas.nn as bnn
import brevitas.quant.experimental.float as bfloat
import brevitas.quant.experimental.float_quant_fnuz as bfnuz
import brevitas.quant.experimental.float_quant_ocp as bocp
import torch
from brevitas.function.ops import max_float
from brevitas.inject import ExtendedInjector
from brevitas.inject.enum import ScalingPerOutputType
from brevitas.proxy import WeightFloatQuantProxyFromInjector
from brevitas.proxy.quant_proxy import QuantProxyFromInjector
from brevitas.quant_tensor import FloatQuantTensor, QuantTensor

OUT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "brevitas_0_12_float.pt")
SEED = 2025  # module initialisation
DATA_SEED = 11  # inputs and upstream gradients
LAYER_LR = 0.01  # SGD on the layer's weight and bias
QUANT_LR = 0.001  # SGD on the quantizers' learned scales
WEIGHT_STEPS = 3
ACT_STEPS = 4  # as shipped: collect_stats_steps is 300, so every step is in the warm-up
COLLECT = 3  # collect_stats_steps of the *_collect3 variants
COLLECT_STEPS = 6  # three warm-up steps, the switch to the learned scale, two learned steps
CONST_ACT_STEPS = 3

MODULES = (bfloat, bocp, bfnuz)
# The format a generic (format-less) class is completed with, per module.
GENERIC_FORMATS: Dict[str, Tuple[str, Dict[str, int]]] = {
    bocp.__name__: ("e2m1", {"bit_width": 4, "exponent_bit_width": 2, "mantissa_bit_width": 1}),
    bfnuz.__name__: ("e3m2", {"bit_width": 6, "exponent_bit_width": 3, "mantissa_bit_width": 2}),
}
PER_CHANNEL_2D = {"per_channel_broadcastable_shape": (1, 4, 1, 1)}
LINEAR: Tuple[str, List[int]] = ("QuantLinear", [16, 8])
CONV: Tuple[str, List[int]] = ("QuantConv2d", [3, 4, 3])
IDENTITY: Tuple[str, List[int]] = ("QuantIdentity", [])
INPUT_SHAPES = {"QuantLinear": [4, 16], "QuantConv2d": [2, 3, 6, 6]}
ACT_SHAPE = [4, 16]
ACT2D_SHAPE = [2, 4, 3, 3]

# torch 2.13 has dropped named tensors, but Brevitas 0.12's QuantLayerMixin.unpack_input still
# strips names from every layer input with Tensor.rename(None). For an unnamed tensor that call
# returns the tensor itself, which is all this stand-in does (it refuses any real renaming).
if not hasattr(torch.Tensor, "rename"):

    def _rename_none(self: torch.Tensor, *names: Any, **rename_map: Any) -> torch.Tensor:
        if names != (None,) or rename_map:
            raise NotImplementedError("named tensors are not available in this torch")
        return self

    torch.Tensor.rename = _rename_none


# ---- the stock quantizers ------------------------------------------------------------------------


def proxy_class_of(cls: type) -> Optional[type]:
    try:
        return cls.proxy_class
    except Exception:  # dependencies' DependencyError: a mixin without a proxy
        return None


def enumerate_quantizers() -> Tuple[List[Dict[str, str]], Dict[str, str]]:
    """Every quantizer class defined in MODULES (role weight or act), and every other class found
    in their namespaces with why it is not one of the modules' quantizers."""
    quantizers: List[Dict[str, str]] = []
    others: Dict[str, str] = {}
    for module in MODULES:
        for name, obj in vars(module).items():
            if not inspect.isclass(obj):
                continue
            qual = f"{module.__name__}.{name}"
            if not issubclass(obj, ExtendedInjector):
                others[qual] = f"not an injector ({obj.__module__}.{obj.__qualname__})"
            elif obj.__module__ != module.__name__:
                others[qual] = f"imported from {obj.__module__}"
            elif proxy_class_of(obj) is None:
                others[qual] = "a mixin: no proxy_class"
            else:
                proxy = proxy_class_of(obj)
                role = "weight" if issubclass(proxy, WeightFloatQuantProxyFromInjector) else "act"
                quantizers.append({"module": module.__name__, "name": name, "role": role})
    return quantizers, others


def quantizer_class(ref: Dict[str, Any]) -> type:
    module = next(m for m in MODULES if m.__name__ == ref["module"])
    q = getattr(module, ref["name"])
    return q.let(**ref["let"]) if ref["let"] else q


def qref(module: str, name: str, let: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """A quantizer as plain data: its module, class name and let() keywords."""
    return {"module": module, "name": name, "let": dict(let or {})}


# ---- building a layer ----------------------------------------------------------------------------


def build_layer(spec: Dict[str, Any]) -> torch.nn.Module:
    layer_cls = getattr(bnn, spec["layer"])
    kwargs = dict(spec["layer_kwargs"])
    for key, ref in spec["quantizers"].items():
        kwargs[key] = quantizer_class(ref)
    return layer_cls(*spec["layer_args"], **kwargs)


def tensor_quants(layer: torch.nn.Module) -> Dict[str, torch.nn.Module]:
    """The FloatQuant of each quantizer of the layer, by the layer's keyword."""
    out = {}
    for key in ("weight_quant", "input_quant", "act_quant"):
        proxy = getattr(layer, key, None)
        if proxy is None or not proxy.is_quant_enabled:
            continue
        if key == "weight_quant":
            out[key] = proxy.tensor_quant
        else:
            out[key] = proxy.fused_activation_quant_proxy.tensor_quant
    return out


def format_of(tq: torch.nn.Module) -> Dict[str, Any]:
    """The minifloat format of a FloatQuant and how its scale is found."""
    e = tq.exponent_bit_width()
    m = tq.mantissa_bit_width()
    bias = tq.exponent_bias()
    fmax = max_float(e, tq.pre_compute_max_mantissa(), bias)
    clamp = tq.float_clamp_impl
    if clamp.max_available_float is not None:
        fmax = torch.min(fmax, clamp.max_available_float())
    return {
        "exponent_bit_width": int(e),
        "mantissa_bit_width": int(m),
        "exponent_bias": int(bias),
        "max_value": float(fmax),
        "saturating": bool(clamp.saturating),
        "inf_values": clamp.inf_values,
        "nan_values": clamp.nan_values,
        "scaling": type(tq.scaling_impl).__name__,
    }


# ---- the cases -----------------------------------------------------------------------------------


def case(
    name: str,
    layer: Tuple[str, List[int]],
    quantizers: Dict[str, Dict[str, Any]],
    steps: int,
    collect: Optional[int] = None,
    input_shape: Optional[List[int]] = None,
    covers: Optional[List[str]] = None,
) -> Dict[str, Any]:
    layer_name, args = layer
    kwargs: Dict[str, Any] = {"return_quant_tensor": layer_name == "QuantIdentity"}
    if layer_name != "QuantIdentity":
        kwargs["bias"] = True
        # Brevitas's QuantLinear / QuantConv2d default to an int8 weight quantizer; a case that
        # names only an input quantizer would get it. Every case here names its weight quantizer.
        assert "weight_quant" in quantizers
    return {
        "name": name,
        "dtype": "float32",
        "layer": layer_name,
        "layer_args": list(args),
        "layer_kwargs": kwargs,
        "quantizers": quantizers,
        "input_shape": list(input_shape or INPUT_SHAPES.get(layer_name, ACT_SHAPE)),
        "steps": steps,
        "collect": collect,
        # eval-mode outputs besides fresh / final / reloaded: at the last warm-up step and at the
        # switch to the learned scale
        "eval_at": [collect - 1, collect] if collect and collect < steps else [],
        "covers": covers or [],
    }


def probe(spec: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Builds the layer once: the format of each quantizer (raises when Brevitas refuses)."""
    torch.manual_seed(SEED)
    layer = build_layer(spec)
    return {key: format_of(tq) for key, tq in tensor_quants(layer).items()}


def probed(specs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The cases, once Brevitas has built each of their layers."""
    for spec in specs:
        probe(spec)
    return specs


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0]


def cases_of_quantizer(q: Dict[str, str], let: Dict[str, Any], suffix: str) -> List[Dict[str, Any]]:
    """The cases that drive one quantizer class (completed by `let` for a generic class)."""
    cls = getattr(next(m for m in MODULES if m.__name__ == q["module"]), q["name"])
    per_channel = cls.scaling_per_output_type == ScalingPerOutputType.CHANNEL
    base = q["name"] + suffix
    covers = [f"{q['module']}.{q['name']}"]
    if q["role"] == "weight":
        ref = qref(q["module"], q["name"], let)
        out = [case(base, LINEAR, {"weight_quant": ref}, WEIGHT_STEPS, covers=covers)]
        if per_channel:
            out.append(
                case(base + "_conv", CONV, {"weight_quant": ref}, WEIGHT_STEPS, covers=covers)
            )
        return out
    lets = dict(let, **PER_CHANNEL_2D) if per_channel else dict(let)
    shape = ACT2D_SHAPE if per_channel else ACT_SHAPE
    ref = qref(q["module"], q["name"], lets)
    scaling = probe(case(base, IDENTITY, {"act_quant": ref}, 1))["act_quant"]["scaling"]
    if scaling != "ParameterFromRuntimeStatsScaling":
        return [case(base, IDENTITY, {"act_quant": ref}, CONST_ACT_STEPS, 0, shape, covers)]
    collect3 = qref(q["module"], q["name"], dict(lets, collect_stats_steps=COLLECT))
    return [
        case(base, IDENTITY, {"act_quant": ref}, ACT_STEPS, 300, shape, covers),
        case(
            base + "_collect3",
            IDENTITY,
            {"act_quant": collect3},
            COLLECT_STEPS,
            COLLECT,
            shape,
            covers,
        ),
    ]


def all_cases() -> Tuple[List[Dict[str, Any]], Dict[str, str], List[Dict[str, str]], Dict]:
    quantizers, others = enumerate_quantizers()
    cases: List[Dict[str, Any]] = []
    skipped: Dict[str, str] = {}
    for q in quantizers:
        qual = f"{q['module']}.{q['name']}"
        try:
            cases += probed(cases_of_quantizer(q, {}, ""))
            continue
        except Exception as error:  # Brevitas refuses the class as shipped
            skipped[qual] = f"Brevitas 0.12.1 cannot build it as shipped: {describe(error)}"
        if q["module"] in GENERIC_FORMATS:
            fmt_name, fmt = GENERIC_FORMATS[q["module"]]
            try:
                cases += probed(cases_of_quantizer(q, fmt, "_" + fmt_name))
            except Exception as error:
                skipped[qual] += f"; completed as {fmt_name}: {describe(error)}"
    float_mod = bfloat.__name__
    ocp = bocp.__name__
    weight = qref(float_mod, "Fp8e4m3WeightPerTensorFloat")
    cases += [
        case(
            "QuantLinear_Fp8e4m3WeightPerTensorFloat_Fp8e4m3ActPerTensorFloat",
            LINEAR,
            {"weight_quant": weight, "input_quant": qref(float_mod, "Fp8e4m3ActPerTensorFloat")},
            ACT_STEPS,
            300,
        ),
        case(
            "QuantLinear_Fp8e4m3WeightPerTensorFloat_Fp8e4m3ActPerTensorFloat_collect3",
            LINEAR,
            {
                "weight_quant": weight,
                "input_quant": qref(
                    float_mod, "Fp8e4m3ActPerTensorFloat", {"collect_stats_steps": COLLECT}
                ),
            },
            COLLECT_STEPS,
            COLLECT,
        ),
        case(
            "Fp8e4m3OCPAct_nonsaturating",
            IDENTITY,
            {"act_quant": qref(ocp, "Fp8e4m3OCPAct", {"saturating": False})},
            CONST_ACT_STEPS,
            0,
        ),
        case(
            "Fp8e5m2OCPAct_nonsaturating",
            IDENTITY,
            {"act_quant": qref(ocp, "Fp8e5m2OCPAct", {"saturating": False})},
            CONST_ACT_STEPS,
            0,
        ),
        case(
            "Fp8e5m2OCPActPerTensorFloat_nonsaturating_collect3",
            IDENTITY,
            {
                "act_quant": qref(
                    ocp,
                    "Fp8e5m2OCPActPerTensorFloat",
                    {"saturating": False, "collect_stats_steps": COLLECT},
                )
            },
            COLLECT_STEPS,
            COLLECT,
        ),
    ]
    return cases, skipped, quantizers, others


# ---- inputs that hit the edges of a format -------------------------------------------------------


def edge_multiples(fmt: Dict[str, Any]) -> List[float]:
    """Values in units of the scale: grid ties (to the even mantissa), the smallest normal and
    subnormal values and the ties around them, zeros of both signs."""
    m = fmt["mantissa_bit_width"]
    half = 2.0 ** -(m + 1)  # half an ulp of the binade [1, 2)
    sub = 2.0 ** (1 - fmt["exponent_bias"] - m)  # smallest subnormal
    min_normal = 2.0 ** (1 - fmt["exponent_bias"])
    return [
        1 + half,  # tie between 1 and 1 + 2^-m: to 1
        -(1 + 3 * half),  # tie between 1 + 2^-m and 1 + 2^(1-m): to the latter
        2 + 2 * half,  # tie in the binade [2, 4): to 2
        min_normal,
        min_normal * (1 + half),  # tie just above the smallest normal: to it
        sub,
        -0.5 * sub,  # tie between 0 and the smallest subnormal: to -0
        1.5 * sub,  # tie between one and two smallest subnormals: to two
        0.25 * sub,  # rounds to 0
        0.0,
        -0.0,
    ]


def top_power_of_two(fmt_max: float, low: float) -> float:
    """fmt_max * 2^-k in [low, 2 * low): a largest magnitude whose scale is a power of two."""
    k = math.floor(math.log2(fmt_max / low))
    return fmt_max * 2.0**-k


FLOAT32_SUBNORMAL = 1e-40


def design_weight(weight: torch.Tensor, fmt: Dict[str, Any], per_channel: bool) -> None:
    """Overwrites the weight in place so that it hits the format's edges. With a statistics scale
    (abs max over the tensor or each output channel) the largest magnitude of each channel is the
    format's largest value times a power of two, so the scale and the edge values are exact;
    with the constant scale 1 some values lie beyond the range (saturation)."""
    rows = weight.detach().view(weight.shape[0], -1)
    edges = edge_multiples(fmt)
    fmt_max = fmt["max_value"]
    with torch.no_grad():
        if fmt["scaling"] == "ConstScaling":
            rows[0, 0] = 2 * fmt_max
            rows[1, 0] = -1000 * fmt_max
            rows[2, 0] = fmt_max
            for r in range(3):
                sign = 1.0 if r % 2 == 0 else -1.0
                rows[r, 1 : 1 + len(edges)] = torch.tensor(edges) * sign
                rows[r, 1 + len(edges)] = FLOAT32_SUBNORMAL * sign
            return
        top = top_power_of_two(fmt_max, 0.5)  # above the init's bound 1/sqrt(fan_in) <= 0.25
        for r in range(rows.shape[0]):
            channel_top = top * 2.0 ** -(r % 2) if per_channel else top
            sign = 1.0 if r % 2 == 0 else -1.0
            rows[r, 0] = channel_top * sign
            if r < 3:
                scale = channel_top / fmt_max
                rows[r, 1 : 1 + len(edges)] = torch.tensor(edges) * scale * sign
                rows[r, 1 + len(edges)] = FLOAT32_SUBNORMAL * sign


def design_act(
    gen: torch.Generator,
    shape: List[int],
    fmt: Dict[str, Any],
    phase: str,
    step: int,
) -> torch.Tensor:
    """An activation input. phase 'stats': the statistics set the scale, as for the weights;
    'learned': the scale is learned, some values lie far beyond it (saturating formats only);
    'const': scale 1, values beyond the range, and on step 1 inf, -inf and NaN; 'specials': an
    eval input with inf, -inf, NaN, zeros, huge and tiny values."""
    per_channel = len(shape) == 4
    x = (torch.randn(shape, generator=gen) * 0.6 + 0.2 * math.sin(step / 2.0)).clamp(-1.9, 1.9)
    # channel-major rows: per-channel statistics reduce over everything but dim 1
    rows = x.permute(1, 0, 2, 3).reshape(shape[1], -1) if per_channel else x.reshape(1, -1)
    edges = torch.tensor(edge_multiples(fmt))
    fmt_max = fmt["max_value"]
    sign = 1.0 if step % 2 == 0 else -1.0
    n = len(edges)
    if phase == "const":
        specials = [2 * fmt_max, -1000 * fmt_max, fmt_max, FLOAT32_SUBNORMAL]
        if step == 1:
            specials += [math.inf, -math.inf, math.nan]
        rows[0, :n] = edges * sign
        rows[0, n : n + len(specials)] = torch.tensor(specials)
    elif phase == "specials":
        values = [math.inf, -math.inf, math.nan, 0.0, -0.0, 1e30, -1e30, FLOAT32_SUBNORMAL]
        rows[0, : len(values)] = torch.tensor(values)
    else:
        top = top_power_of_two(fmt_max, 4.0)  # above the random values' bound 1.9
        for c in range(rows.shape[0]):
            channel_top = top * 2.0 ** -(c % 2)
            scale = channel_top / fmt_max
            if phase == "stats":
                rows[c, 0] = channel_top * sign
                rows[c, 1 : 1 + n] = edges * scale * sign
                rows[c, 1 + n] = FLOAT32_SUBNORMAL * sign
            else:  # learned: beyond the learned range, and the edges of the warm-up scale
                # Not saturating, a value beyond the range becomes inf or NaN, whose gradient
                # makes Brevitas's learned scale inf (then NaN) at the next SGD step: such
                # values go to the eval inputs only, and training stays in range.
                beyond = 4.0 if fmt["saturating"] else 0.9
                rows[c, 0] = beyond * channel_top * sign
                rows[c, 1] = -0.75 * beyond * channel_top * sign
                rows[c, 2 : 2 + n] = edges * scale * sign
    if per_channel:
        return rows.reshape(shape[1], shape[0], *shape[2:]).permute(1, 0, 2, 3).contiguous()
    return rows.reshape(shape).clone()


# ---- recording -----------------------------------------------------------------------------------


def snap(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    # clone: torch.save would otherwise store the whole storage behind a view
    return None if t is None else t.detach().clone()


def state_of(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    return {k: snap(v) for k, v in module.state_dict().items()}


def qt_fields(qt: Any) -> Dict[str, Any]:
    """Every field of a FloatQuantTensor, as plain data."""
    assert isinstance(qt, FloatQuantTensor), type(qt).__name__
    return {
        "value": snap(qt.value),
        "scale": snap(qt.scale),
        "zero_point": snap(qt.zero_point),
        "exponent_bit_width": snap(qt.exponent_bit_width),
        "mantissa_bit_width": snap(qt.mantissa_bit_width),
        "exponent_bias": snap(qt.exponent_bias),
        "saturating": bool(qt.saturating),
        "inf_values": qt.inf_values,
        "nan_values": qt.nan_values,
        "signed": bool(qt.signed),
        "training": bool(qt.training),
    }


def is_quantizer_param(name: str) -> bool:
    """Learned tensors of the quantizers (scales) live under a *_quant proxy."""
    return any(part.endswith("_quant") for part in name.split("."))


class QuantizerCalls:
    """Collects, for every quantizer call of a forward, its output value and scale and the
    upstream gradient reaching that output (Brevitas calls its proxies as modules), for the
    step's summation term and for the input quantizer's output of the combined layer."""

    def __init__(self, layer: torch.nn.Module) -> None:
        self.calls: List[Dict[str, Any]] = []
        self.handles = [
            m.register_forward_hook(self.hook)
            for m in layer.modules()
            if isinstance(m, QuantProxyFromInjector)
        ]
        self.input_proxy = getattr(layer, "input_quant", None)

    def hook(self, module, args, out) -> None:
        if not isinstance(out, QuantTensor):
            return
        call = {"value": out.value.detach(), "scale": out.scale.detach(), "g": None, "qt": None}
        if module is self.input_proxy:
            call["qt"] = qt_fields(out)
        if out.value.requires_grad:

            def keep_grad(grad: torch.Tensor) -> None:
                call["g"] = grad.detach() if call["g"] is None else call["g"] + grad.detach()

            out.value.register_hook(keep_grad)
        self.calls.append(call)

    def take(self) -> List[Dict[str, Any]]:
        calls, self.calls = self.calls, []
        return calls


def summation_term(calls: List[Dict[str, Any]]) -> float:
    """sum |g| * max(1, max |value / scale|) over the step's quantizer calls (finite elements
    only): times the dtype's eps, the bound of what reordering the sums inside the fused
    quantizer ops can move the gradients by (tests/quant/golden/test_golden.py's grad_atol)."""
    total = 0.0
    for call in calls:
        if call["g"] is None:
            continue
        q = (call["value"] / call["scale"]).abs()
        q = q[q.isfinite()]
        q_max = float(q.max()) if q.numel() else 1.0
        g = call["g"].abs()
        total += float(g[g.isfinite()].sum()) * max(1.0, q_max)
    return total


def stack(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Per-step dicts -> one entry per key: a stacked tensor when every step has a tensor of the
    same shape (fewer, larger storages keep the file small), otherwise the list of steps."""
    keys: List[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    out = {}
    for k in keys:
        col = [row.get(k) for row in rows]
        if all(isinstance(c, torch.Tensor) for c in col) and len({c.shape for c in col}) == 1:
            out[k] = torch.stack(col)
        else:
            out[k] = col
    return out


class Recorder:
    """Runs one case on Brevitas and collects what the test replays and compares."""

    def __init__(self, spec: Dict[str, Any]) -> None:
        self.spec = spec
        self.dtype = getattr(torch, spec["dtype"])
        self.gen = torch.Generator().manual_seed(DATA_SEED)
        torch.manual_seed(SEED)
        self.layer = build_layer(spec)
        self.formats = {k: format_of(tq) for k, tq in tensor_quants(self.layer).items()}
        if "weight_quant" in self.formats:
            per_channel = self.formats["weight_quant"]["scaling"] != "ConstScaling" and (
                quantizer_class(spec["quantizers"]["weight_quant"]).scaling_per_output_type
                == ScalingPerOutputType.CHANNEL
            )
            design_weight(self.layer.weight, self.formats["weight_quant"], per_channel)
        self.record: Dict[str, Any] = {"spec": spec, "formats": self.formats}
        # Both sides start from this state, loaded back as the test loads it (a load
        # re-initialises Brevitas's quantizers, so both run it).
        init_state = state_of(self.layer)
        self.record["init_state"] = init_state
        self.layer.load_state_dict(init_state, strict=False)
        self.layer.to(self.dtype)
        self.layer.train()
        self.record["state_keys"] = list(self.layer.state_dict().keys())
        self.record["param_names"] = [n for n, _ in self.layer.named_parameters()]

    @property
    def act_format(self) -> Optional[Dict[str, Any]]:
        return self.formats.get("act_quant", self.formats.get("input_quant"))

    def act_phase(self, step: int) -> str:
        fmt = self.act_format
        if fmt["scaling"] != "ParameterFromRuntimeStatsScaling":
            return "const"
        return "stats" if step < self.spec["collect"] else "learned"

    def make_input(self, step: int) -> torch.Tensor:
        shape = self.spec["input_shape"]
        if self.act_format is None:  # a weight quantizer only: a plain random input
            x = torch.randn(shape, generator=self.gen)
        else:
            x = design_act(self.gen, shape, self.act_format, self.act_phase(step), step)
        return x.to(self.dtype)

    def eval_inputs(self) -> List[torch.Tensor]:
        shape = self.spec["input_shape"]
        if self.act_format is None:  # the weight's eval quantization does not depend on it
            return [torch.randn(shape, generator=self.gen).to(self.dtype)]
        phase = "const" if self.act_phase(0) == "const" else "stats"
        regular = design_act(self.gen, shape, self.act_format, phase, 0)
        specials = design_act(self.gen, shape, self.act_format, "specials", 0)
        return [regular.to(self.dtype), specials.to(self.dtype)]

    def quant_fields(self, layer: torch.nn.Module, out: Any) -> Dict[str, Any]:
        """The quantizer's FloatQuantTensor: the weight proxy called on the weight, or the
        QuantIdentity's output."""
        if self.spec["layer"] == "QuantIdentity":
            return qt_fields(out)
        with torch.no_grad():
            return qt_fields(layer.weight_quant(layer.weight))

    def eval_rows(self, layer: torch.nn.Module, label: str) -> List[Dict[str, Any]]:
        """Eval-mode outputs on each eval input, one row each: the layer output and the
        quantizer's FloatQuantTensor fields."""
        layer.eval()
        rows = []
        with torch.no_grad():
            for i, x in enumerate(self.eval_in):
                out = layer(x)
                row = {"label": label, "input": i}
                row["out"] = snap(out.value if isinstance(out, QuantTensor) else out)
                row.update({"qt:" + k: v for k, v in self.quant_fields(layer, out).items()})
                if "input_quant" in self.formats:  # eval mode: calling it changes nothing
                    row.update(
                        {"qt_in:" + k: v for k, v in qt_fields(layer.input_quant(x)).items()}
                    )
                if self.spec["layer"] != "QuantIdentity":
                    operand = row.get("qt_in:value", x)
                    ref = self.reference_output(operand, row["qt:value"], layer.bias)
                    assert torch.equal(ref.nan_to_num(0.0), row["out"].nan_to_num(0.0)), label
                rows.append(row)
        layer.train()
        return rows

    def reference_output(self, x: torch.Tensor, wq: torch.Tensor, bias: torch.Tensor):
        """What the layer computes from its quantized operands: Brevitas's float op on them."""
        if self.spec["layer"] == "QuantLinear":
            return torch.nn.functional.linear(x, wq, bias)
        return torch.nn.functional.conv2d(x, wq, bias)

    def run(self) -> Dict[str, Any]:
        spec, layer = self.spec, self.layer
        self.eval_in = self.eval_inputs()
        self.record["eval_inputs"] = torch.stack([snap(x) for x in self.eval_in])
        evals = self.eval_rows(layer, "fresh")
        named = list(layer.named_parameters())
        groups = [
            {"params": [p for n, p in named if not is_quantizer_param(n)], "lr": LAYER_LR},
            {"params": [p for n, p in named if is_quantizer_param(n)], "lr": QUANT_LR},
        ]
        groups = [g for g in groups if g["params"]]
        opt = torch.optim.SGD(groups) if groups else None
        self.record["lr"] = {"layer": LAYER_LR, "quant": QUANT_LR}
        calls = QuantizerCalls(layer)
        rows = []
        for k in range(spec["steps"]):
            x = self.make_input(k).requires_grad_()
            row: Dict[str, Any] = {"in:x": snap(x)}
            calls.take()  # drop the calls of eval forwards and of quant_fields
            bias_before = snap(getattr(layer, "bias", None))
            out = layer(x)
            value = out.value if isinstance(out, QuantTensor) else out
            row["out"] = snap(value)
            g = torch.randn(value.shape, generator=self.gen).to(self.dtype)
            row["g"] = g
            (value * g).sum().backward()
            step_calls = calls.take()
            row["summation_term"] = torch.tensor(summation_term(step_calls), dtype=torch.float64)
            for c in step_calls:
                if c["qt"] is not None:
                    row.update({"qt_in:" + f: v for f, v in c["qt"].items()})
            row.update({"qt:" + f: v for f, v in self.quant_fields(layer, out).items()})
            if spec["layer"] != "QuantIdentity":
                operand = row.get("qt_in:value", row["in:x"])
                ref = self.reference_output(operand, row["qt:value"], bias_before)
                assert torch.equal(ref, row["out"]), f"{spec['name']}: output != float op"
            row["grad:x"] = snap(x.grad)
            for name, p in named:
                row["grad:param:" + name] = snap(p.grad)
            if opt is not None:
                opt.step()
                opt.zero_grad(set_to_none=True)
            for key, v in state_of(layer).items():
                row["state:" + key] = v
            rows.append(row)
            if k in spec["eval_at"]:
                evals += self.eval_rows(layer, f"step {k}")
        for h in calls.handles:
            h.remove()
        self.record["steps"] = stack(rows)
        self.record["n_steps"] = spec["steps"]
        evals += self.eval_rows(layer, "final")
        self.record["final_state"] = state_of(layer)
        # A fresh layer, started as this one was, loaded with the trained state_dict.
        torch.manual_seed(SEED)
        fresh = build_layer(spec)
        fresh.load_state_dict(self.record["init_state"], strict=False)
        fresh.to(self.dtype)
        fresh.load_state_dict(self.record["final_state"], strict=False)
        fresh.train()
        evals += self.eval_rows(fresh, "reloaded")
        self.record["evals"] = stack(evals)
        return self.record


def float64_variant(spec: Dict[str, Any]) -> Dict[str, Any]:
    return dict(spec, name=spec["name"] + "_float64", dtype="float64")


def record_each(specs: List[Dict[str, Any]], log: Callable[[str], None]) -> Dict[str, Any]:
    out = {}
    for spec in specs:
        out[spec["name"]] = Recorder(spec).run()
        log(f"recorded {spec['dtype']} {spec['name']}")
    return out


def main() -> None:
    assert "BREVITAS_JIT" not in os.environ, "record with BREVITAS_JIT unset"
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    specs, skipped, quantizers, others = all_cases()
    names = [s["name"] for s in specs]
    assert len(set(names)) == len(names), "duplicate case names"
    covered = {c for s in specs for c in s["covers"]}
    for q in quantizers:
        qual = f"{q['module']}.{q['name']}"
        assert qual in covered or qual in skipped, f"{qual} is neither recorded nor skipped"
    cases = record_each(specs, print)
    cases64 = record_each([float64_variant(s) for s in specs], print)
    golden = {
        "brevitas": brevitas.__version__,
        "torch": str(torch.__version__),
        "seed": SEED,
        "data_seed": DATA_SEED,
        "quantizers": quantizers,
        "not_quantizers": others,
        "skipped": skipped,
        "cases": cases,
        "cases_float64": cases64,
    }
    torch.save(golden, OUT_FILE)
    print(
        f"wrote {OUT_FILE}: {os.path.getsize(OUT_FILE)} bytes, {len(quantizers)} quantizer "
        f"classes ({len(skipped)} skipped as shipped), {len(cases)} float32 cases, "
        f"{len(cases64)} float64 cases"
    )


if __name__ == "__main__":
    main()
