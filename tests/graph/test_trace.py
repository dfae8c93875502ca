"""brevitas_cpp.graph.trace: the operations of one forward, with NNCF's scope addresses, written
out here for a small residual network."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from brevitas_cpp.graph import no_trace, trace


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 4, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.conv1(x) + x)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 1)
        self.layer1 = nn.Sequential(Block(), Block())
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        x = self.layer1(self.stem(x))
        pooled = torch.cat([x.mean((2, 3)), F.adaptive_max_pool2d(x, 1).flatten(1)], 1)
        if x.shape[0] > 0:  # metadata reads are not operations
            with no_trace():
                _ = x.abs().max()
        return self.fc(pooled)


EXPECTED = [
    ("/nncf_model_input_0", [], (1, 3, 5, 5)),
    ("Net/Conv2d[stem]/conv2d_0", [0], (1, 4, 5, 5)),
    ("Net/Sequential[layer1]/Block[0]/Conv2d[conv1]/conv2d_0", [1], (1, 4, 5, 5)),
    ("Net/Sequential[layer1]/Block[0]/__add___0", [2, 1], (1, 4, 5, 5)),
    ("Net/Sequential[layer1]/Block[0]/ReLU[relu]/relu_0", [3], (1, 4, 5, 5)),
    ("Net/Sequential[layer1]/Block[1]/Conv2d[conv1]/conv2d_0", [4], (1, 4, 5, 5)),
    ("Net/Sequential[layer1]/Block[1]/__add___0", [5, 4], (1, 4, 5, 5)),
    ("Net/Sequential[layer1]/Block[1]/ReLU[relu]/relu_0", [6], (1, 4, 5, 5)),
    ("Net/mean_0", [7], (1, 4)),
    ("Net/adaptive_max_pool2d_0", [7], (1, 4, 1, 1)),
    ("Net/flatten_0", [9], (1, 4)),
    ("Net/cat_0", [8, 10], (1, 8)),
    ("Net/Linear[fc]/linear_0", [11], (1, 2)),
    ("/nncf_model_output_0", [12], (1, 2)),
]


def test_scopes_edges_and_shapes():
    torch.manual_seed(0)
    graph = trace(Net(), torch.randn(1, 3, 5, 5))
    got = [(n.scope, n.inputs, n.output_shapes[0]) for n in graph.nodes]
    assert got == EXPECTED
    conv = graph.find("Net/Conv2d[stem]/conv2d_0")
    assert conv.op == "conv2d" and conv.module_scope == "Net/Conv2d[stem]"
    # Tensor arguments: the input, the weight and the bias.
    assert conv.input_shapes == [(1, 3, 5, 5), (4, 3, 1, 1), (4,)]
    assert [n.scope for n in graph.successors(graph.nodes[7])] == [
        "Net/mean_0",
        "Net/adaptive_max_pool2d_0",
    ]


def test_traces_are_identical_from_run_to_run():
    torch.manual_seed(0)
    model = Net()
    first = trace(model, torch.randn(1, 3, 5, 5))
    second = trace(model, torch.randn(1, 3, 5, 5))
    assert first == second
    assert str(first) == str(second)


def test_trace_leaves_the_model_as_it_was():
    model = Net()
    hooks = [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()]
    x = torch.randn(2, 3, 5, 5)
    expected = model(x)
    trace(model, x)
    assert [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()] == hooks
    assert torch.equal(model(x), expected)


def test_printing_and_dot():
    graph = trace(Net(), torch.randn(1, 3, 5, 5))
    text = str(graph)
    assert (
        text.splitlines()[3]
        == "%3 = Net/Sequential[layer1]/Block[0]/__add___0(%2, %1) -> [1x4x5x5]"
    )
    dot = graph.to_dot()
    assert dot.startswith("digraph traced {") and "n2 -> n3;" in dot and "n1 -> n3;" in dot
    assert dot.count(" -> ") == sum(len(n.inputs) for n in graph.nodes)


def test_bad_model():
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        trace(lambda x: x, torch.randn(1))


def test_tracing_changes_nothing_in_the_model():
    from brevitas_cpp.nn import QuantReLU

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4), QuantReLU(collect_stats_steps=2))
    model.train()
    model[1].eval()  # a mixed mode, restored as it was
    state = {k: v.clone() for k, v in model.state_dict().items()}
    modes = [m.training for m in model.modules()]
    counter = model[2].act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.counter
    trace(model, torch.randn(2, 3, 4, 4))
    assert [m.training for m in model.modules()] == modes
    assert (
        model[2].act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.counter == counter
    )
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
