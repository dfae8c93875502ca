"""brevitas_cpp's quantizers against golden numbers recorded from Brevitas 0.12.

brevitas_0_12.pt is written by generate.py (run by hand with Brevitas installed; see README.md).
Each recorded case carries its own plain-data spec: which quantizer, which class attributes
(composition by inheritance), which let() keywords, how it is called. Here the same quantizer is
rebuilt from brevitas_cpp.quant, the recorded inputs and SGD steps are replayed, and compared:

- value, scale, zero point and bit width returned at every step: bit for bit (float32);
- eval-mode outputs of a fresh quantizer, during training, after it, and after a state_dict
  round trip into a fresh quantizer: bit for bit;
- state_dict keys at every step; buffers bit for bit;
- gradients of the recorded loss sum(out * g) to the inputs and every learned parameter, and the
  learned tensors SGD updates from them: within float32 summation error (see grad_atol).

Why gradients are not bit for bit: the fused C++ ops reduce the scale/zero-point gradient
themselves (in another order than PyTorch's autograd of Brevitas's composition), and every
gradient that flows through a statistic (the abs-max element of a weight, a learned scale)
carries that rounding. So after comparing a step, the learned tensors are set to Brevitas's
values, which keeps every step's forward comparison exact instead of drifting by an ulp.

Each case is also recorded in float64 (the quantizer converted with .to(float64), float64 inputs,
a few steps; runtime-stats activations as *_collect3 variants that leave warm-up after 3 steps).
There the summation order is far below the 1e-6 level, so the float64 replay holds gradients to
the requirement literally: every element of every gradient within 1e-6 relative of Brevitas's
(atol 0), while values, scales, zero points, bit widths, buffers and eval outputs stay bit for bit.
"""

import os
from typing import Any, Dict, List, Optional, Sequence

import pytest
import torch

from brevitas_cpp import config

GOLDEN_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "brevitas_0_12.pt")
GOLDEN: Dict[str, Any] = torch.load(GOLDEN_FILE)
CASES: Dict[str, Dict[str, Any]] = GOLDEN["cases"]
FLOAT64_CASES: Dict[str, Dict[str, Any]] = GOLDEN["cases_float64"]

GRAD_RTOL = 1e-6
EPS32 = torch.finfo(torch.float32).eps
EPS64 = torch.finfo(torch.float64).eps


def grad_atol(out: torch.Tensor, scale: torch.Tensor, g: torch.Tensor) -> float:
    """Worst-case float32 error of summing the loss's terms in another order: every gradient
    term is g_i times at most the largest integer value |out / scale| (times a factor <= 1 of
    the scale's own derivative), so the sum is off by at most eps32 * sum|g| * max|out / scale|."""
    q_max = float((out.detach() / scale.detach()).abs().max()) if out.numel() else 1.0
    return EPS32 * float(g.abs().sum()) * max(1.0, q_max)


# ---- comparisons -------------------------------------------------------------------------------


def _same_kind(actual: Optional[torch.Tensor], expected: Optional[torch.Tensor], what: str) -> bool:
    """Checks None-ness, type, dtype and shape; False when both are None (nothing to compare)."""
    if expected is None or actual is None:
        assert actual is None and expected is None, f"{what}: got {actual}, want {expected}"
        return False
    assert isinstance(actual, torch.Tensor), f"{what}: got {type(actual).__name__}, want a tensor"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, want {expected.dtype}"
    assert actual.shape == expected.shape, (
        f"{what}: shape {tuple(actual.shape)}, want {tuple(expected.shape)}"
    )
    return True


def assert_exact(
    actual: Optional[torch.Tensor], expected: Optional[torch.Tensor], what: str
) -> None:
    if not _same_kind(actual, expected, what):
        return
    a = actual.detach()
    if not torch.equal(a, expected):
        bad = (a != expected).nonzero()
        first = tuple(bad[0].tolist()) if bad.numel() else ()
        raise AssertionError(
            f"{what}: {len(bad)} of {expected.numel()} elements differ; first at {first}: "
            f"got {a[first].item()!r}, want {expected[first].item()!r}"
        )


def assert_near(
    actual: Optional[torch.Tensor], expected: Optional[torch.Tensor], what: str, atol: float
) -> None:
    if not _same_kind(actual, expected, what):
        return
    if torch.equal(actual.detach(), expected):  # the common case, and much cheaper
        return
    torch.testing.assert_close(
        actual.detach(), expected, rtol=GRAD_RTOL, atol=atol, msg=lambda m: f"{what}: {m}"
    )


