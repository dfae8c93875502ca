"""torch.compile on a model of quant layers returning plain tensors: forward, parameter
gradients and eval equal eager mode bit for bit. With BREVITAS_JIT=0 the whole model is one
graph (fullgraph=True); TorchScript blocks (BREVITAS_JIT=1) are opaque to dynamo, so there the
compiled model runs with graph breaks and must still give the same numbers. The steps of the
statistics phase share one graph (brevitas_cpp.compiler's step-counter sources)."""

import re

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounter

import brevitas_cpp.nn as qnn
from brevitas_cpp import config
from brevitas_cpp.compiler import STEP_COUNTER_SOURCES, mark_step_counters_dynamic
from brevitas_cpp.inject.enum import ScalingImplType
from brevitas_cpp.quant import Int8ActPerTensorFloat, ShiftedUint8ActPerTensorFloat


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = qnn.QuantIdentity()
        self.conv = qnn.QuantConv2d(3, 4, 3, weight_bit_width=4)
        self.relu = qnn.QuantReLU()
        self.fc = qnn.QuantLinear(4 * 6 * 6, 5, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.relu(self.conv(self.inp(x))), 1))


def test_compiled_quant_model_matches_eager():
    torch.manual_seed(0)
    eager, twin = SmallNet(), SmallNet()
    twin.load_state_dict(eager.state_dict())
    compiled = torch.compile(twin, backend="aot_eager", fullgraph=not config.JIT_ENABLED)
    x = torch.randn(2, 3, 8, 8)
    for _ in range(3):  # statistics warm-up steps of the activation quantizers
        y_eager, y_compiled = eager(x), compiled(x)
        assert torch.equal(y_eager, y_compiled)
        y_eager.square().sum().backward()
        y_compiled.square().sum().backward()
    for (name, a), b in zip(eager.named_parameters(), twin.parameters()):
        assert (a.grad is None) == (b.grad is None), name
        if a.grad is not None:
            assert torch.equal(a.grad, b.grad), name
    eager.eval()
    compiled.eval()
    assert torch.equal(eager(x), compiled(x))


class CountedSteps(nn.Module):
    """One block of each kind that counts training calls in a Python int: a statistics-initialised
    scale and zero point, running statistics, and a quantization delay."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.scale = qnn.QuantIdentity(collect_stats_steps=steps)
        self.zero_point = qnn.QuantIdentity(
            act_quant=ShiftedUint8ActPerTensorFloat, collect_stats_steps=steps
        )
        self.running = qnn.QuantIdentity(act_quant=RunningStatsAct)
        self.delay = qnn.QuantReLU(quant_delay_steps=steps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.delay(self.running(self.zero_point(self.scale(x))))


class RunningStatsAct(Int8ActPerTensorFloat):
    scaling_impl_type = ScalingImplType.STATS


@pytest.mark.skipif(config.JIT_ENABLED, reason="TorchScript blocks keep their counters from dynamo")
def test_statistics_steps_share_one_graph():
    # More statistics steps than dynamo's recompile limit (8): with the counters as constants
    # each step compiled again, and from the limit on the model ran eagerly.
    steps = 12
    torch.manual_seed(0)
    eager, twin = CountedSteps(steps), CountedSteps(steps)
    twin.load_state_dict(eager.state_dict())
    graphs = CompileCounter()
    compiled = torch.compile(twin, backend=graphs, fullgraph=True)
    per_step = []
    for _ in range(steps + 4):
        x = torch.randn(2, 3, 4, 4)
        before = graphs.frame_count
        assert torch.equal(eager(x), compiled(x))
        per_step.append(graphs.frame_count - before)
    # The first step's graph, one at step 1 (a counter leaves 0: the first statistic is taken
    # as it is, later ones averaged in), none for the rest of the statistics phase, and those
    # of the hand-over (the step that initialises, then the learned steps).
    assert per_step[0] == 1 and sum(per_step[2:steps]) == 0, per_step
    assert sum(per_step[steps:]) <= 2 and sum(per_step[steps + 2 :]) == 0, per_step
    assert twin.scale.act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.counter == (
        steps + 1
    )


def test_counter_sources_keep_the_users_entries():
    saved = torch.compiler.config.dynamic_sources
    try:
        torch.compiler.config.dynamic_sources = "L['x']:0," + STEP_COUNTER_SOURCES[0]
        mark_step_counters_dynamic()
        mark_step_counters_dynamic()
        entries = torch.compiler.config.dynamic_sources.split(",")
        assert entries == ["L['x']:0", *STEP_COUNTER_SOURCES]
        # What a nested quantizer's counter is called in dynamo's guards; a user's own
        # attribute named counter is not matched.
        quant = "L['self']._modules['body']._modules['0']._modules['act_quant']"
        for name, matched in (
            (f"{quant}._modules['tensor_quant']._modules['scaling_impl'].counter", True),
            (f"{quant}._modules['tensor_quant']._modules['zero_point_impl'].counter", True),
            (f"{quant}._modules['scaling_impl']._modules['runtime_stats'].counter", True),
            (f"{quant}._modules['delay_wrapper']._modules['delay_impl'].quant_delay_steps", True),
            ("L['self']._modules['head'].counter", False),
        ):
            assert any(re.match(p, name) for p in entries[1:]) == matched, name
    finally:
        torch.compiler.config.dynamic_sources = saved
