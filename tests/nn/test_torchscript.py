"""TorchScript of models built from the quant layers (default return_quant_tensor=False between
layers): torch.jit.trace and torch.jit.script in train and eval mode, torch.jit.save/load round
trips with identical outputs and gradients (w.r.t. the input and every parameter), in both
BREVITAS_JIT modes. A scripted model runs the statistics warm-up itself (the step counters live
in the core blocks), so it trains from a fresh model exactly as the eager one does. Scripting
leaves the user's eager model as it was. A loaded model needs the ops registered:
``import brevitas_cpp`` in Python, libbrevitas_cpp_ops.so in C++.

A scripted model in train mode is also written as the fixture of the C++ test
tests/cpp/jit/test_load_scripted_model.cpp (model, input, expected output and gradients), which
loads it with torch::jit::load in a process without Python.

Per-layer scripting (every layer that takes and returns Tensors) is in test_script_layers.py.
"""

import io
import warnings
from pathlib import Path
from typing import Dict, Tuple

import pytest
import torch
from torch import Tensor, nn

import brevitas_cpp.nn as qnn
from brevitas_cpp.quant import (
    Int8ActPerTensorEma,
    Int8ActPerTensorFloat,
    Int8WeightPerChannelMaxAbs,
    Int32Bias,
)

# Few warm-up steps: the runtime-statistics scales switch to their learned parameter quickly.
WARMUP_STEPS = 2