def assert_grad_float64(
    actual: Optional[torch.Tensor], expected: Optional[torch.Tensor], what: str
) -> None:
    """Every element within GRAD_RTOL of Brevitas's, relative to that element, with no absolute
    slack: an exact zero (a clamped STE, a statistic's unused elements) must stay exactly zero.
    Observed differences are at most 5e-12 relative, so this does not hinge on summation order."""
    if not _same_kind(actual, expected, what):
        return
    torch.testing.assert_close(
        actual.detach(), expected, rtol=GRAD_RTOL, atol=0.0, msg=lambda m: f"{what}: {m}"
    )


def sgd_atol_float64(lr: float, grad: Optional[torch.Tensor], value: torch.Tensor) -> float:
    """How far value - lr * grad may be from Brevitas's when grad is within GRAD_RTOL of its
    gradient: lr * GRAD_RTOL * max|grad|, plus an ulp for rounding the update itself."""
    grad_max = 0.0 if grad is None or grad.numel() == 0 else float(grad.abs().max())
    value_max = float(value.abs().max()) if value.numel() else 0.0
    return lr * GRAD_RTOL * grad_max + EPS64 * value_max


def assert_sgd_result_float64(
    actual: torch.Tensor, expected: torch.Tensor, what: str, atol: float
) -> None:
    if not _same_kind(actual, expected, what):
        return
    torch.testing.assert_close(
        actual.detach(), expected, rtol=0.0, atol=atol, msg=lambda m: f"{what}: {m}"
    )


def assert_outputs(
    actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor], what: str
) -> None:
    assert len(actual) == len(expected), f"{what}: {len(actual)} outputs, want {len(expected)}"
    # Decoupled quantizers also return their pre-clipping scale and zero point.
    names = ("value", "scale", "zero_point", "bit_width", "pre_scale", "pre_zero_point")
    for name, a, e in zip(names, actual, expected):
        assert_exact(a, e, f"{what} {name}")


# ---- rebuilding a recorded case with brevitas_cpp ------------------------------------------------


def decode(value: Any) -> Any:
    """Enum members are recorded as {"__enum__": class name, "name": member name}; sub-injectors
    of quant.base as {"__subinjector__": name, "let": settings}; dtypes and devices by name."""
    if isinstance(value, dict) and "__enum__" in value:
        from brevitas_cpp.inject import enum as cenum

        return getattr(cenum, value["__enum__"])[value["name"]]
    if isinstance(value, dict) and "__subinjector__" in value:
        from brevitas_cpp.quant import base as cbase

        lets = {k: decode(v) for k, v in value["let"].items()}
        return getattr(cbase, value["__subinjector__"]).let(**lets)
    if isinstance(value, dict) and "__dtype__" in value:
        return getattr(torch, value["__dtype__"])
    if isinstance(value, dict) and "__device__" in value:
        return torch.device(value["__device__"])
    return value


def make_layer(layer_spec, state: Dict[str, torch.Tensor]) -> torch.nn.Module:
    kind, args = layer_spec
    layer = torch.nn.Conv2d(*args) if kind == "conv2d" else torch.nn.Linear(*args)
    layer.load_state_dict(state)
    # What Brevitas's quant layers expose and its solvers read (the recording set them too).
    layer.output_channel_dim = 0
    if kind == "linear":
        layer.out_channels = layer.out_features
    return layer


def build_tensor_quant(spec: Dict[str, Any], layer: Optional[torch.nn.Module]) -> torch.nn.Module:
    from brevitas_cpp import quant as cquant

    base = getattr(cquant, spec["quantizer"])
    attrs = {k: decode(v) for k, v in spec["attrs"].items()}
    lets = {k: decode(v) for k, v in spec["let"].items() if v is not None}
    q = type(spec["name"], (base,), attrs) if attrs else base
    if lets:
        q = q.let(**lets)
    if spec.get("proxy"):
        return built_by_proxy(q, spec["kind"], layer)
    if spec["kind"] in ("weight", "weight_input"):
        q = q.let(module=layer, tracked_parameter_list=[layer.weight])
    elif spec["kind"] in ("bias", "bias_internal"):
        q = q.let(module=layer, tracked_parameter_list=[layer.bias])
    return q.tensor_quant


