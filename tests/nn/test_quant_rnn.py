"""QuantRNN and QuantLSTM against Brevitas 0.12's recorded numbers (golden/brevitas_0_12_rnn.pt,
written by golden/record_rnn.py from the cases in golden/rnn_cases.py) and against a hand-built
model of the same quantizers around float ops written out here.

Golden replay, per case: the seeded initial state_dict bit for bit (same keys, same random
draws); every training step's outputs, hidden and cell states (every QuantTensor field) at the
precision the float kernels define (golden/precision.py: the gate products are this CPU's, whose
last bits differ between CPUs and torch versions, so within 64 ulps of the largest magnitude, and
a value with a recorded scale one quantization step off in at most 1 % of its elements);
gradients to the input and every parameter at rtol 1e-6 plus the step's summation bound (the
fused quantizer ops add up the scales' gradients in another order than Brevitas's autograd:
eps32 * sum|terms|, measured by golden/precision.py's SummationBound); after each step the
parameters are set to Brevitas's, so each forward starts from the same numbers; the eval outputs
after training; and a plain nn.RNN / nn.LSTM checkpoint loaded into a fresh layer (reports and
state bit for bit, eval outputs at kernel precision). Every replay also runs under
golden/foreign_kernels.py, which moves every matrix-product result by up to an ulp, as another
CPU would.
"""

import importlib.util
import os
from typing import Any, Dict, List

import pytest
import torch
import torch.nn.functional as F
from helpers import RecordedCalls
from torch import nn

import brevitas_cpp.nn as qnn
import brevitas_cpp.quant as qquant
from brevitas_cpp import config
from brevitas_cpp.quant_tensor import IntQuantTensor, QuantTensor

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN: Dict[str, Any] = torch.load(os.path.join(HERE, "golden", "brevitas_0_12_rnn.pt"))


