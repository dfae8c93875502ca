"""brevitas_cpp's MX and groupwise quantizers against golden numbers recorded from Brevitas 0.12.

brevitas_0_12_groupwise.pt is written by generate_groupwise.py (run by hand with Brevitas
installed). Each case carries its plain-data spec (layer, arguments, quantizers by module and
class name, let() keywords); the same layer is built here from brevitas_cpp.nn with the
quantizers of brevitas_cpp.quant.experimental.mx_quant_ocp / brevitas_cpp.quant under the same
names, started from Brevitas's initial state_dict, and every recorded training step is replayed:

- the quantizers' outputs, every field of the Groupwise*QuantTensor (grouped value_, scale_,
  zero_point_, group size and dim, bit widths, flags, dequant_shape): bit for bit;
- the layer output: QuantIdentity's bit for bit; a linear or convolution layer's against
  torch's F.linear / F.conv2d / F.conv_transpose2d applied here to Brevitas's recorded
  quantized operands (expanded from the grouped fields as written out below), bit for bit: the
  product kernels' last bits differ between CPUs, so the recorded output itself is only checked
  at kernel precision;
- gradients to the input and the parameters: within GRAD_RTOL plus an absolute term of
  KERNEL_ULPS ulps of the gradient's largest magnitude (summation order: the fused kernels and
  the product kernels of another machine add up in another order);
- after each step the parameters are set to Brevitas's, so each forward is compared exactly;
- eval outputs of the trained layer at kernel precision.

Brevitas fails on ShiftedMXUInt8WeightMSE (an IndexError or a bad view in its MSE search); those
failures are recorded in the file, and that quantizer is checked against the search written out
in test_groupwise.py instead. Runs in both BREVITAS_JIT modes; never imports brevitas.
"""

import os
from typing import Any, Dict, List

import pytest
import torch
import torch.nn.functional as F

import brevitas_cpp.nn as qnn
import brevitas_cpp.quant as qquant
from brevitas_cpp.quant.experimental import mx_quant_ocp

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN: Dict[str, Any] = torch.load(os.path.join(HERE, "brevitas_0_12_groupwise.pt"))
CASES: Dict[str, Dict[str, Any]] = GOLDEN["cases"]
MODULES = {"mx_quant_ocp": mx_quant_ocp, "shifted_scaled_int": qquant}
GRAD_RTOL = 1e-5
KERNEL_ULPS = 64


def test_golden_file_is_from_brevitas_0_12() -> None:
    assert GOLDEN["brevitas_version"].startswith("0.12")
    assert len(CASES) == 46
    assert sorted(GOLDEN["brevitas_failures"]) == sorted(
        f"ShiftedMXUInt8WeightMSE_{layer}{suffix}"
        for layer in ("QuantLinear", "QuantConv2d", "QuantConvTranspose2d")
        for suffix in ("", "_float64")
    )


def build(spec: Dict[str, Any], dtype: torch.dtype) -> torch.nn.Module:
    kwargs = dict(spec["kwargs"])
    for key, ref in spec["quants"].items():
        quant = getattr(MODULES[ref["module"]], ref["name"])
        kwargs[key] = quant.let(**ref["let"]) if ref["let"] else quant
    return getattr(qnn, spec["layer"])(*spec["args"], **kwargs).to(dtype)


def expanded(fields: Dict[str, Any], name: str) -> torch.Tensor:
    """A grouped field in the tensor's own shape, written out: merge the (groups, group_size)
    dims, expand a per-group tensor over its group, drop the padding."""
    grouped, value = fields[name], fields["value_"]
    if grouped.dim() != value.dim():
        return grouped
    grouped = grouped.expand(value.shape)
    dim = (
        fields["group_dim"] if fields["group_dim"] >= 0 else grouped.dim() - 1 + fields["group_dim"]
    )
    merged = grouped.flatten(dim, dim + 1)
    return merged.narrow(dim, 0, fields["dequant_shape"][dim])