def built_by_proxy(q, kind: str, layer: Optional[torch.nn.Module]) -> torch.nn.Module:
    """As recorded for proxy=True cases (MSE quantizers, whose search calls its proxy): the
    tensor_quant the quantizer's proxy builds, over the layer's weight or after an nn.Identity."""
    if kind == "weight":
        return q.proxy_class(layer, q).tensor_quant
    assert kind == "act", kind
    return q.proxy_class(torch.nn.Identity(), q).fused_activation_quant_proxy.tensor_quant


def plain_state(module: torch.nn.Module) -> Dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in module.state_dict().items()}


class Replay:
    """Drives brevitas_cpp's quantizer through the recorded steps of one case."""

    def __init__(self, record: Dict[str, Any]) -> None:
        self.record = record
        self.spec = record["spec"]
        self.kind = self.spec["kind"]
        self.layer = (
            make_layer(self.spec["layer"], record["layer_state"]) if "layer" in self.spec else None
        )
        self.tq = build_tensor_quant(self.spec, self.layer)
        dtype = getattr(torch, self.spec.get("dtype", "float32"))
        if dtype != torch.float32:
            # As recorded: built like the float32 case, then converted (what .double() does).
            if self.layer is not None:
                self.layer.to(dtype)
            self.tq.to(dtype)
        self.tq.train()

    def tracked(self) -> torch.Tensor:
        return self.layer.weight if self.kind in ("weight", "weight_input") else self.layer.bias

    def call(self, inputs: Dict[str, Any]):
        if self.kind in ("weight", "bias_internal", "act"):
            return self.tq(inputs["x"])
        if self.kind == "bias":
            return self.tq(inputs["x"], inputs["input_scale"])
        if self.kind == "weight_input":
            return self.tq(inputs["x"], inputs["input_bit_width"], inputs["input_is_signed"])
        return self.tq(
            inputs["x"],
            inputs["scale"],
            inputs["zero_point"],
            inputs["input_bit_width"],
            inputs["signed"],
        )

    def step_inputs(self, k: int) -> Dict[str, Any]:
        steps = self.record["steps"]
        if self.kind in ("weight", "bias_internal", "bias"):
            inputs: Dict[str, Any] = {"x": self.tracked()}
            if self.kind == "bias":
                inputs["input_scale"] = steps["in:input_scale"][k].clone().requires_grad_()
            return inputs
        if self.kind == "weight_input":
            return {
                "x": self.tracked(),
                "input_bit_width": steps["in:input_bit_width"][k].clone(),
                "input_is_signed": bool(steps["in:input_is_signed"][k]),
            }
        if self.kind == "trunc":
            return {
                "x": steps["in:x"][k].clone().requires_grad_(),
                "scale": steps["in:scale"][k].clone().requires_grad_(),
                "zero_point": steps["in:zero_point"][k].clone().requires_grad_(),
                "input_bit_width": steps["in:input_bit_width"][k].clone(),
                "signed": bool(steps["in:signed"][k]),
            }
        return {"x": steps["in:x"][k].clone().requires_grad_()}

    def sync_tracked(self, k: int, atol: float) -> None:
        """Our tracked weight/bias, moved by our own SGD steps, must be Brevitas's up to the
        gradient tolerance; then it is set to Brevitas's exactly (see the module docstring)."""
        if self.layer is None:
            return
        expected = self.record["steps"]["in:x"][k]
        assert_near(self.tracked(), expected, f"step {k} tracked tensor before forward", atol)
        with torch.no_grad():
            self.tracked().copy_(expected)

    def sync_learned(self, expected_state: Dict[str, torch.Tensor]) -> None:
        """Set each learned parameter that its state_dict entry holds as is to Brevitas's value
        (a runtime-stats scale saves its statistics instead while collecting: left alone)."""
        held = self.tq.state_dict(keep_vars=True)
        with torch.no_grad():
            for name, p in self.tq.named_parameters():
                if held.get(name) is p and name in expected_state:
                    p.copy_(expected_state[name])

    def eval_outputs(self) -> List[List[torch.Tensor]]:
        self.tq.eval()
        try:
            with torch.no_grad():
                if self.kind == "act":
                    outs = [self.call(inp) for inp in self.record["eval_inputs"]]
                elif self.kind == "trunc":
                    inp = dict(self.record["trunc_eval_input"])
                    inp["signed"] = bool(inp["signed"])
                    outs = [self.call(inp)]
                elif self.kind == "weight_input":
                    # Evaluated with the first step's input format, as recorded.
                    step0 = self.record["steps"]
                    inp = {
                        "x": self.tracked(),
                        "input_bit_width": step0["in:input_bit_width"][0],
                        "input_is_signed": bool(step0["in:input_is_signed"][0]),
                    }
                    outs = [self.call(inp)]
                elif self.kind == "bias":
                    outs = [
                        self.call(
                            {
                                "x": self.tracked(),
                                "input_scale": self.record["bias_eval_input_scale"],
                            }
                        )
                    ]
                else:
                    outs = [self.call({"x": self.tracked()})]
        finally:
            self.tq.train()
        return [[o.detach().clone() for o in out] for out in outs]

    def check_eval(self, expected: List[List[torch.Tensor]], what: str) -> None:
        actual = self.eval_outputs()
        assert len(actual) == len(expected)
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_outputs(a, e, f"{what} eval input {i}")