def _load_golden(module_name: str, file_name: str):
    # pytest runs with --import-mode=importlib: the golden/ files are loaded by path.
    spec = importlib.util.spec_from_file_location(
        module_name, os.path.join(HERE, "golden", file_name)
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rc = _load_golden("nn_golden_rnn_cases", "rnn_cases.py")
pr = _load_golden("nn_golden_precision", "precision.py")
SEED, DATA_SEED = 2024, 7
GRAD_RTOL = 1e-6
RUNTIME_SCALE = "fused_activation_quant_proxy.tensor_quant.scaling_impl.value"


@pytest.fixture(autouse=True)
def _one_thread():
    # Brevitas was recorded on one thread: the same reduction order in the float kernels.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Every golden replay runs on this machine's float kernels and under foreign_kernels.py.
float_kernels = pr.float_kernels_fixture(SEED)


def flatten(out: Any, prefix: str = "out") -> Dict[str, torch.Tensor]:
    flat: Dict[str, torch.Tensor] = {}
    if isinstance(out, QuantTensor):
        flat[prefix] = out.value
        flat[prefix + ".scale"] = out.scale
        flat[prefix + ".zero_point"] = out.zero_point
        flat[prefix + ".bit_width"] = out.bit_width
    elif isinstance(out, torch.Tensor):
        flat[prefix] = out
    else:
        for i, item in enumerate(out):
            flat.update(flatten(item, f"{prefix}.{i}"))
    return flat


def values(out: Any) -> List[torch.Tensor]:
    if isinstance(out, QuantTensor):
        return [out.value]
    if isinstance(out, torch.Tensor):
        return [out]
    return [v for item in out for v in values(item)]


def build(name: str) -> nn.Module:
    torch.manual_seed(SEED)
    return rc.build(qnn, qquant, name)


@pytest.mark.parametrize("name", list(rc.CASES))
def test_against_brevitas(name: str, float_kernels) -> None:
    rec = GOLDEN["cases"][name]
    model = build(name)
    state = model.state_dict()
    assert list(state) == list(rec["init_state"])
    for key, value in rec["init_state"].items():
        assert torch.equal(state[key], value), key  # same draws from the same seed
    model.train()
    for index, step in enumerate(rec["steps"]):
        x = step["x"].clone().requires_grad_(True)
        out = model(x, *step["states"])
        pr.assert_flat_at_kernel_precision(flatten(out), step["out"], f"step {index}")
        loss = sum((o * g).sum() for o, g in zip(values(out), step["g"]))
        with pr.SummationBound() as summation:
            loss.backward()
        bound = summation.take()
        assert [n for n, _ in model.named_parameters()] == step["params"]
        what = f"step {index} d loss /"
        pr.assert_grad_close(x.grad, step["x_grad"], f"{what} d x", bound, GRAD_RTOL)
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        assert sorted(grads) == sorted(step["grads"]), f"step {index}"
        for key, grad in step["grads"].items():
            pr.assert_grad_close(grads[key], grad, f"{what} d {key}", bound, GRAD_RTOL)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(step["params_after"][n])  # Brevitas's SGD result, exactly
                p.grad = None
    model.eval()
    with torch.no_grad():
        pr.assert_flat_at_kernel_precision(flatten(model(rec["x_eval"])), rec["eval_out"], "eval")


# Under BREVITAS_JIT=1 (where building and re-initialising the scripted quantizers of a deep
# layer takes seconds) the loading path, which runs no quantizer code of its own, is replayed for
# the one-layer cases only; BREVITAS_JIT=0 replays every case.
LOAD_CASES = [n for n in rc.CASES if not config.JIT_ENABLED or n.endswith("_default")]


@pytest.mark.parametrize("name", LOAD_CASES)
def test_float_checkpoint_loads_as_in_brevitas(name: str, float_kernels) -> None:
    rec = GOLDEN["cases"][name]["float"]
    model = build(name)
    report = model.load_state_dict(
        {k: v.clone() for k, v in rec["state_dict"].items()}, strict=False
    )
    # Brevitas reports the not-yet-initialised learned scales of runtime-statistics quantizers
    # as missing; brevitas_cpp deliberately does not (tests/nn/golden/README.md). Every other
    # reported key is the same.
    assert report.missing_keys == [k for k in rec["missing"] if not k.endswith(RUNTIME_SCALE)]
    assert report.unexpected_keys == rec["unexpected"]
    state = model.state_dict()
    assert list(state) == list(rec["loaded_state"])
    for key, value in rec["loaded_state"].items():
        assert torch.equal(state[key], value), key
    model.eval()
    with torch.no_grad():
        out = model(GOLDEN["cases"][name]["x_eval"])
    pr.assert_flat_at_kernel_precision(flatten(out), rec["eval_out"], "eval")


def test_the_replay_still_catches_a_quantizer_bug() -> None:
    """The tolerance is the float kernels', not a quantizer's: every quantizer flooring instead
    of rounding fails the first output comparison (QuantTensor outputs, shared quantizers)."""
    with (
        pr.FloorInsteadOfRound(),
        pytest.raises(AssertionError, match=r"step 0 out.*(quantization step|elements differ)"),
    ):
        test_against_brevitas("rnn_shared_qt", float_kernels=None)


# ---- the layers against the same quantizers around float ops written out here ----


def _trained(model: nn.Module, x: torch.Tensor, steps: int = 2) -> nn.Module:
    """A few training forwards (statistics of the activation quantizers), then eval."""
    model.train()
    with torch.no_grad():
        for _ in range(steps):
            model(x)
    return model.eval()


def test_quant_rnn_is_the_quantizers_around_an_elman_step() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 2, 3)
    model = _trained(qnn.QuantRNN(3, 5), x)
    layer = model.layers[0][0]
    gate = layer.gate_params
    with torch.no_grad():
        out, h_n = model(x)
        qx = layer.io_quant(x)
        w_ih = gate.input_weight.weight_quant(gate.input_weight.weight)
        w_hh = gate.hidden_weight.weight_quant(gate.hidden_weight.weight)
        b = gate.bias_quant(gate.bias, qx, w_ih)
        assert torch.equal(b.scale, (qx.scale * w_ih.scale).view(-1))  # Int32Bias
        h = torch.zeros(2, 5)
        expected = []
        for t in range(4):
            acc = F.linear(qx.value[t], w_ih.value) + F.linear(h, w_hh.value) + b.value
            h = layer.io_quant(torch.tanh(layer.cell.gate_acc_quant(acc).value)).value
            expected.append(h)
    assert torch.equal(out, torch.stack(expected))
    assert torch.equal(h_n, h.unsqueeze(0))


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["f32", "f16", "bf16"]
)
def test_quant_lstm_is_the_quantizers_around_an_lstm_step(dtype) -> None:
    """In float32 and in a float16 or bfloat16 model (.to(dtype)), every step in that dtype."""
    torch.manual_seed(0)
    x = torch.randn(4, 2, 3).to(dtype)
    model = _trained(qnn.QuantLSTM(3, 5).to(dtype), x)
    layer = model.layers[0][0]
    cell = layer.cell
    with torch.no_grad():
        out, (h_n, c_n) = model(x)
        qx = layer.io_quant(x)

        def gate_operands(params):
            w_i = params.input_weight.weight_quant(params.input_weight.weight)
            w_h = params.hidden_weight.weight_quant(params.hidden_weight.weight)
            return w_i.value, w_h.value, params.bias_quant(params.bias, qx, w_i).value

        gates = {
            g: gate_operands(getattr(layer, f"{g}_gate_params"))
            for g in ("input", "forget", "cell", "output")
        }

        def acc(g, x_t, h):
            w_i, w_h, b = gates[g]
            return F.linear(x_t, w_i) + F.linear(h, w_h) + b

        h, c = torch.zeros(2, 5, dtype=dtype), torch.zeros(2, 5, dtype=dtype)
        expected = []
        for t in range(4):
            x_t = qx.value[t]
            i = cell.input_sigmoid_quant(cell.input_acc_quant(acc("input", x_t, h)).value).value
            f = cell.forget_sigmoid_quant(cell.forget_acc_quant(acc("forget", x_t, h)).value).value
            g = cell.cell_tanh_quant(cell.cell_acc_quant(acc("cell", x_t, h)).value).value
            o = cell.output_sigmoid_quant(cell.output_acc_quant(acc("output", x_t, h)).value).value
            fc = cell.cell_state_quant(f * c).value
            ig = cell.cell_state_quant(i * g).value
            c = cell.cell_state_quant(fc + ig).value
            h = layer.io_quant(o * cell.hidden_state_tanh_quant(c).value).value
            expected.append(h)
    assert torch.equal(out, torch.stack(expected))
    assert torch.equal(h_n, h.unsqueeze(0)) and torch.equal(c_n, c.unsqueeze(0))