class SmallQuantCNN(nn.Module):
    """QuantIdentity -> QuantConv2d -> QuantReLU -> QuantLinear, default
    return_quant_tensor=False between layers. The conv quantizes its own input, so that its
    Int32Bias takes its scale from input scale x weight scale."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = qnn.QuantIdentity(collect_stats_steps=WARMUP_STEPS)
        self.conv = qnn.QuantConv2d(
            3,
            4,
            3,
            bias=True,
            bias_quant=Int32Bias,
            input_quant=Int8ActPerTensorFloat,
            input_collect_stats_steps=WARMUP_STEPS,
        )
        self.relu = qnn.QuantReLU(collect_stats_steps=WARMUP_STEPS)
        self.fc = qnn.QuantLinear(4 * 6 * 6, 5, bias=True)

    def forward(self, x: Tensor) -> Tensor:
        x = self.inp(x)
        x = self.conv(x)
        x = self.relu(x)
        return self.fc(x.flatten(1))


def _model(training: bool) -> Tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    model = SmallQuantCNN()
    model.train()
    # Through the statistics warm-up, so that the traced path (the learned scales) is the one
    # every later training step takes: a trace records one path, and the warm-up's step counter
    # is a Python attribute the trace can not update.
    with torch.no_grad():
        for _ in range(WARMUP_STEPS + 1):
            model(torch.randn(4, 3, 8, 8))
    model.train(training)
    return model, torch.randn(2, 3, 8, 8)


def _trace(model: nn.Module, x: Tensor) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        # The quantizers' shape and device checks read Python values: constant in the trace.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        # check_trace off: the tests compare the trace with the eager model themselves.
        return torch.jit.trace(model, x, check_trace=False)


def _round_trip(module: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)


def _forward_backward(model: nn.Module, x: Tensor) -> Tuple[Tensor, Tensor, Dict[str, Tensor]]:
    """Output, input gradient and parameter gradients of sum(output * weights)."""
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    y = model(x)
    # Distinct weights per output element, so a permuted gradient does not pass.
    (y * torch.linspace(-1.0, 1.0, y.numel()).view_as(y)).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return y.detach(), x.grad, grads


def _assert_same(expected, actual) -> None:
    y, x_grad, grads = expected
    y_t, x_grad_t, grads_t = actual
    assert torch.equal(y_t, y)
    assert torch.equal(x_grad_t, x_grad)
    assert grads_t.keys() == grads.keys()
    for name in grads:
        assert torch.equal(grads_t[name], grads[name]), name


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_trace_keeps_outputs_and_gradients(training):
    model, x = _model(training)
    expected = _forward_backward(model, x)
    # Every learned parameter reaches the loss (scales included).
    assert {"conv.weight", "conv.bias", "fc.weight", "fc.bias"} <= expected[2].keys()
    assert any("scaling_impl" in name for name in expected[2])
    traced = _trace(model, x)
    assert traced.training == training
    _assert_same(expected, _forward_backward(traced, x))
    # Another input and batch size: the trace is not specialised to the example's values.
    other = torch.randn(3, 3, 8, 8)
    _assert_same(_forward_backward(model, other), _forward_backward(traced, other))


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_traced_model_save_load_keeps_outputs_and_gradients(training):
    model, x = _model(training)
    loaded = _round_trip(_trace(model, x))
    assert loaded.training == training
    for inp in (x, torch.randn(3, 3, 8, 8)):
        _assert_same(_forward_backward(model, inp), _forward_backward(loaded, inp))


def test_saved_traced_model_trains_like_the_eager_one():
    model, x = _model(training=True)
    loaded = _round_trip(_trace(model, x))
    opt_eager = torch.optim.SGD(model.parameters(), lr=0.01)
    opt_loaded = torch.optim.SGD(loaded.parameters(), lr=0.01)
    for step in range(3):
        batch = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(step))
        for m, opt in ((model, opt_eager), (loaded, opt_loaded)):
            opt.zero_grad()
            m(batch).square().mean().backward()
            opt.step()
    loaded_params = dict(loaded.named_parameters())
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), loaded_params[name].detach()), name


def _fresh_model(training: bool = True) -> nn.Module:
    """A model straight from its constructor (no warm-up), the same for the same seed."""
    torch.manual_seed(0)
    return SmallQuantCNN().train(training)


def _batch(step: int, batch_size: int = 2) -> Tensor:
    return torch.randn(batch_size, 3, 8, 8, generator=torch.Generator().manual_seed(step))


def _assert_trains_alike(eager: nn.Module, other: nn.Module, steps: int) -> None:
    """SGD steps on both: same outputs, input gradient and parameter gradients at every step,
    and same parameters after it; the first steps are the statistics warm-up and the switch to
    the learned scales, which the other model runs on its own step counters."""
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.05)
    opt_other = torch.optim.SGD(other.parameters(), lr=0.05)
    for step in range(steps):
        x = _batch(step)
        _assert_same(_forward_backward(eager, x), _forward_backward(other, x))
        opt_eager.step()
        opt_other.step()
    other_params = dict(other.named_parameters())
    for name, p in eager.named_parameters():
        assert torch.equal(p.detach(), other_params[name].detach()), name
    eager.eval()
    other.eval()
    x = _batch(steps)
    _assert_same(_forward_backward(eager, x), _forward_backward(other, x))


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_script_keeps_outputs_and_gradients(training):
    model, x = _model(training)
    expected = _forward_backward(model, x)
    scripted = torch.jit.script(model)
    assert scripted.training == training
    _assert_same(expected, _forward_backward(scripted, x))
    # Another batch size: nothing is specialised to the example.
    other = torch.randn(3, 3, 8, 8)
    _assert_same(_forward_backward(model, other), _forward_backward(scripted, other))


def test_scripted_model_trains_from_scratch_like_the_eager_one():
    # Two warm-up steps, the switch to the learned scales, then learned-scale steps.
    _assert_trains_alike(_fresh_model(), torch.jit.script(_fresh_model()), WARMUP_STEPS + 3)


def test_script_leaves_the_eager_model_alone():
    model = _fresh_model()
    before = dict(model.named_modules())
    torch.jit.script(model)
    after = dict(model.named_modules())
    # The same module objects under the same names: nothing was swapped into the model.
    assert after.keys() == before.keys()
    assert all(after[name] is module for name, module in before.items())
    # And it still trains as a model that was never scripted.
    _assert_trains_alike(_fresh_model(), model, WARMUP_STEPS + 2)


def test_script_compiles_the_train_and_eval_paths():
    """A script keeps the Python control flow a trace would freeze: a model scripted in eval
    mode trains (warm-up included) once put in train mode, and back."""
    scripted = torch.jit.script(_fresh_model(training=False))
    scripted.train()
    _assert_trains_alike(_fresh_model(), scripted, WARMUP_STEPS + 2)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_scripted_model_save_load_keeps_outputs_and_gradients(training):
    model, x = _model(training)
    loaded = _round_trip(torch.jit.script(model))
    assert loaded.training == training
    for inp in (x, torch.randn(3, 3, 8, 8)):
        _assert_same(_forward_backward(model, inp), _forward_backward(loaded, inp))


def test_saved_scripted_model_trains_from_scratch_like_the_eager_one():
    # Saved before the warm-up: the step counters travel in the file and drive the loaded copy.
    loaded = _round_trip(torch.jit.script(_fresh_model()))
    _assert_trains_alike(_fresh_model(), loaded, WARMUP_STEPS + 3)


def write_cpp_fixture(directory: Path) -> None:
    """Saves what tests/cpp/jit/test_load_scripted_model.cpp checks (ctest runs this through
    tests/cpp/jit/make_fixture.py): model.pt (the scripted SmallQuantCNN, fresh, in train mode:
    its first forward is a statistics warm-up step) and expected.pt (a scripted module whose
    attributes are the input, the expected output, the input gradient and each parameter's
    gradient, '.' in names replaced by '_'); and the seed-003 model's pair (_write_cpp_ema_fixture)."""
    # Serialised in memory first: a failed torch.jit.save would leave a truncated file behind.
    model_bytes, expected_bytes = io.BytesIO(), io.BytesIO()
    torch.jit.save(torch.jit.script(_fresh_model(training=True)), model_bytes)
    # The expected values come from a copy loaded from the same bytes, in the state the C++ side
    # loads it (before any step); checked against the eager model first.
    x = _batch(0)
    y, x_grad, grads = _forward_backward(torch.jit.load(io.BytesIO(model_bytes.getvalue())), x)
    _assert_same(_forward_backward(_fresh_model(training=True), x), (y, x_grad, grads))

    expected = nn.Module()
    tensors = {"input": x, "output": y, "input_grad": x_grad}
    tensors.update({"grad_" + name.replace(".", "_"): g for name, g in grads.items()})
    for name, tensor in tensors.items():
        expected.register_buffer(name, tensor.detach().clone())
    torch.jit.save(torch.jit.script(expected), expected_bytes)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.pt").write_bytes(model_bytes.getvalue())
    (directory / "expected.pt").write_bytes(expected_bytes.getvalue())
    _write_cpp_ema_fixture(directory)
    # What the C++ side will do, checked here too: load both files and compare.
    loaded = torch.jit.load(str(directory / "model.pt"))
    assert loaded.training
    stored = torch.jit.load(str(directory / "expected.pt"))
    _assert_same(
        _forward_backward(loaded, stored.input),
        (
            stored.output,
            stored.input_grad,
            {name: getattr(stored, "grad_" + name.replace(".", "_")) for name in grads},
        ),
    )