def assert_state(
    actual: Dict[str, torch.Tensor],
    expected: Dict[str, torch.Tensor],
    what: str,
    learned_atol: Optional[float],
) -> None:
    """Keys equal; learned parameters (given learned_atol, after an SGD step) near, the rest exact."""
    assert sorted(actual) == sorted(expected), (
        f"{what}: state_dict keys {sorted(actual)}, want {sorted(expected)}"
    )
    for key, value in expected.items():
        if learned_atol is not None and actual[key].is_floating_point():
            assert_near(actual[key], value, f"{what} state_dict[{key!r}]", learned_atol)
        else:
            assert_exact(actual[key], value, f"{what} state_dict[{key!r}]")


def optimizer_for(replay: Replay, lr: Dict[str, float]) -> Optional[torch.optim.Optimizer]:
    """The recording's SGD: the quantizer's parameters at lr['param'], the tracked tensor at
    lr['weight'] (plain SGD updates each tensor on its own, so the order does not matter)."""
    learned = list(replay.tq.parameters())
    groups = [{"params": learned, "lr": lr["param"]}] if learned else []
    if replay.layer is not None:
        groups.append({"params": [replay.tracked()], "lr": lr["weight"]})
    return torch.optim.SGD(groups) if groups else None


# ---- the tests -----------------------------------------------------------------------------------


def test_golden_file_is_from_brevitas_0_12():
    assert GOLDEN["brevitas"].startswith("0.12"), GOLDEN["brevitas"]
    assert len(CASES) >= 30


def check_fresh(replay: Replay, record: Dict[str, Any]) -> None:
    """Scripted under BREVITAS_JIT=1, same learned parameters, same initial state and eval."""
    tq = replay.tq
    if config.JIT_ENABLED:
        assert isinstance(tq, torch.jit.ScriptModule), f"{type(tq).__name__} is not scripted"
    param_names = [n for n, _ in tq.named_parameters()]
    assert sorted(param_names) == sorted(record["param_names"]), "learned parameters"
    assert_state(plain_state(tq), record["init_state"], "initial", None)
    replay.check_eval(record["fresh_eval"], "fresh quantizer")


def check_reloaded(replay: Replay, record: Dict[str, Any]) -> None:
    """A fresh quantizer loaded with the trained state_dict (around the trained tracked tensor)
    reproduces the trained eval outputs."""
    fresh = Replay(record)
    fresh.tq.load_state_dict(replay.tq.state_dict())
    if fresh.layer is not None:
        with torch.no_grad():
            fresh.tracked().copy_(replay.tracked())
    fresh.check_eval(record["final_eval"], "reloaded state_dict")


@pytest.mark.parametrize("name", list(CASES))
def test_matches_brevitas(name: str) -> None:
    record = CASES[name]
    replay = Replay(record)
    tq = replay.tq
    check_fresh(replay, record)

    lr = record["lr"]
    opt = optimizer_for(replay, lr)
    steps = record["steps"]
    state_keys = [k for k in steps if k.startswith("state:")]
    n_out = len([k for k in steps if k.startswith("out:")])
    atol = 0.0  # the previous step's gradient tolerance, for what SGD moved with it
    for k in range(record["n_steps"]):
        what = f"step {k}"
        replay.sync_tracked(k, lr["weight"] * atol)
        inputs = replay.step_inputs(k)
        out = replay.call(inputs)
        assert_outputs(out, [steps[f"out:{i}"][k] for i in range(n_out)], what)

        g = steps["g"][k]
        atol = grad_atol(out[0], out[1], g)
        (out[0] * g).sum().backward()
        for arg, value in inputs.items():
            key = "grad:" + arg
            if key in steps:
                assert_near(value.grad, steps[key][k], f"{what} d loss / d {arg}", atol)
        for pname, p in tq.named_parameters():
            assert_near(p.grad, steps["grad:param:" + pname][k], f"{what} d loss / d {pname}", atol)

        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)
        expected_state = {key[len("state:") :]: steps[key][k] for key in state_keys}
        expected_state = {n: v for n, v in expected_state.items() if v is not None}
        assert_state(plain_state(tq), expected_state, what + " after SGD", lr["param"] * atol)
        replay.sync_learned(expected_state)
        if k in record["eval_during"]:
            replay.check_eval(record["eval_during"][k], what)

    replay.check_eval(record["final_eval"], "after training")
    assert_state(plain_state(tq), record["final_state"], "final", None)
    check_reloaded(replay, record)


