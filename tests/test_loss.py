"""brevitas_cpp.loss against Brevitas 0.12: the same model (tests/golden/modules_models.py,
loaded with Brevitas's recorded state_dict), the same inputs, the same three regularisers; their
averages, per-layer terms, logs, counts and gradients to the learned bit widths are compared bit
for bit with tests/golden/brevitas_0_12_modules.pt (generate_modules.py). Formulas written out
check the weighting itself."""

import importlib.util
import math
import os
from typing import Any, Dict

import pytest
import torch

import brevitas_cpp.nn as qnn
from brevitas_cpp.inject import enum
from brevitas_cpp.loss import (
    MEGA,
    ActivationBitWidthWeightedBySize,
    QuantLayerOutputBitWidthWeightedByOps,
    SimpleBaseLoss,
    WeightBitWidthWeightedBySize,
)
from brevitas_cpp.loss import weighted_bit_width as wbw

GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")
GOLDEN: Dict[str, Any] = torch.load(os.path.join(GOLDEN_DIR, "brevitas_0_12_modules.pt"))["loss"]

_spec = importlib.util.spec_from_file_location(
    "modules_models", os.path.join(GOLDEN_DIR, "modules_models.py")
)
mm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mm)

LOSSES = {
    "WeightBitWidthWeightedBySize": WeightBitWidthWeightedBySize,
    "ActivationBitWidthWeightedBySize": ActivationBitWidthWeightedBySize,
    "QuantLayerOutputBitWidthWeightedByOps": QuantLayerOutputBitWidthWeightedByOps,
}


def _model() -> torch.nn.Module:
    model = mm.BitWidthNet(mm.Lib(qnn, enum))
    # The runtime-statistics scales are not in a state_dict saved before the first forward.
    model.load_state_dict(GOLDEN["state_dict"], strict=False)
    return model.train()


def test_loss_matches_brevitas():
    model = _model()
    losses = {name: cls(model) for name, cls in LOSSES.items()}
    inputs = GOLDEN["inputs"]
    for batch, expected_round in zip((inputs[:2], inputs[2:]), GOLDEN["rounds"]):
        for loss in losses.values():
            loss.zero_accumulated_values()
        for x in batch:
            model(x)
        for name, loss in losses.items():
            expected = expected_round[name]
            model.zero_grad()
            value = loss.retrieve()
            value.backward(retain_graph=True)
            assert torch.equal(value.detach(), expected["value"]), name
            assert loss.tot_num_elements == expected["tot"], name
            terms = loss.retrieve(as_average=False)
            assert len(terms) == len(expected["terms"]), name
            for term, want in zip(terms, expected["terms"]):
                assert torch.equal(term.detach(), want), name
            assert torch.equal(loss.log(), expected["log"]), name
            grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
            assert sorted(grads) == sorted(expected["grads"]), name
            for n, grad in grads.items():
                assert torch.equal(grad, expected["grads"][n]), (name, n)


def test_weighting_formulas():
    """The weights written out: elements of each weight; elements of one sample of each learned
    activation; outputs per sample times per_elem_ops / 1e7 (Brevitas's MEGA is 10e6)."""
    assert MEGA == 1e7
    model = _model()
    weight_loss = WeightBitWidthWeightedBySize(model)
    act_loss = ActivationBitWidthWeightedBySize(model)
    ops_loss = QuantLayerOutputBitWidthWeightedByOps(model)
    x = GOLDEN["inputs"][0]
    model(x)

    def bit_width(proxy) -> torch.Tensor:
        return proxy.tensor_quant.msb_clamp_bit_width_impl()

    conv_bw, fc_bw = bit_width(model.conv.weight_quant), bit_width(model.fc.weight_quant)
    expected = (4 * 3 * 3 * 3 * conv_bw + 5 * 64 * fc_bw) / (4 * 27 + 5 * 64)
    assert torch.allclose(weight_loss.retrieve(), expected)

    inp = model.inp.act_quant.fused_activation_quant_proxy.tensor_quant
    relu = model.relu.act_quant.fused_activation_quant_proxy.tensor_quant
    expected = (3 * 36 * inp.msb_clamp_bit_width_impl() + 64 * relu.msb_clamp_bit_width_impl()) / (
        3 * 36 + 64
    )
    assert torch.allclose(act_loss.retrieve(), expected)

    # Two operations (multiply, add) per MAC: conv (4x4x4 outputs, 27 MACs each), conv2 (64
    # outputs, 4 MACs each), fc (5 outputs, 64 MACs each); fc2 returns a plain tensor.
    ops = [64 * 2 * 27 / MEGA, 64 * 2 * 4 / MEGA, 5 * 2 * 64 / MEGA]
    assert ops_loss.tot_num_elements == pytest.approx(sum(ops))
    terms = ops_loss.retrieve(as_average=False)
    outputs = [model.conv(model.inp(x)), model.conv2(model.relu(model.conv(model.inp(x))))]
    outputs.append(model.fc(outputs[1].flatten(1)))
    expected = [out.bit_width * n / sum(ops) for out, n in zip(outputs, ops)]
    assert len(terms) == 3 and all(torch.allclose(t, e) for t, e in zip(terms, expected))


def test_only_learned_bit_widths_are_hooked():
    model = _model()
    hooked = [n for n, m in model.named_modules() if wbw.has_learned_weight_bit_width(m)]
    assert hooked == ["conv.weight_quant", "fc.weight_quant"]
    hooked = [n for n, m in model.named_modules() if wbw.has_learned_activation_bit_width(m)]
    assert hooked == ["inp.act_quant", "relu.act_quant"]


def test_empty_loss_raises_and_hooks_can_be_removed():
    model = _model()
    loss = WeightBitWidthWeightedBySize(model)
    with pytest.raises(Exception, match="can't be zero"):
        loss.retrieve()
    loss.remove_hooks()
    model(GOLDEN["inputs"][0])
    assert loss.weighted_bit_width_list == [] and loss.tot_num_elements == 0


def test_simple_base_loss():
    class CountCalls(SimpleBaseLoss):
        def register_hooks(self) -> None:
            def hook(module, args, output):
                self.tot_loss = self.tot_loss + output.abs().sum()

            self.model.register_forward_hook(hook)

    layer = torch.nn.Linear(3, 2)
    loss = CountCalls(layer, reg_coeff=0.5)
    x = torch.ones(1, 3)
    layer(x)
    expected = layer(x).abs().sum() * 0.5
    assert torch.allclose(loss.retrieve(), 2 * expected) and loss.log().requires_grad is False
    loss.zero_accumulated_values()
    assert loss.retrieve() == 0.0
    assert math.isclose(loss.reg_coeff, 0.5)
