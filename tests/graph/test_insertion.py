"""QuantizerInsertion: activation quantizers at traced operations, functional calls included.
The reference is the same model written by hand with QuantEltwiseAdd and QuantIdentity."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.graph import QuantizerInsertion, no_trace
from brevitas_cpp.quant import Int8ActPerTensorFloat, Uint8ActPerTensorFloat

ACT = dict(collect_stats_steps=2)


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 3, 3, padding=1)
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        y = F.relu(self.conv1(x) + x)
        return self.fc(y.mean((2, 3)))


class ResidualByHand(Residual):
    def __init__(self) -> None:
        super().__init__()
        # The two operands of the add share one quantizer, as the inserted one does.
        self.add = qnn.QuantEltwiseAdd(
            input_quant=Int8ActPerTensorFloat, output_quant=None, input_collect_stats_steps=2
        )
        self.out_quant = qnn.QuantIdentity(act_quant=Uint8ActPerTensorFloat, **ACT)

    def forward(self, x):
        y = self.out_quant(F.relu(self.add(self.conv1(x), x)))
        return self.fc(y.mean((2, 3)))


def _inserted(model):
    insertion = QuantizerInsertion(model, torch.randn(1, 3, 4, 4))
    insertion.quantize_inputs("Residual/__add___0", Int8ActPerTensorFloat, **ACT)
    insertion.quantize_output("Residual/relu_0", Uint8ActPerTensorFloat, **ACT)
    insertion.apply()
    return insertion


def _train(model, steps=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    record = []
    for step in range(steps):
        x = torch.randn(4, 3, 4, 4, generator=torch.Generator().manual_seed(step))
        opt.zero_grad()
        out = model(x)
        out.square().mean().backward()
        opt.step()
        record += [out.detach()] + [
            p.grad.clone() for p in model.parameters() if p.grad is not None
        ]
    model.eval()
    with torch.no_grad():
        record.append(model(torch.randn(4, 3, 4, 4, generator=torch.Generator().manual_seed(9))))
    return record


def test_inserted_quantizers_equal_the_hand_built_layers_bit_for_bit():
    torch.manual_seed(0)
    auto = Residual()
    hand = ResidualByHand()
    hand.load_state_dict(auto.state_dict(), strict=False)
    _inserted(auto)
    a, b = _train(auto), _train(hand)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_quantizers_are_submodules_and_remove_restores_float():
    torch.manual_seed(0)
    model = Residual()
    x = torch.randn(2, 3, 4, 4)
    float_out = model(x)
    insertion = _inserted(model)
    assert set(model.inserted_quantizers) == {
        "inputs:Residual/__add___0:quant",
        "output:Residual/relu_0:quant",
    }
    assert all(any(m is q for m in model.modules()) for q in model.inserted_quantizers.values())
    assert not torch.equal(model(x), float_out)
    model(x), model(x)  # past the statistics: the learned scales are in the state_dict
    assert any(k.startswith("inserted_quantizers.") for k in model.state_dict())
    insertion.remove()
    assert torch.equal(model(x), float_out)


def test_unknown_scope_names_close_ones():
    insertion = QuantizerInsertion(Residual(), torch.randn(1, 3, 4, 4))
    with pytest.raises(
        KeyError, match=r"no traced operation at scope 'Residual/__add___1'.*Residual/__add___0"
    ):
        insertion.quantize_inputs("Residual/__add___1")


def test_twice_and_after_apply_are_refused():
    insertion = QuantizerInsertion(Residual(), torch.randn(1, 3, 4, 4))
    insertion.quantize_inputs("Residual/__add___0")
    with pytest.raises(ValueError, match="already have a module named 'quant'"):
        insertion.quantize_inputs("Residual/__add___0")
    insertion.apply()
    with pytest.raises(RuntimeError, match="before apply"):
        insertion.quantize_output("Residual/__add___0")
    with pytest.raises(RuntimeError, match="already applied"):
        insertion.apply()


def test_script_is_refused_and_trace_records_the_quantizers():
    torch.manual_seed(0)
    model = Residual()
    _inserted(model)
    _train(model, steps=3)  # past the statistics, in eval
    x = torch.randn(2, 3, 4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="TorchFunctionMode"):
            torch.jit.script(model)
        traced = torch.jit.trace(model, x)
    assert torch.equal(traced(x), model(x))


def test_no_trace_parts_are_not_counted():
    class WithBranch(Residual):
        def forward(self, x):
            with no_trace():
                _ = x + 1  # would otherwise be __add___0
            return super().forward(x)

    torch.manual_seed(0)
    model = WithBranch()
    insertion = QuantizerInsertion(model, torch.randn(1, 3, 4, 4))
    assert "WithBranch/__add___0" in insertion._ops
    assert insertion.graph.find("WithBranch/__add___0").input_shapes[0] == (1, 3, 4, 4)


class Affine(nn.Module):
    def __init__(self, scale: float, shift: float) -> None:
        super().__init__()
        self.scale, self.shift = scale, shift

    def forward(self, x):
        return x * self.scale + self.shift


def test_modules_sharing_a_location_run_by_priority():
    torch.manual_seed(0)
    model = Residual()
    x = torch.randn(2, 3, 4, 4)
    conv_out = model.conv1(x)
    insertion = QuantizerInsertion(model, x)
    # Inserted out of order: priority decides (0 first), then insertion order.
    insertion.insert("Residual/relu_0", "output", Affine(2.0, 0.0), priority=1, name="double")
    insertion.insert("Residual/relu_0", "output", Affine(1.0, 1.0), priority=0, name="shift")
    insertion.insert("Residual/relu_0", "output", Affine(1.0, -3.0), priority=1, name="late")
    insertion.apply()
    expected_y = (F.relu(conv_out + x) + 1.0) * 2.0 - 3.0
    expected = model.fc(expected_y.mean((2, 3)))
    assert torch.equal(model(x), expected)
    with pytest.raises(ValueError, match="where must be 'inputs' or 'output'"):
        QuantizerInsertion(Residual(), x).insert("Residual/relu_0", "before", Affine(1, 0))


def test_torch_compile_runs_the_inserted_quantizers():
    """Dynamo breaks the graph at the mode's calls and runs them as Python: the same outputs."""
    torch.manual_seed(0)
    model = Residual()
    _inserted(model)
    _train(model, steps=3)  # past the statistics, in eval
    x = torch.randn(2, 3, 4, 4)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(model, backend="eager")
        assert torch.equal(compiled(x), model(x))