FLOAT_SETTINGS = {"weight_quant": None, "bias_quant": None, "io_quant": None}


@pytest.mark.parametrize(
    "kwargs", [{}, {"num_layers": 2, "bidirectional": True, "batch_first": True}]
)
def test_unquantized_layers_compute_nn_rnn_and_nn_lstm(kwargs) -> None:
    """Every quantizer off: the float layers' recurrences (up to the order in which the two
    biases are added), with weights loaded from their own state_dict."""
    torch.manual_seed(1)
    shape = (2, 6, 3) if kwargs.get("batch_first") else (6, 2, 3)
    x = torch.randn(shape)
    states = (2 if kwargs.get("bidirectional") else 1) * kwargs.get("num_layers", 1)
    h0, c0 = torch.randn(states, 2, 4), torch.randn(states, 2, 4)
    rnn = nn.RNN(3, 4, nonlinearity="relu", **kwargs)
    qrnn = qnn.QuantRNN(3, 4, nonlinearity="relu", gate_acc_quant=None, **FLOAT_SETTINGS, **kwargs)
    qrnn.load_state_dict(rnn.state_dict())
    for got, expected in zip(qrnn(x, h0), rnn(x, h0)):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    lstm = nn.LSTM(3, 4, **kwargs)
    off = dict(gate_acc_quant=None, sigmoid_quant=None, tanh_quant=None, cell_state_quant=None)
    qlstm = qnn.QuantLSTM(3, 4, **off, **FLOAT_SETTINGS, **kwargs)
    qlstm.load_state_dict(lstm.state_dict())
    got, (h, c) = qlstm(x, h0, c0)
    expected, (eh, ec) = lstm(x, (h0, c0))
    for a, b in ((got, expected), (h, eh), (c, ec)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(
    config.JIT_ENABLED, reason="key mapping only, no quantizer code: run with BREVITAS_JIT=0"
)
def test_float_state_dict_loads_exactly() -> None:
    torch.manual_seed(2)
    lstm = nn.LSTM(3, 4, bidirectional=True)
    model = qnn.QuantLSTM(3, 4, bidirectional=True)
    model.load_state_dict(lstm.state_dict())  # strict: every key maps
    sd = lstm.state_dict()
    for direction, tag in enumerate(("l0", "l0_reverse")):
        layer = model.layers[0][direction]
        for k, gate in enumerate(("input", "forget", "cell", "output")):
            rows = slice(4 * k, 4 * (k + 1))  # nn.LSTM stacks the gates i, f, g, o
            params = getattr(layer, f"{gate}_gate_params")
            assert torch.equal(params.input_weight.weight, sd[f"weight_ih_{tag}"][rows])
            assert torch.equal(params.hidden_weight.weight, sd[f"weight_hh_{tag}"][rows])
            expected_bias = sd[f"bias_ih_{tag}"][rows] + sd[f"bias_hh_{tag}"][rows]
            assert torch.equal(params.bias, expected_bias)
    rnn = nn.RNN(3, 4, num_layers=2, bias=False)
    qrnn = qnn.QuantRNN(3, 4, num_layers=2, bias=False)
    qrnn.load_state_dict(rnn.state_dict())
    for index in range(2):
        gate = qrnn.layers[index][0].gate_params
        assert torch.equal(gate.input_weight.weight, getattr(rnn, f"weight_ih_l{index}"))
        assert torch.equal(gate.hidden_weight.weight, getattr(rnn, f"weight_hh_l{index}"))


def test_state_dict_round_trip_after_training() -> None:
    torch.manual_seed(3)
    x = torch.randn(5, 2, 3)
    model = _trained(qnn.QuantLSTM(3, 4, io_collect_stats_steps=4), x, steps=3)
    fresh = qnn.QuantLSTM(3, 4, io_collect_stats_steps=4)
    fresh.load_state_dict(model.state_dict())
    fresh.eval()
    with torch.no_grad():
        for a, b in zip(flatten(model(x)).values(), flatten(fresh(x)).values()):
            assert torch.equal(a, b)


def test_return_quant_tensor_outputs() -> None:
    torch.manual_seed(4)
    x = torch.randn(5, 2, 3)
    model = _trained(qnn.QuantLSTM(3, 4, return_quant_tensor=True), x)
    with torch.no_grad():
        out, (h, c) = model(x)
    for qt, proxy in (
        (out, model.layers[0][0].io_quant),
        (c, model.layers[0][0].cell.cell_state_quant),
    ):
        assert isinstance(qt, IntQuantTensor)
        assert torch.equal(qt.scale, proxy.scale())
        assert torch.equal(qt.value, (qt.int().float() - qt.zero_point) * qt.scale)


# ---- TorchScript and torch.compile ----


def test_time_loop_scripts_and_matches_eager() -> None:
    torch.manual_seed(5)
    x = torch.randn(4, 2, 3)
    for model in (qnn.QuantRNN(3, 4), qnn.QuantLSTM(3, 4, coupled_input_forget_gates=True)):
        _trained(model, x)
        cell = model.layers[0][0].fast_cell()
        if config.JIT_ENABLED:
            # The layer runs its loop compiled, over the same (scripted) quantizer blocks.
            assert isinstance(cell, torch.jit.ScriptModule)
            continue
        scripted = torch.jit.script(cell)
        h = torch.randn(2, 4)
        if isinstance(model, qnn.QuantRNN):
            args = (x, h, torch.randn(4, 3), torch.randn(4, 4), torch.randn(4))
        else:
            args = (
                x,
                h,
                torch.randn(2, 4),
                [torch.randn(4, 3)] * 4 + [torch.randn(4, 4)] * 4,
                [torch.randn(4)] * 4,
            )
        with torch.no_grad():
            expected, got = cell(*args), scripted(*args)
        assert str(expected) == str(got)  # same nested structure and values
        assert all(
            torch.equal(a, b) for a, b in zip(flatten(expected).values(), flatten(got).values())
        )


def test_stack_refuses_torch_jit_script_with_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="QuantLSTM.*share quantizers"):
        torch.jit.script(qnn.QuantLSTM(3, 4))