def test_every_case_has_a_float64_twin():
    """Each float32 case is replayed in float64 too (runtime-stats activations as *_collect3)."""
    assert len(FLOAT64_CASES) == len(CASES)
    for name, record in CASES.items():
        twins = [n for n in (name, name + "_collect3") if n in FLOAT64_CASES]
        assert len(twins) == 1, f"{name}: float64 twins {twins}"
        spec64 = FLOAT64_CASES[twins[0]]["spec"]
        assert spec64["dtype"] == "float64" and spec64["quantizer"] == record["spec"]["quantizer"]


@pytest.mark.parametrize("name", list(FLOAT64_CASES))
def test_matches_brevitas_float64(name: str) -> None:
    """The float64 replay: outputs, buffers and eval bit for bit, every gradient element within
    1e-6 relative, SGD results within what that gradient tolerance allows."""
    record = FLOAT64_CASES[name]
    replay = Replay(record)
    tq = replay.tq
    check_fresh(replay, record)

    lr = record["lr"]
    opt = optimizer_for(replay, lr)
    steps = record["steps"]
    state_keys = [k for k in steps if k.startswith("state:")]
    n_out = len([k for k in steps if k.startswith("out:")])
    tracked_grad: Optional[torch.Tensor] = None  # Brevitas's previous gradient to it

    def sync_tracked(expected: torch.Tensor, what: str) -> None:
        atol = sgd_atol_float64(lr["weight"], tracked_grad, expected)
        assert_sgd_result_float64(replay.tracked(), expected, what, atol)
        with torch.no_grad():
            replay.tracked().copy_(expected)

    for k in range(record["n_steps"]):
        what = f"step {k}"
        if replay.layer is not None:
            sync_tracked(steps["in:x"][k], f"{what} tracked tensor before forward")
        inputs = replay.step_inputs(k)
        out = replay.call(inputs)
        assert_outputs(out, [steps[f"out:{i}"][k] for i in range(n_out)], what)

        (out[0] * steps["g"][k]).sum().backward()
        for arg, value in inputs.items():
            if isinstance(value, torch.Tensor) and value.requires_grad:
                assert_grad_float64(value.grad, steps["grad:" + arg][k], f"{what} d loss / d {arg}")
        expected_grads = {
            pname: steps["grad:param:" + pname][k] for pname, _ in tq.named_parameters()
        }
        for pname, p in tq.named_parameters():
            assert_grad_float64(p.grad, expected_grads[pname], f"{what} d loss / d {pname}")
        if replay.layer is not None:
            tracked_grad = steps["grad:x"][k]

        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)
        expected_state = {key[len("state:") :]: steps[key][k] for key in state_keys}
        expected_state = {n: v for n, v in expected_state.items() if v is not None}
        actual_state = plain_state(tq)
        assert sorted(actual_state) == sorted(expected_state), f"{what}: state_dict keys"
        for key, value in expected_state.items():
            where = f"{what} after SGD state_dict[{key!r}]"
            if key in expected_grads:  # moved by SGD with our gradient
                atol = sgd_atol_float64(lr["param"], expected_grads[key], value)
                assert_sgd_result_float64(actual_state[key], value, where, atol)
            else:
                assert_exact(actual_state[key], value, where)
        replay.sync_learned(expected_state)
        if k in record["eval_during"]:
            replay.check_eval(record["eval_during"][k], what)

    if replay.layer is not None:
        sync_tracked(record["final_tracked"], "tracked tensor after training")
    replay.check_eval(record["final_eval"], "after training")
    assert_state(plain_state(tq), record["final_state"], "final", None)
    check_reloaded(replay, record)
