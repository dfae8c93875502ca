"""Record Brevitas 0.12's quantizer outputs as golden numbers for test_golden.py.

Run by hand, from anywhere, in the environment scripts/make_brevitas_env.sh builds (Brevitas
0.12.1 beside torch 2.13), with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv
    /tmp/brevenv/bin/python tests/quant/golden/generate.py

It writes brevitas_0_12.pt next to this file. This is the only file of the project that imports
brevitas; the test reads the recording with plain torch. Each case is described by a plain-data
spec (quantizer name, class attributes, let() keywords, how it is driven) that is stored in the
recording too, so the test rebuilds exactly the same composition with brevitas_cpp.

A quantizer is driven the way Brevitas's proxies drive it, without layers or proxies:
  weight:        Q.let(module=layer, tracked_parameter_list=[layer.weight]).tensor_quant(weight)
  weight_input:  same, called as tensor_quant(weight, input_bit_width, input_is_signed), the
                 quantized input's format, as DecoupledWeightQuantWithInputProxyFromInjector
                 passes it (accumulator-aware quantizers)
  bias:          Q.let(module=layer, tracked_parameter_list=[layer.bias]).tensor_quant(bias, scale)
  bias_internal: same, called as tensor_quant(bias) (the quantizer computes its own scale)
  act:           Q.tensor_quant(x)
  trunc:         Q.tensor_quant(x, scale, zero_point, input_bit_width, signed)
Cases marked proxy=True (the MSE quantizers, whose search calls the proxy that owns it) are built
by their proxy instead, Q.proxy_class(layer, Q) (an nn.Identity for activations), and driven
through its tensor_quant as above.
Every step runs in training mode: forward, loss = sum(out * g) for a fixed random g, backward,
then one SGD step (no momentum) on the learned tensors. Outputs, gradients and the state_dict
after the SGD step are recorded for every step; eval-mode outputs are recorded for a fresh
quantizer, at a few points during training and after it.

Every case is recorded twice: in float32 (CASES, the numbers brevitas_cpp must match bit for bit)
and in float64 (FLOAT64_CASES, derived from CASES by float64_variant). A float64 case builds the
quantizer exactly as its float32 case does, then converts it and its layer with .to(float64) (as
`.double()` does) and feeds it float64 inputs. Its gradients are compared to 1e-6 relative: in
float64 the order in which a gradient's terms are summed no longer matters at that level, so the
comparison checks the math itself, which float32 summation rounding hides.
"""

import math
import os
import sys
from typing import Any, Dict, List, Optional, Set

import brevitas
import brevitas.inject.enum as benum
import brevitas.quant as bquant
import torch

OUT_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "brevitas_0_12.pt")
SEED = 1234
WEIGHT_LR = 0.01  # SGD on the tracked weight/bias (so the weight moves between steps)
PARAM_LR = 0.001  # SGD on the quantizer's own parameters (scales, bit widths, zero points)
BIAS_EVAL_SCALE = torch.tensor([0.004])  # the accumulator scale a bias quantizer is evaluated with
DEFAULT_COLLECT = 300  # Brevitas 0.12's collect_stats_steps for the runtime-stats act quantizers


def enum(cls: str, name: str) -> Dict[str, str]:
    """An enum member as plain data, so the test can map it to brevitas_cpp's enum."""
    return {"__enum__": cls, "name": name}


def weight(name, quantizer, layer, attrs=None, let=None, steps=3):
    return dict(
        name=name,
        quantizer=quantizer,
        kind="weight",
        layer=layer,
        attrs=attrs or {},
        let=let or {},
        steps=steps,
    )


# (input bit width, input signed) per step of a weight_input case; the first is also its eval's.
INPUT_FORMATS = [(8, True), (4, False), (6, True), (8, False)]


def weight_input(name, quantizer, layer, attrs=None, let=None, steps=4):
    """A weight quantizer that also takes the quantized input's bit width and sign."""
    spec = weight(name, quantizer, layer, attrs, let, steps)
    spec.update(kind="weight_input", input_formats=INPUT_FORMATS[:steps])
    return spec