@pytest.mark.parametrize("cls", [qnn.QuantRNN, qnn.QuantLSTM])
def test_torch_compile_matches_eager(cls) -> None:
    torch.manual_seed(6)
    x = torch.randn(2, 2, 3)
    model = _trained(cls(3, 4), x)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=not config.JIT_ENABLED)
    xe, xc = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    expected, got = model(xe), compiled(xc)
    for a, b in zip(flatten(expected).values(), flatten(got).values()):
        assert torch.equal(a, b)
    values(expected)[0].sum().backward()
    values(got)[0].sum().backward()
    assert torch.equal(xe.grad, xc.grad)


# ---- bad input ----


# Brevitas 0.12.1's constructor parameters in its order (nn/quant_rnn.py), each with a value
# other than its default, so that an argument landing at another position shows.
RNN_POSITIONAL = [
    ("input_size", 3),
    ("hidden_size", 4),
    ("num_layers", 2),
    ("nonlinearity", "relu"),
    ("bias", False),
    ("batch_first", True),
    ("bidirectional", True),
    ("weight_quant", qquant.Int8WeightPerChannelFloat),
    ("bias_quant", None),
    ("io_quant", qquant.Uint8ActPerTensorFloat),
    ("gate_acc_quant", None),
    ("shared_input_hidden_weights", True),
    ("return_quant_tensor", True),
    ("dtype", torch.float64),
    ("device", "cpu"),
]
LSTM_POSITIONAL = [
    ("input_size", 3),
    ("hidden_size", 4),
    ("num_layers", 2),
    ("bias", False),
    ("batch_first", True),
    ("bidirectional", True),
    ("weight_quant", qquant.Int8WeightPerChannelFloat),
    ("bias_quant", None),
    ("io_quant", qquant.Uint8ActPerTensorFloat),
    ("gate_acc_quant", None),
    ("sigmoid_quant", None),
    ("tanh_quant", qquant.Int8ActPerTensorFloat),
    ("cell_state_quant", qquant.ShiftedUint8ActPerTensorFloat),
    ("coupled_input_forget_gates", True),
    ("cat_output_cell_states", False),
    ("shared_input_hidden_weights", True),
    ("shared_intra_layer_weight_quant", True),
    ("shared_intra_layer_gate_acc_quant", True),
    ("shared_cell_state_quant", False),
    ("return_quant_tensor", True),
    ("device", "cpu"),
    ("dtype", torch.float64),
]