def assert_fields_equal(qt: Any, want: Dict[str, Any], what: str) -> None:
    assert list(qt._fields) == list(want), what
    for name, expected in want.items():
        got = getattr(qt, name)
        if isinstance(expected, torch.Tensor):
            assert got.dtype == expected.dtype, f"{what} {name}: {got.dtype} vs {expected.dtype}"
            assert got.shape == expected.shape, f"{what} {name}: {got.shape} vs {expected.shape}"
            assert torch.equal(got.detach(), expected), (
                f"{what} {name}: max diff {(got.detach() - expected).abs().max().item()}"
            )
        elif name == "dequant_shape":
            assert tuple(got) == tuple(expected), f"{what} {name}"
        else:
            assert got == expected, f"{what} {name}: {got!r} vs {expected!r}"


def kernel_atol(expected: torch.Tensor) -> float:
    return KERNEL_ULPS * torch.finfo(expected.dtype).eps * max(expected.abs().max().item(), 1e-30)


def assert_near(got: torch.Tensor, expected: torch.Tensor, what: str, rtol: float = 0.0) -> None:
    torch.testing.assert_close(got, expected, rtol=rtol, atol=kernel_atol(expected), msg=what)


def float_op(spec: Dict[str, Any], x: torch.Tensor, w: torch.Tensor, b: torch.Tensor):
    """The layer's float op, on this machine's kernels."""
    if spec["layer"] == "QuantLinear":
        return F.linear(x, w, b)
    if spec["layer"] == "QuantConv2d":
        return F.conv2d(x, w, b)
    return F.conv_transpose2d(x, w, b)


@pytest.mark.parametrize("name", sorted(CASES))
def test_training_replay(name: str) -> None:
    rec = CASES[name]
    spec = rec["spec"]
    dtype = rec["x_eval"].dtype
    layer = build(spec, dtype)
    state = layer.state_dict()
    assert list(state) == list(rec["init_state"])
    layer.load_state_dict(rec["init_state"])
    seen: List[Any] = []
    if "input_quant" in spec["quants"]:
        layer.input_quant.register_forward_hook(lambda m, i, o: seen.append(o))
    params = dict(layer.named_parameters())
    layer.train()
    for k, step in enumerate(rec["steps"]):
        what = f"{name} step {k}"
        x = step["x"].clone().requires_grad_(True)
        out = layer(x)
        if "out_fields" in step:
            assert_fields_equal(out, step["out_fields"], f"{what} output")
            value = out.value
            assert torch.equal(value.detach(), step["out"]), what
        else:
            value = out
            q_in = expanded(step["input_fields"], "value_") if "input_fields" in step else step["x"]
            if "input_fields" in step:
                assert_fields_equal(seen.pop(), step["input_fields"], f"{what} input")
            q_w = expanded(step["weight_fields"], "value_")
            expected = float_op(spec, q_in, q_w, params["bias"].detach())
            assert torch.equal(value.detach(), expected), (
                f"{what}: output differs from the float op on Brevitas's quantized operands"
            )
            assert_near(value.detach(), step["out"], f"{what} output (recording machine)")
        (value * step["g"]).sum().backward()
        assert_near(x.grad, step["x_grad"], f"{what} d loss / d input", GRAD_RTOL)
        for pname, grad in step["grads"].items():
            assert_near(params[pname].grad, grad, f"{what} d loss / d {pname}", GRAD_RTOL)
        if "weight_fields" in step:
            assert_fields_equal(layer.quant_weight(), step["weight_fields"], f"{what} weight")
        with torch.no_grad():
            for pname, p in params.items():
                p.copy_(step["params_after"][pname])
                p.grad = None
    layer.eval()
    with torch.no_grad():
        out = layer(rec["x_eval"])
    value = out.value if hasattr(out, "value_") else out
    assert_near(value, rec["eval_out"], f"{name} eval output")