def eval_points(collect: int, steps: int) -> List[int]:
    """Steps after which eval outputs are recorded: during warm-up, at its last step, at the
    switch to the learned scale and at the end."""
    return sorted({0, max(collect // 2, 1), collect - 1, collect, steps - 1} & set(range(steps)))


def act(
    name, quantizer, shape, attrs=None, let=None, steps=None, collect=DEFAULT_COLLECT, spread=2.0
):
    # Enough steps to cover the statistics warm-up, the switch to the learned parameter and a
    # few updates of it.
    steps = steps if steps is not None else collect + 5
    eval_at = eval_points(collect, steps)
    return dict(
        name=name,
        quantizer=quantizer,
        kind="act",
        shape=shape,
        attrs=attrs or {},
        let=let or {},
        steps=steps,
        eval_at=eval_at,
        spread=spread,
    )


def bias(name, quantizer, internal=False, let=None, steps=3):
    return dict(
        name=name,
        quantizer=quantizer,
        kind="bias_internal" if internal else "bias",
        layer=("linear", (5, 6)),
        attrs={},
        let=let or {},
        steps=steps,
    )


def trunc(name, quantizer):
    return dict(name=name, quantizer=quantizer, kind="trunc", attrs={}, let={}, steps=4)


def mse_weight(name, quantizer, layer, attrs=None, let=None, steps=3):
    """A weight quantizer built by its proxy (proxy=True): an MSE search calls the proxy that
    owns it, so it can not be built from the injector alone. Still driven through tensor_quant."""
    return dict(weight(name, quantizer, layer, attrs, let, steps), proxy=True)


def mse_act(name, quantizer, shape, attrs=None, let=None, collect=DEFAULT_COLLECT):
    """An activation quantizer built by its proxy (see mse_weight), around an nn.Identity."""
    return dict(act(name, quantizer, shape, attrs, let, collect=collect), proxy=True)


def sub_injector(name: str, **let: Any) -> Dict[str, Any]:
    """A sub-injector of brevitas.quant.base with let() settings, as plain data."""
    return {"__subinjector__": name, "let": let}


# Brevitas 0.12's MSEAsymmetricScaleSubInjector and MSEZeroPointSubInjector read dtype and device
# from the quantizer, which activation quantizers do not define: they are given explicitly.
ACT_DTYPE_DEVICE = {"dtype": {"__dtype__": "float32"}, "device": {"__device__": "cpu"}}


CONV = ("conv2d", (3, 4, 3))  # in, out, kernel: weight (4, 3, 3, 3)
LINEAR = ("linear", (6, 5))  # in, out: weight (5, 6)
ACT_SHAPE = (2, 8)  # small: 300+ steps are recorded per runtime-stats quantizer
CONV_ACT_SHAPE = (2, 3, 2, 2)

CASES: List[Dict[str, Any]] = [
    # ---- stock quantizers ----------------------------------------------------------------------
    weight("Int8WeightPerTensorFloat", "Int8WeightPerTensorFloat", CONV),
    weight("Int8WeightPerChannelFloat", "Int8WeightPerChannelFloat", CONV),
    act("Int8ActPerTensorFloat", "Int8ActPerTensorFloat", ACT_SHAPE),
    act("Uint8ActPerTensorFloat", "Uint8ActPerTensorFloat", ACT_SHAPE),
    act(
        "Int8ActPerTensorFloatMinMaxInit",
        "Int8ActPerTensorFloatMinMaxInit",
        ACT_SHAPE,
        let={"min_val": -1.5, "max_val": 1.5},
        steps=6,
        collect=0,
    ),
    act(
        "Uint8ActPerTensorFloatMaxInit",
        "Uint8ActPerTensorFloatMaxInit",
        ACT_SHAPE,
        let={"max_val": 2.0},
        steps=6,
        collect=0,
    ),
    bias("Int8Bias", "Int8Bias"),
    bias("Int16Bias", "Int16Bias"),
    bias("Int32Bias", "Int32Bias"),
    bias(
        "Int8BiasPerTensorFloatInternalScaling",
        "Int8BiasPerTensorFloatInternalScaling",
        internal=True,
    ),
    trunc("TruncTo8bit", "TruncTo8bit"),
    trunc("RoundTo8bit", "RoundTo8bit"),
    weight("ShiftedUint8WeightPerTensorFloat", "ShiftedUint8WeightPerTensorFloat", CONV),
    weight("ShiftedUint8WeightPerChannelFloat", "ShiftedUint8WeightPerChannelFloat", LINEAR),
    act("ShiftedUint8ActPerTensorFloat", "ShiftedUint8ActPerTensorFloat", ACT_SHAPE),
    weight("Int8WeightPerTensorFixedPoint", "Int8WeightPerTensorFixedPoint", LINEAR),
    weight("Int8WeightPerChannelFixedPoint", "Int8WeightPerChannelFixedPoint", CONV),
    act("Int8ActPerTensorFixedPoint", "Int8ActPerTensorFixedPoint", ACT_SHAPE),
    act("Uint8ActPerTensorFixedPoint", "Uint8ActPerTensorFixedPoint", ACT_SHAPE),
    bias(
        "Int8BiasPerTensorFixedPointInternalScaling",
        "Int8BiasPerTensorFixedPointInternalScaling",
        internal=True,
    ),
    act(
        "Uint8ActPerTensorFixedPointMaxInit",
        "Uint8ActPerTensorFixedPointMaxInit",
        ACT_SHAPE,
        let={"max_val": 2.0},
        steps=6,
        collect=0,
    ),
    weight("SignedBinaryWeightPerTensorConst", "SignedBinaryWeightPerTensorConst", LINEAR),
    act(
        "SignedBinaryActPerTensorConst",
        "SignedBinaryActPerTensorConst",
        ACT_SHAPE,
        steps=3,
        collect=0,
        spread=0.7,
    ),
    weight("SignedTernaryWeightPerTensorConst", "SignedTernaryWeightPerTensorConst", CONV),
    act(
        "SignedTernaryActPerTensorConst",
        "SignedTernaryActPerTensorConst",
        ACT_SHAPE,
        steps=3,
        collect=0,
        spread=0.7,
    ),
    # ---- user compositions (by inheritance = attrs, or by let) ---------------------------------
    weight(
        "Int4WeightPerChannelFloat_linear",
        "Int8WeightPerChannelFloat",
        LINEAR,
        attrs={"bit_width": 4},
    ),
    act(
        "Int8ActPerChannelFloat_conv",
        "Int8ActPerTensorFloat",
        CONV_ACT_SHAPE,
        attrs={
            "scaling_per_output_channel": True,
            "per_channel_broadcastable_shape": (1, 3, 1, 1),
            "scaling_stats_permute_dims": (1, 0, 2, 3),
        },
    ),
    act(
        "Int8ActPerTensorFloat_pot_let",
        "Int8ActPerTensorFloat",
        ACT_SHAPE,
        let={
            "restrict_scaling_type": enum("RestrictValueType", "POWER_OF_TWO"),
            "collect_stats_steps": 4,
        },
        collect=4,
    ),
    weight(
        "Int8WeightPerTensorFloat_pot_let",
        "Int8WeightPerTensorFloat",
        CONV,
        let={"restrict_scaling_type": enum("RestrictValueType", "POWER_OF_TWO")},
    ),
    weight(
        "Int8WeightPerTensorFloat_param_bit_width",
        "Int8WeightPerTensorFloat",
        CONV,
        let={"bit_width_impl_type": enum("BitWidthImplType", "PARAMETER")},
        steps=4,
    ),
    act(
        "Uint4ActPerTensorFloat_param_bit_width",
        "Uint8ActPerTensorFloat",
        ACT_SHAPE,
        attrs={
            "bit_width": 4,
            "bit_width_impl_type": enum("BitWidthImplType", "PARAMETER"),
            "collect_stats_steps": 5,
        },
        collect=5,
    ),
    weight(
        "Int8WeightPerChannelFloat_param_from_stats",
        "Int8WeightPerChannelFloat",
        CONV,
        attrs={"scaling_impl_type": enum("ScalingImplType", "PARAMETER_FROM_STATS")},
        steps=4,
    ),
    weight(
        "Int8WeightPerTensorFloat_param_const",
        "Int8WeightPerTensorFloat",
        LINEAR,
        let={"scaling_impl_type": enum("ScalingImplType", "PARAMETER"), "scaling_const": 0.05},
        steps=4,
    ),
    act(
        "Int8ActPerTensorFloat_p90_avg",
        "Int8ActPerTensorFloat",
        (4, 25),
        let={"high_percentile_q": 90.0, "collect_stats_steps": 6, "scaling_stats_momentum": None},
        collect=6,
    ),
    # BatchQuant: a learned multiple of the channels' mean max|x|, averaged over every batch.
    *(
        act(
            f"{sign}ActPerTensorFloatBatchQuant{d}",
            f"{sign}ActPerTensorFloatBatchQuant{d}",
            shape,
            steps=6,
            collect=0,
        )
        for sign in ("Int8", "Uint8")
        for d, shape in (("1d", (2, 3, 4)), ("2d", CONV_ACT_SHAPE))
    ),
    # ---- MSE search: stock quantizers (built by their proxy, which the search calls) ------------
    mse_weight("Int8WeightPerTensorFloatMSE", "Int8WeightPerTensorFloatMSE", CONV),
    mse_weight("Int8WeightPerChannelFloatMSE", "Int8WeightPerChannelFloatMSE", CONV),
    mse_weight("ShiftedUint8WeightPerTensorFloatMSE", "ShiftedUint8WeightPerTensorFloatMSE", CONV),
    mse_weight(
        "ShiftedUint8WeightPerChannelFloatMSE", "ShiftedUint8WeightPerChannelFloatMSE", LINEAR
    ),
    mse_weight("Int8WeightPerTensorFixedPointMSE", "Int8WeightPerTensorFixedPointMSE", LINEAR),
    mse_weight("Int8WeightPerChannelFixedPointMSE", "Int8WeightPerChannelFixedPointMSE", CONV),
    mse_act("Int8ActPerTensorFloatMSE", "Int8ActPerTensorFloatMSE", ACT_SHAPE),
    mse_act("Uint8ActPerTensorFloatMSE", "Uint8ActPerTensorFloatMSE", ACT_SHAPE),
    mse_act(
        "ShiftedUint8ActPerTensorFloatMSE",
        "ShiftedUint8ActPerTensorFloatMSE",
        ACT_SHAPE,
        let=ACT_DTYPE_DEVICE,
    ),
    mse_act(
        "ShiftedUint8ActPerTensorFixedPointMSE",
        "ShiftedUint8ActPerTensorFixedPointMSE",
        ACT_SHAPE,
        let=ACT_DTYPE_DEVICE,
    ),
    mse_act("Int8ActPerTensorFixedPointMSE", "Int8ActPerTensorFixedPointMSE", ACT_SHAPE),
    mse_act("Uint8ActPerTensorFixedPointMSE", "Uint8ActPerTensorFixedPointMSE", ACT_SHAPE),
    act("ShiftedUint8ActPerTensorFixedPoint", "ShiftedUint8ActPerTensorFixedPoint", ACT_SHAPE),
    # ---- MSE search: other methods and layouts -------------------------------------------------
    mse_weight(
        "Int8WeightPerChannelFloatMSE_fibonacci",
        "Int8WeightPerChannelFloatMSE",
        CONV,
        attrs={
            "mse_scale": sub_injector("MSESymmetricScaleSubInjector", mse_search_method="fibonacci")
        },
    ),
    mse_weight(
        "ShiftedUint8WeightPerChannelFloatMSE_fibonacci_iters8",
        "ShiftedUint8WeightPerChannelFloatMSE",
        LINEAR,
        attrs={
            "mse_scale": sub_injector(
                "MSEAsymmetricScaleSubInjector", mse_search_method="fibonacci", mse_iters=8
            ),
            "mse_zero_point": sub_injector(
                "MSEZeroPointSubInjector", mse_search_method="fibonacci", mse_iters=8
            ),
        },
    ),
    mse_weight(
        "Int8WeightPerTensorFloatMSE_grid_iters5",
        "Int8WeightPerTensorFloatMSE",
        LINEAR,
        attrs={"mse_scale": sub_injector("MSESymmetricScaleSubInjector", mse_iters=5)},
    ),
    mse_act(
        "ShiftedUint8ActPerTensorFloatMSE_fibonacci",
        "ShiftedUint8ActPerTensorFloatMSE",
        ACT_SHAPE,
        attrs={
            "mse_scale": sub_injector(
                "MSEAsymmetricScaleSubInjector", mse_search_method="fibonacci"
            ),
            "mse_zero_point": sub_injector(
                "MSEZeroPointSubInjector", mse_search_method="fibonacci"
            ),
        },
        let=dict(ACT_DTYPE_DEVICE, collect_stats_steps=6),
        collect=6,
    ),
    mse_act(
        "Int8ActPerChannelFloatMSE_conv",
        "Int8ActPerTensorFloatMSE",
        CONV_ACT_SHAPE,
        attrs={
            "scaling_per_output_channel": True,
            "per_channel_broadcastable_shape": (1, 3, 1, 1),
            "scaling_stats_permute_dims": (1, 0, 2, 3),
        },
        let={"collect_stats_steps": 6},
        collect=6,
    ),
    # ---- HQO (half-quadratic optimization) of a scale or zero point, also built by its proxy ----
    mse_weight("Int8WeightPerTensorFloatHQO", "Int8WeightPerTensorFloatHQO", CONV),
    mse_weight("Int8WeightPerChannelFloatHQO", "Int8WeightPerChannelFloatHQO", CONV),
    mse_weight("ShiftedUint8WeightPerTensorFloatHQO", "ShiftedUint8WeightPerTensorFloatHQO", CONV),
    # (Brevitas 0.12 fails on it in a convolution: the zero point's search mixes views.)
    mse_weight(
        "ShiftedUint8WeightPerChannelFloatHQO", "ShiftedUint8WeightPerChannelFloatHQO", LINEAR
    ),
    mse_act(
        "ShiftedUint8ActPerTensorFloatHQO",
        "ShiftedUint8ActPerTensorFloatHQO",
        ACT_SHAPE,
        let=dict(ACT_DTYPE_DEVICE, collect_stats_steps=6),
        collect=6,
    ),
    # ---- decoupled, weight-normalization and accumulator-aware weight quantizers ---------------
    weight("Int4WeightPerTensorFloatDecoupled", "Int4WeightPerTensorFloatDecoupled", CONV),
    weight("Int8WeightPerChannelFloatDecoupled", "Int8WeightPerChannelFloatDecoupled", CONV),
    weight(
        "Int4WeightPerTensorFixedPointDecoupled", "Int4WeightPerTensorFixedPointDecoupled", LINEAR
    ),
    weight("Int8WeightNormL2PerChannelFixedPoint", "Int8WeightNormL2PerChannelFixedPoint", CONV),
    weight_input("Int8AccumulatorAwareWeightQuant", "Int8AccumulatorAwareWeightQuant", CONV),
    weight_input(
        "Int8AccumulatorAwareZeroCenterWeightQuant",
        "Int8AccumulatorAwareZeroCenterWeightQuant",
        CONV,
    ),
    # Accumulators narrow enough for the L1-norm bound to clamp g / s.
    weight_input(
        "Int8AccumulatorAwareWeightQuant_acc12",
        "Int8AccumulatorAwareWeightQuant",
        CONV,
        let={"accumulator_bit_width": 12},
    ),
    weight_input(
        "Int8AccumulatorAwareZeroCenterWeightQuant_acc10_linear",
        "Int8AccumulatorAwareZeroCenterWeightQuant",
        LINEAR,
        let={"accumulator_bit_width": 10},
    ),
]


# ---- float64 variants --------------------------------------------------------------------------

FLOAT64_COLLECT = 3  # collect_stats_steps of the float64 runtime-stats activation variants


def uses_runtime_stats(spec: Dict[str, Any]) -> bool:
    """An activation quantizer whose scale starts from runtime statistics (Brevitas's
    ParameterFromRuntimeStatsScaling), read from the quantizer's own injector."""
    return (
        spec["kind"] == "act"
        and quantizer_class(spec).scaling_impl_type == benum.ScalingImplType.PARAMETER_FROM_STATS
    )


def float64_variant(spec: Dict[str, Any]) -> Dict[str, Any]:
    """The float64 case of a float32 case: same composition and steps, float64 throughout. A
    runtime-stats activation collects statistics for FLOAT64_COLLECT steps instead (its own case,
    named *_collect3), so that the warm-up, the switch and two learned steps fit in six steps."""
    variant = dict(spec, dtype="float64")
    if uses_runtime_stats(spec):
        steps = FLOAT64_COLLECT + 3
        variant.update(
            name=f"{spec['name']}_collect{FLOAT64_COLLECT}",
            let=dict(spec["let"], collect_stats_steps=FLOAT64_COLLECT),
            steps=steps,
            eval_at=eval_points(FLOAT64_COLLECT, steps),
        )
    return variant


# ---- building ----------------------------------------------------------------------------------


def decode(value: Any) -> Any:
    if isinstance(value, dict) and "__enum__" in value:
        return getattr(benum, value["__enum__"])[value["name"]]
    if isinstance(value, dict) and "__subinjector__" in value:
        lets = {k: decode(v) for k, v in value["let"].items()}
        return getattr(bquant.base, value["__subinjector__"]).let(**lets)
    if isinstance(value, dict) and "__dtype__" in value:
        return getattr(torch, value["__dtype__"])
    if isinstance(value, dict) and "__device__" in value:
        return torch.device(value["__device__"])
    return value


def find_quantizer(name: str):
    # Some, e.g. Int8WeightPerChannelFixedPoint, are left out of their module's __all__ and so
    # are not re-exported by brevitas.quant.
    for module in (
        bquant,
        bquant.scaled_int,
        bquant.fixed_point,
        bquant.shifted_scaled_int,
        bquant.binary,
        bquant.ternary,
    ):
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"no Brevitas quantizer named {name}")


def quantizer_class(spec: Dict[str, Any]):
    base = find_quantizer(spec["quantizer"])
    attrs = {k: decode(v) for k, v in spec["attrs"].items()}
    lets = {k: decode(v) for k, v in spec["let"].items() if v is not None}
    q = type(spec["name"], (base,), attrs) if attrs else base
    return q.let(**lets) if lets else q


def make_layer(layer_spec) -> torch.nn.Module:
    kind, args = layer_spec
    layer = torch.nn.Conv2d(*args) if kind == "conv2d" else torch.nn.Linear(*args)
    # Brevitas's solvers read these from its quant layers; plain torch layers lack them.
    layer.output_channel_dim = 0
    if kind == "linear":
        layer.out_channels = layer.out_features
    return layer


def built_by_proxy(q, kind: str, layer: Optional[torch.nn.Module]) -> torch.nn.Module:
    """The tensor_quant the quantizer's own proxy builds (for a weight: over the layer's weight;
    for an activation: after an nn.Identity), which keeps the proxy alive through its blocks."""
    if kind == "weight":
        return q.proxy_class(layer, q).tensor_quant
    assert kind == "act", kind
    return q.proxy_class(torch.nn.Identity(), q).fused_activation_quant_proxy.tensor_quant


# ---- recording ---------------------------------------------------------------------------------


def snap(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    # clone: torch.save would otherwise store the whole storage behind a view
    return None if t is None else t.detach().clone()


def state_of(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    return {k: snap(v) for k, v in module.state_dict().items()}


def stack(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Per-step dicts -> one entry per key: a stacked tensor when every step has a tensor of the
    same shape (fewer, larger storages keep the file small), otherwise the list of steps."""
    keys = []
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
        self.dtype = getattr(torch, spec.get("dtype", "float32"))
        self.gen = torch.Generator().manual_seed(SEED)  # data, independent of module init
        torch.manual_seed(SEED)
        self.layer = make_layer(spec["layer"]) if "layer" in spec else None
        self.record: Dict[str, Any] = {"spec": spec}
        if self.layer is not None:
            self.record["layer_state"] = state_of(self.layer)
        q = quantizer_class(spec)
        kind = spec["kind"]
        if spec.get("proxy"):
            self.tq = built_by_proxy(q, kind, self.layer)
        else:
            if kind in ("weight", "weight_input"):
                q = q.let(module=self.layer, tracked_parameter_list=[self.layer.weight])
            elif kind in ("bias", "bias_internal"):
                q = q.let(module=self.layer, tracked_parameter_list=[self.layer.bias])
            self.tq = q.tensor_quant
        # Built in float32 like its float32 case, then converted, as a model is by .double().
        if self.layer is not None:
            self.layer.to(self.dtype)
        self.tq.to(self.dtype)
        self.tq.train()
        self.record["init_state"] = state_of(self.tq)
        self.record["param_names"] = [n for n, _ in self.tq.named_parameters()]

    def randn(self, *shape: int, spread: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        return torch.randn(shape, generator=self.gen, dtype=self.dtype) * spread + shift

    # -- inputs per kind: a dict of named call arguments; tensors marked in `leaves` get grads --

    def step_inputs(self, k: int) -> Dict[str, Any]:
        kind = self.spec["kind"]
        if kind == "weight":
            return {"x": self.layer.weight}
        if kind == "weight_input":
            return self.weight_input_args(*self.spec["input_formats"][k])
        if kind == "bias_internal":
            return {"x": self.layer.bias}
        if kind == "bias":
            # per-tensor (as the proxy's view(-1) of a scalar) on even steps, per-channel on odd
            n = self.layer.bias.shape[0]
            shape = (1,) if k % 2 == 0 else (n,)
            scale = torch.rand(shape, generator=self.gen, dtype=self.dtype) * 0.02 + 0.001
            scale.requires_grad_()
            return {"x": self.layer.bias, "input_scale": scale}
        if kind == "trunc":
            # an accumulator: integers on input_bit_width bits times a scale, plus its zero point
            ibw, signed = [(16, True), (12, False), (10, True), (20, True)][k]
            per_channel = k == 2
            lo, hi = (-(2 ** (ibw - 1)), 2 ** (ibw - 1)) if signed else (0, 2**ibw)
            ints = torch.randint(lo, hi, (2, 3, 4), generator=self.gen).to(self.dtype)
            sshape = (1, 3, 1) if per_channel else ()
            scale = torch.rand(sshape, generator=self.gen, dtype=self.dtype) * 0.1 + 0.01
            zp = torch.tensor(0.0 if signed else float(2 ** (ibw - 1)), dtype=self.dtype)
            x = ((ints - zp) * scale).detach().requires_grad_()
            return {
                "x": x,
                "scale": scale.requires_grad_(),
                "zero_point": zp.requires_grad_(),
                "input_bit_width": torch.tensor(float(ibw), dtype=self.dtype),
                "signed": signed,
            }
        # act: a drifting distribution so the statistics keep moving
        shape = self.spec["shape"]
        shift = 0.3 * math.sin(k / 7.0)
        return {"x": self.randn(*shape, spread=self.spec["spread"], shift=shift).requires_grad_()}

    def weight_input_args(self, input_bit_width: int, input_is_signed: bool) -> Dict[str, Any]:
        return {
            "x": self.layer.weight,
            "input_bit_width": torch.tensor(float(input_bit_width), dtype=self.dtype),
            "input_is_signed": input_is_signed,
        }

    def eval_inputs(self) -> List[Dict[str, Any]]:
        kind = self.spec["kind"]
        if kind == "act":
            return [
                {"x": self.randn(*self.spec["shape"], spread=self.spec["spread"])} for _ in range(2)
            ]
        return []  # parameter quantizers: evaluated on their current tensor, see eval_call

    def call(self, inputs: Dict[str, Any]):
        kind = self.spec["kind"]
        if kind in ("weight", "bias_internal", "act"):
            return self.tq(inputs["x"])
        if kind == "bias":
            return self.tq(inputs["x"], inputs["input_scale"])
        if kind == "weight_input":
            return self.tq(inputs["x"], inputs["input_bit_width"], inputs["input_is_signed"])
        return self.tq(
            inputs["x"],
            inputs["scale"],
            inputs["zero_point"],
            inputs["input_bit_width"],
            inputs["signed"],
        )

    def eval_call(self) -> List[Any]:
        """Eval-mode outputs: on the fixed eval inputs (act) or the current tracked tensor."""
        self.tq.eval()
        with torch.no_grad():
            kind = self.spec["kind"]
            if kind == "act":
                outs = [self.call(inp) for inp in self.eval_in]
            elif kind == "trunc":
                outs = [self.call(self.step_in_for_eval)]
            elif kind == "bias":
                outs = [
                    self.call({"x": self.layer.bias, "input_scale": BIAS_EVAL_SCALE.to(self.dtype)})
                ]
            elif kind == "weight_input":
                outs = [self.call(self.weight_input_args(*self.spec["input_formats"][0]))]
            else:
                outs = [self.call({"x": self.tracked()})]
        self.tq.train()
        return [[snap(o) for o in out] for out in outs]

    def tracked(self) -> torch.Tensor:
        return (
            self.layer.weight
            if self.spec["kind"] in ("weight", "weight_input")
            else self.layer.bias
        )

    def run(self) -> Dict[str, Any]:
        spec = self.spec
        self.eval_in = self.eval_inputs()
        self.record["eval_inputs"] = [{k: snap(v) for k, v in inp.items()} for inp in self.eval_in]
        if spec["kind"] == "trunc":
            self.step_in_for_eval = self.step_inputs(0)
            self.record["trunc_eval_input"] = {
                k: snap(v) if isinstance(v, torch.Tensor) else v
                for k, v in self.step_in_for_eval.items()
            }
        if spec["kind"] == "bias":
            self.record["bias_eval_input_scale"] = BIAS_EVAL_SCALE.to(self.dtype, copy=True)
        self.record["fresh_eval"] = self.eval_call()

        learned = list(self.tq.parameters())
        groups = [{"params": learned, "lr": PARAM_LR}] if learned else []
        if self.layer is not None:
            groups.append({"params": [self.tracked()], "lr": WEIGHT_LR})
        opt = torch.optim.SGD(groups) if groups else None
        self.record["lr"] = {"param": PARAM_LR, "weight": WEIGHT_LR}

        rows, evals = [], {}
        for k in range(spec["steps"]):
            inputs = self.step_inputs(k)
            row: Dict[str, Any] = {}
            for name, v in inputs.items():
                if isinstance(v, torch.Tensor):
                    row["in:" + name] = snap(v)
                else:
                    row["in:" + name] = torch.tensor(v)
            out = self.call(inputs)
            for i, o in enumerate(out):
                row[f"out:{i}"] = snap(o)
            g = self.randn(*out[0].shape)
            row["g"] = g
            (out[0] * g).sum().backward()
            for name, v in inputs.items():
                if isinstance(v, torch.Tensor) and v.requires_grad:
                    row["grad:" + name] = snap(v.grad)
            for name, p in self.tq.named_parameters():
                row["grad:param:" + name] = snap(p.grad)
            if opt is not None:
                opt.step()
                opt.zero_grad(set_to_none=True)
            for key, v in state_of(self.tq).items():
                row["state:" + key] = v
            rows.append(row)
            if k in spec.get("eval_at", ()):
                evals[k] = self.eval_call()
        self.record["steps"] = stack(rows)
        self.record["n_steps"] = spec["steps"]
        self.record["eval_during"] = evals
        if self.layer is not None and self.dtype != torch.float32:
            # The tracked tensor after the last SGD step, which the float64 replay sets before its
            # final eval (float32 records keep the layout they were first recorded with). Taken
            # before that eval: SignedBinaryWeightPerTensorConst clamps its input in place.
            self.record["final_tracked"] = snap(self.tracked())
        self.record["final_eval"] = self.eval_call()
        self.record["final_state"] = state_of(self.tq)
        return self.record


def record_all(
    specs: List[Dict[str, Any]], previous: Dict[str, Any], only: Set[str]
) -> Dict[str, Any]:
    """Records the cases named in `only` (all when empty), keeps the others from `previous`."""
    cases = dict(previous) if only else {}
    for spec in specs:
        if only and spec["name"] not in only:
            continue
        cases[spec["name"]] = Recorder(spec).run()
        print("recorded", spec.get("dtype", "float32"), spec["name"])
    return {c["name"]: cases[c["name"]] for c in specs if c["name"] in cases}  # spec order


def main() -> None:
    torch.set_default_dtype(torch.float32)
    float64_cases = [float64_variant(c) for c in CASES]
    for specs in (CASES, float64_cases):
        names = [c["name"] for c in specs]
        assert len(set(names)) == len(names), "duplicate case names"
    # A name given as argument re-records that case in every list where it occurs.
    only = set(sys.argv[1:])
    unknown = only - {c["name"] for c in CASES + float64_cases}
    assert not unknown, f"unknown case names: {sorted(unknown)}"
    # Recording only some cases updates them in the existing file and keeps the others.
    previous = torch.load(OUT_FILE) if only and os.path.exists(OUT_FILE) else {}
    cases = record_all(CASES, previous.get("cases", {}), only)
    cases64 = record_all(float64_cases, previous.get("cases_float64", {}), only)
    golden = {
        "brevitas": brevitas.__version__,
        "torch": str(torch.__version__),
        "seed": SEED,
        "cases": cases,
        "cases_float64": cases64,
    }
    torch.save(golden, OUT_FILE)
    print(
        f"wrote {OUT_FILE}: {os.path.getsize(OUT_FILE)} bytes, {len(cases)} float32 cases, "
        f"{len(cases64)} float64 cases"
    )


if __name__ == "__main__":
    main()