@pytest.mark.parametrize(
    "cls, arguments",
    [(qnn.QuantRNN, RNN_POSITIONAL), (qnn.QuantLSTM, LSTM_POSITIONAL)],
    ids=["QuantRNN", "QuantLSTM"],
)
def test_positional_construction_is_keyword_construction(cls, arguments) -> None:
    """Brevitas's positional order (issue 32): the same layer as from keywords, same state and
    same outputs."""
    torch.manual_seed(5)
    by_position = cls(*[value for _, value in arguments], io_bit_width=6)
    torch.manual_seed(5)
    by_name = cls(**dict(arguments), io_bit_width=6)
    state = by_name.state_dict()
    assert list(by_position.state_dict()) == list(state)
    for key, value in by_position.state_dict().items():
        assert torch.equal(value, state[key]), key
    x = torch.randn(2, 5, 3, dtype=torch.float64)  # batch_first
    with torch.no_grad():
        got, expected = flatten(by_position(x)), flatten(by_name(x))
    assert list(got) == list(expected)
    for key, value in got.items():
        assert torch.equal(value, expected[key]), key


def test_bidirectional_is_read_by_its_truth_value() -> None:
    """As nn.RNN and Brevitas (whose tests pass bidirectional="shared_input_hidden_weights"):
    any true value builds both directions."""
    torch.manual_seed(6)
    truthy = qnn.QuantLSTM(3, 4, bidirectional="yes", shared_input_hidden_weights=True)
    torch.manual_seed(6)
    plain = qnn.QuantLSTM(3, 4, bidirectional=True, shared_input_hidden_weights=True)
    assert truthy.bidirectional is True and len(truthy.layers[0]) == 2
    assert truthy.state_dict().keys() == plain.state_dict().keys()
    x = torch.randn(5, 2, 3)
    with torch.no_grad():
        for a, b in zip(values(truthy(x)), values(plain(x))):
            assert torch.equal(a, b)
    assert len(qnn.QuantRNN(3, 4, bidirectional=0).layers[0]) == 1


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: qnn.QuantRNN(3, 4, nonlinearity="gelu"), ValueError, "nonlinearity"),
        (lambda: qnn.QuantRNN(0, 4), ValueError, "input_size"),
        (lambda: qnn.QuantLSTM(3, 4, num_layers=0), ValueError, "num_layers"),
        (
            lambda: qnn.QuantRNN(3, 4, shared_input_hidden_weights=True),
            RuntimeError,
            "shared_input_hidden_weights=True.*bidirectional=True",
        ),
        (
            lambda: qnn.QuantRNN(3, 4, io_quant=None, return_quant_tensor=True),
            RuntimeError,
            "return_quant_tensor=True requires.*io_quant",
        ),
        (
            lambda: qnn.QuantLSTM(3, 4, shared_cell_state_quant=False),
            RuntimeError,
            "cat_output_cell_states=True.*shared_cell_state_quant",
        ),
        (
            lambda: qnn.QuantLSTM(3, 4, cell_state_quant=None, return_quant_tensor=True),
            RuntimeError,
            "cell_state_quant",
        ),
        (lambda: qnn.QuantRNN(3, 4, weight_bitwidth=4), TypeError, "weight_bitwidth"),
        (lambda: qnn.QuantLSTM(3, 4, foo=1), TypeError, "foo=1.*prefixes"),
        (lambda: qnn.QuantLSTM(3, 4, batch_first=1), TypeError, "batch_first must be a bool"),
    ],
)
def test_bad_construction_names_the_argument(make, error, match) -> None:
    with pytest.raises(error, match=match):
        make()