def _ema_model() -> nn.Module:
    """Seed 003's quantizers: their threshold and counter buffers are updated in place by the op
    at every training forward, also in a model loaded in C++."""
    torch.manual_seed(0)
    return nn.Sequential(
        qnn.QuantIdentity(act_quant=Int8ActPerTensorEma, ema_decay=0.25),
        qnn.QuantConv2d(3, 4, 3, weight_quant=Int8WeightPerChannelMaxAbs),
        qnn.QuantReLU(act_quant=Int8ActPerTensorEma, ema_decay=0.25, delay_quant=1),
    ).train()


def _ema_statistics(model: nn.Module) -> Dict[str, Tensor]:
    return {
        name.replace(".", "_"): b.detach().clone()
        for name, b in model.named_buffers()
        if name.endswith(("threshold", "iteration"))
    }


def _write_cpp_ema_fixture(directory: Path) -> None:
    """ema_model.pt (fresh, train mode) and ema_expected.pt: inputs input0 and input1, output1 (the
    second training forward's output) and every threshold/iteration buffer after the two calls
    (name with '.' -> '_'), recorded from a copy loaded from the same bytes."""
    model_bytes, expected_bytes = io.BytesIO(), io.BytesIO()
    torch.jit.save(torch.jit.script(_ema_model()), model_bytes)
    loaded = torch.jit.load(io.BytesIO(model_bytes.getvalue()))
    eager = _ema_model()
    x0, x1 = _batch(0), 2 * _batch(1)
    with torch.no_grad():
        for model in (loaded, eager):
            model(x0)
        output = loaded(x1)
        assert torch.equal(output, eager(x1))
    statistics = _ema_statistics(loaded)
    assert statistics.keys() == _ema_statistics(eager).keys() and len(statistics) == 6
    for name, value in _ema_statistics(eager).items():
        assert torch.equal(statistics[name], value), name
    expected = nn.Module()
    for name, tensor in {"input0": x0, "input1": x1, "output1": output, **statistics}.items():
        expected.register_buffer(name, tensor.detach().clone())
    torch.jit.save(torch.jit.script(expected), expected_bytes)
    (directory / "ema_model.pt").write_bytes(model_bytes.getvalue())
    (directory / "ema_expected.pt").write_bytes(expected_bytes.getvalue())


def test_cpp_fixture_is_written_and_loads_back(tmp_path):
    write_cpp_fixture(tmp_path / "jit_fixture")
    assert sorted(p.name for p in (tmp_path / "jit_fixture").iterdir()) == [
        "ema_expected.pt",
        "ema_model.pt",
        "expected.pt",
        "model.pt",
    ]


def test_scripting_compiles_no_python_state_of_the_proxies(monkeypatch):
    # A proxy's injector is Python state that compiled code never reads. TorchScript tried to
    # compile its class for every proxy and failed, a third of scripting a ResNet-18.
    import torch.jit._script as jit_script

    compiled = []
    compile_class = jit_script._recursive_compile_class

    def record(obj, loc):
        compiled.append(getattr(obj, "__qualname__", repr(obj)))
        return compile_class(obj, loc)

    monkeypatch.setattr(jit_script, "_recursive_compile_class", record)
    torch.jit.script(SmallQuantCNN())
    assert compiled == []
