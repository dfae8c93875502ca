"""The plan mechanism's rules (core/quant/plan, core/replan.py): a plan follows a block replaced
at any depth, copies and pickles plan again, a hook on a block the op would skip keeps the chain,
and force_module_chain switches a plan off and on. Reference: formulas written here."""

import copy
import io

import pytest
import torch

from brevitas_cpp import jit
from brevitas_cpp.core.quant.plan.match import force_module_chain
from brevitas_cpp.core.stats.stats_op import AbsMax
from brevitas_cpp.nn import QuantLinear, QuantReLU
from brevitas_cpp.quant import Uint8ActPerTensorFloat

pytestmark = pytest.mark.skipif(jit.JIT_ENABLED, reason="eager blocks are replaced and hooked")


class TwiceAbsMax(AbsMax):
    """A user's statistic: 2 max|x| (a subclass: the plan must not take it for AbsMax)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * x.abs().max()


def _linear():
    torch.manual_seed(0)
    return QuantLinear(6, 4, bias=False)


def _weight_scale(layer):
    return layer.quant_weight().scale


def test_a_nested_block_replaced_after_a_call_is_used_from_the_next_call():
    layer = _linear()
    tq = layer.weight_quant.tensor_quant
    w = layer.weight.detach()
    assert torch.equal(_weight_scale(layer), w.abs().max() / 127)  # stock: max|w| / 127
    assert tq.plan_weight
    # Three levels below the quantizer: no __setattr__ of the quantizer sees it.
    tq.scaling_impl.parameter_list_stats.stats.stats_impl = TwiceAbsMax()
    assert torch.equal(_weight_scale(layer), 2 * w.abs().max() / 127)
    assert not tq.plan_weight
    # Scripted from eager: compiled with the tree as it is now.
    scripted = torch.jit.script(layer)
    x = torch.randn(3, 6)
    assert torch.equal(scripted(x), layer(x))


def test_a_hook_on_a_skipped_block_runs_and_keeps_the_chain():
    layer = _linear()
    tq = layer.weight_quant.tensor_quant
    want = layer.quant_weight().value
    seen = []
    handle = tq.scaling_impl.register_forward_hook(lambda m, args, out: seen.append(out))
    try:
        got = layer.quant_weight().value
    finally:
        handle.remove()
    assert len(seen) == 1 and torch.equal(seen[0], layer.weight.detach().abs().max() / 127)
    assert torch.equal(got, want)


@pytest.mark.parametrize("how", ["deepcopy", "torch.save"])
def test_copies_plan_again_and_follow_their_own_tree(how):
    layer = _linear()
    layer(torch.randn(2, 6))
    if how == "deepcopy":
        twin = copy.deepcopy(layer)
    else:
        buffer = io.BytesIO()
        torch.save(layer, buffer)
        buffer.seek(0)
        twin = torch.load(buffer, weights_only=False)
    x = torch.randn(2, 6)
    assert torch.equal(twin(x), layer(x))
    assert twin.weight_quant.tensor_quant.plan_weight
    twin.weight_quant.tensor_quant.scaling_impl.parameter_list_stats.stats.stats_impl = (
        TwiceAbsMax()
    )
    w = layer.weight.detach()
    assert torch.equal(_weight_scale(twin), 2 * w.abs().max() / 127)
    assert torch.equal(_weight_scale(layer), w.abs().max() / 127)  # the original keeps its own


def test_force_module_chain_switches_the_plan_off_and_on():
    torch.manual_seed(0)
    layer = QuantReLU(act_quant=Uint8ActPerTensorFloat, collect_stats_steps=1)
    proxy = layer.act_quant.fused_activation_quant_proxy
    tq = proxy.tensor_quant
    for _ in range(3):  # statistics step, hand-over, learned step
        layer(torch.randn(2, 8))
    assert tq.plan_act and tq.plan_stats
    x = torch.randn(4, 8)
    planned = layer(x)
    force_module_chain(tq)
    chain = layer(x)
    assert not tq.plan_act and not proxy.relu_into_quant  # the ReLU's decision followed
    force_module_chain(tq, False)
    assert torch.equal(layer(x), planned)
    assert tq.plan_act and proxy.relu_into_quant
    # The learned scale's formula: relu(x) quantized to 8 unsigned bits with scale value / 255.
    scale = tq.scaling_impl.value.detach() / 255
    want = torch.clamp(torch.round(torch.relu(x) / scale), 0, 255) * scale
    assert torch.equal(planned, want) and torch.equal(chain, want)


def test_compiled_layers_follow_replacements_and_ignore_registrations_elsewhere():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    layer = _linear()
    compiled = torch.compile(layer, backend="eager")
    x = torch.randn(2, 6)
    before = compiled(x)
    graphs = counters["stats"]["unique_graphs"]
    torch.nn.Sequential(torch.nn.Linear(2, 2))  # modules registered elsewhere: no recompile
    assert torch.equal(compiled(x), before)
    assert counters["stats"]["unique_graphs"] == graphs
    layer.weight_quant.tensor_quant.scaling_impl.parameter_list_stats.stats.stats_impl = (
        TwiceAbsMax()
    )
    after = compiled(x)
    assert not torch.equal(after, before)
    assert torch.equal(after, layer(x))  # eager: the chain with the user's statistic