def _quant_input(x: torch.Tensor, scale: float = 0.05) -> IntQuantTensor:
    as_tensor = torch.tensor(scale)
    value = torch.clamp(torch.round(x / scale), -128, 127) * scale
    return IntQuantTensor(value, as_tensor, torch.tensor(0.0), torch.tensor(8.0), True, False)


def test_input_scale_bias_without_io_quant_is_refused_when_it_runs() -> None:
    """Brevitas's moment and phrase (issue 32): QuantRNN(io_quant=None) with its default
    Int32Bias builds, a plain input fails in forward with "Input scale required", and a
    QuantTensor input gives the bias its scale, input scale x weight scale."""
    torch.manual_seed(0)
    model = qnn.QuantRNN(3, 5, io_quant=None, gate_acc_quant=None)
    x = torch.randn(4, 2, 3)
    with pytest.raises(
        RuntimeError,
        match=r"^Input scale required: QuantRNN: bias_quant=Int32Bias .*io_quant=None and a "
        r"plain Tensor input",
    ):
        model(x)
    qx = _quant_input(x)
    with torch.no_grad():
        out, h_n = model(qx)
        gate = model.layers[0][0].gate_params
        w_ih = gate.input_weight.weight_quant(gate.input_weight.weight)
        w_hh = gate.hidden_weight.weight_quant(gate.hidden_weight.weight)
        bias_scale = 0.05 * w_ih.scale
        b = torch.clamp(torch.round(gate.bias / bias_scale), -(2**31), 2**31 - 1) * bias_scale
        h = torch.zeros(2, 5)
        expected = []
        for t in range(4):
            h = torch.tanh(F.linear(qx.value[t], w_ih.value) + F.linear(h, w_hh.value) + b)
            expected.append(h)
    torch.testing.assert_close(out, torch.stack(expected), rtol=1e-6, atol=1e-6)


def test_input_scale_bias_errors_name_what_is_unquantized() -> None:
    x = _quant_input(torch.randn(4, 2, 3))
    # The second layer's input is the first one's output, unquantized without io_quant.
    stacked = qnn.QuantLSTM(3, 4, num_layers=2, io_quant=None)
    with pytest.raises(RuntimeError, match=r"^Input scale required: QuantLSTM: .*previous layer"):
        stacked(x)
    no_weight = qnn.QuantLSTM(3, 4, weight_quant=None)
    with pytest.raises(RuntimeError, match=r"^Input scale required: .*weight_quant=None"):
        no_weight(torch.randn(4, 2, 3))
    # Without bias, or with a bias quantizer of its own scale, nothing is missing.
    qnn.QuantLSTM(3, 4, io_quant=None, bias=False)(torch.randn(4, 2, 3))
    qnn.QuantLSTM(3, 4, io_quant=None, bias_quant=qquant.Int8BiasPerTensorFloatInternalScaling)(
        torch.randn(4, 2, 3)
    )


def test_bad_forward_input_names_the_argument() -> None:
    lstm = qnn.QuantLSTM(3, 4, num_layers=2)
    with pytest.raises(ValueError, match=r"hx must have shape .* \(2, 2, 4\), got \(1, 2, 4\)"):
        lstm(torch.randn(5, 2, 3), torch.randn(1, 2, 4))
    with pytest.raises(ValueError, match=r"cx must have shape"):
        lstm(torch.randn(5, 2, 3), torch.randn(2, 2, 4), torch.randn(2, 2, 5))
    with pytest.raises(ValueError, match=r"input must have shape \(seq, batch, input_size\)"):
        lstm(torch.randn(5, 2, 7))
    with pytest.raises(ValueError, match="input_size=3"):
        qnn.QuantRNN(3, 4)(torch.randn(5, 3))
    packed = nn.utils.rnn.pack_sequence([torch.randn(3, 3), torch.randn(2, 3)])
    with pytest.raises(RuntimeError, match="PackedSequence"):
        qnn.QuantRNN(3, 4)(packed)


def test_gate_accumulator_scale_starts_from_its_statistic() -> None:
    """Deliberate difference: Brevitas's reset_parameters also draws the learned scale of
    QuantRNN's gate_acc_quant (its name contains "gate") from U(-1/sqrt(h), 1/sqrt(h)), so the
    scale starts its learned phase at that times the statistic, negative half of the time. Here
    it starts at the statistic (with the same random draws, so the weights stay Brevitas's)."""
    torch.manual_seed(7)
    model = qnn.QuantRNN(3, 4, gate_acc_quant_collect_stats_steps=3)
    scaling = model.layers[0][0].cell.gate_acc_quant.fused_activation_quant_proxy.tensor_quant
    scaling = scaling.scaling_impl
    assert scaling.value.item() == 1.0  # untouched by reset_parameters
    model(torch.randn(5, 2, 3))  # 3 statistics steps, then the learned phase begins
    assert scaling.value.item() == scaling.buffer.item() > 0


# ---- the learned phase: quantizer metadata computed once per sequence ---------------------------


def _short_warmup(cls: type, **kwargs: Any) -> nn.Module:
    torch.manual_seed(4)
    prefixes = cls._prefixes[2:]  # the activation quantizers (after weight_ and bias_)
    warmup = {p + "collect_stats_steps": 2 for p in prefixes}
    return cls(3, 4, bidirectional=True, **warmup, **kwargs)


@pytest.mark.parametrize(
    "cls,kwargs",
    [
        (qnn.QuantLSTM, {}),
        (qnn.QuantLSTM, {"coupled_input_forget_gates": True}),
        (qnn.QuantRNN, {}),
    ],
    ids=["lstm", "lstm_cifg", "rnn"],
)
def test_sequence_metadata_equals_every_step(monkeypatch, cls, kwargs):
    """Past the statistics phase the time loop computes each quantizer's scale once per
    sequence: outputs and states bit for bit as when every step computes it, the learned
    scales' gradients equal up to the order of their sums, and the scale chain runs once per
    quantizer per forward instead of once per call."""
    from brevitas_cpp.nn import _rnn_cells

    x = torch.randn(6, 2, 3, generator=torch.Generator().manual_seed(5))
    fast, slow = _short_warmup(cls, **kwargs), _short_warmup(cls, **kwargs)
    for _ in range(3):  # statistics phase (2 calls per quantizer and more), then learned
        fast(x)
    # slow's time loops are built (on its first forward) computing on every step.
    monkeypatch.setattr(_rnn_cells, "_freezes_per_sequence", lambda fused: False)
    for _ in range(3):
        slow(x)
    monkeypatch.undo()
    step_loop = slow.layers[0][0].fast_cell()
    for name in slow.layers[0][0]._cell_quants():
        quant = getattr(step_loop, name)  # a scripted module keeps its class as original_name
        assert getattr(quant, "original_name", type(quant).__name__) == "_StepQuant", name
    for step in range(2):
        outs = [flatten(model(x)) for model in (fast, slow)]
        for key in outs[0]:
            assert torch.equal(outs[0][key], outs[1][key]), (step, key)
        for model in (fast, slow):
            model.zero_grad()
            sum(v.float().square().sum() for v in flatten(model(x)).values()).backward()
        for (name, a), (_, b) in zip(fast.named_parameters(), slow.named_parameters()):
            assert (a.grad is None) == (b.grad is None), name
            if a.grad is not None:
                torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-9, msg=name)
    if config.JIT_ENABLED:
        return  # the scripted loop's calls are not seen by a dispatch mode's Python frames
    with RecordedCalls() as fast_calls:
        fast(x)
    with RecordedCalls() as slow_calls:
        slow(x)
    # A learned scale is computed by the clamp of the scale chain, or inside the quantizer's
    # plan op (learned_int_quant) on every step. (The input quantizer, outside the loop, and
    # CIFG's ones still run on every call.)
    scale_ops = (
        "brevitas_cpp.scalar_signed_clamp_min_ste.default",
        "brevitas_cpp.learned_int_quant.default",
    )
    fast_count = sum(fast_calls.names.count(op) for op in scale_ops)
    slow_count = sum(slow_calls.names.count(op) for op in scale_ops)
    assert fast_count < slow_count / 2


@pytest.mark.skipif(config.JIT_ENABLED, reason="eager blocks are replaced; scripted ones are fixed")
def test_time_loop_is_rebuilt_when_a_quantizer_block_is_replaced():
    from brevitas_cpp.core.zero_point import ZeroZeroPoint

    layer = _short_warmup(qnn.QuantRNN).layers[0][0]
    loop = layer.fast_cell()
    assert layer.fast_cell() is loop
    tensor_quant = layer.cell.gate_acc_quant.fused_activation_quant_proxy.tensor_quant
    tensor_quant.zero_point_impl = ZeroZeroPoint()
    assert layer.fast_cell() is not loop
