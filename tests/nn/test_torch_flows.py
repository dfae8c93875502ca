"""Ordinary torch flows through the quant layers (issue 29, item 4), each against a reference the
code under test does not produce: an empty batch in training (the same model that never saw it,
and the float torch layer's output shape), float16 and bfloat16 models (the float32 model where
every value is exact in both dtypes; the dtype's smallest normal number as the least scale),
models built on the meta device and given memory with to_empty() (the same model built on the
CPU), and torch.save of whole models (the model that was saved)."""

import io
import pickle

import pytest
import torch
from helpers import MHA_PREFIXES, short_warmup
from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.config import JIT_ENABLED
from brevitas_cpp.quant import Int8ActPerTensorFloat, Int32Bias

LSTM_PREFIXES = ("io_", "gate_acc_", "sigmoid_", "tanh_", "cell_state_")


def seq(width: int):
    return lambda batch, g: (torch.randn(batch, 5, width, generator=g),)


# name -> (the quant layer, its inputs for a batch size, the float torch layer of the same shapes)
LAYERS = {
    "relu": (
        lambda: qnn.QuantReLU(**short_warmup("")),
        lambda batch, g: (torch.randn(batch, 6, generator=g),),
        nn.ReLU,
    ),
    "identity": (
        lambda: qnn.QuantIdentity(**short_warmup("")),
        lambda batch, g: (torch.randn(batch, 6, generator=g),),
        nn.Identity,
    ),
    "conv2d": (
        lambda: qnn.QuantConv2d(
            3, 4, 3, input_quant=Int8ActPerTensorFloat, **short_warmup("input_")
        ),
        lambda batch, g: (torch.randn(batch, 3, 5, 5, generator=g),),
        lambda: nn.Conv2d(3, 4, 3),
    ),
    "linear": (
        lambda: qnn.QuantLinear(6, 3, input_quant=Int8ActPerTensorFloat, **short_warmup("input_")),
        lambda batch, g: (torch.randn(batch, 6, generator=g),),
        lambda: nn.Linear(6, 3),
    ),
    "lstm": (
        lambda: qnn.QuantLSTM(3, 4, batch_first=True, **short_warmup(*LSTM_PREFIXES)),
        seq(3),
        lambda: nn.LSTM(3, 4, batch_first=True),
    ),
    "mha": (
        lambda: qnn.QuantMultiheadAttention(8, 2, batch_first=True, **short_warmup(*MHA_PREFIXES)),
        # Self-attention (the packed in_proj's): query, key and value are one tensor.
        lambda batch, g: (torch.randn(batch, 5, 8, generator=g),) * 3,
        lambda: nn.MultiheadAttention(8, 2, batch_first=True),
    ),
}


def layers(*skipped_under_jit: str) -> list:
    """LAYERS' names, those given left out under BREVITAS_JIT=1: there building a recurrent or
    attention layer scripts each of its blocks (seconds), and another name runs the same path."""
    under_jit = pytest.mark.skipif(JIT_ENABLED, reason="the same path as another layer's")
    return [
        pytest.param(name, marks=under_jit) if name in skipped_under_jit else name
        for name in LAYERS
    ]


def build(name: str, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return LAYERS[name][0]()


def batches(name: str, count: int, batch: int = 3, seed: int = 1) -> list:
    g = torch.Generator().manual_seed(seed)
    return [LAYERS[name][1](batch, g) for _ in range(count)]


def first(out):
    """The output tensor (recurrent and attention layers return tuples)."""
    return out[0] if isinstance(out, tuple) else out


def emptied(inputs: tuple) -> tuple:
    """The inputs cut to no sample, requiring grad; one tensor stays one (self-attention)."""
    cut = {}
    for t in inputs:
        if id(t) not in cut:
            cut[id(t)] = t[:0].clone().requires_grad_()
    return tuple(cut[id(t)] for t in inputs)


def train_step(model: nn.Module, inputs: tuple, optimizer=None) -> torch.Tensor:
    out = first(model(*inputs))
    out.sum().backward()
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad()
    return out.detach()


def grads(model: nn.Module) -> list:
    return [p.grad for p in model.parameters()]


def assert_same_grads(a: nn.Module, b: nn.Module) -> None:
    for ga, gb in zip(grads(a), grads(b)):
        assert (ga is None) == (gb is None)
        if ga is not None:
            assert torch.equal(ga, gb)


def sharing(model: nn.Module) -> list:
    """Which places hold one parameter object (e.g. a weight and the quantizer reading it)."""
    places = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        places.setdefault(id(p), []).append(name)
    return sorted(sorted(names) for names in places.values())


def all_tensors(model: nn.Module) -> list:
    return [*model.parameters(), *model.buffers()]


# ---- an empty batch in training ------------------------------------------------------------------


@pytest.mark.parametrize("name", layers("mha"))
def test_empty_batch_in_training_leaves_the_statistics(name):
    """Before each batch the model sees an empty one, through the statistics phase, the call
    that initialises the learned scales and the learned phase: every real batch then gives the
    outputs and gradients of the same model that never saw an empty batch (no statistics step
    counted, no running value touched). The empty batch gives the float layer's output shape,
    and backward gives every parameter a zero gradient (as BatchNorm does)."""
    seen, never = build(name).train(), build(name).train()
    float_layer = LAYERS[name][2]()
    for inputs in batches(name, 4):
        empty = emptied(inputs)
        out = first(seen(*empty))
        assert out.shape == first(float_layer(*empty)).shape and out.dtype == torch.float32
        out.sum().backward()
        assert empty[0].grad is not None and empty[0].grad.shape == empty[0].shape
        assert all(g is not None and not g.any() for g in grads(seen))
        seen.zero_grad()
        assert torch.equal(train_step(seen, inputs), train_step(never, inputs))
        assert_same_grads(seen, never)
        seen.zero_grad()
        never.zero_grad()
    seen.eval()
    never.eval()
    inputs = batches(name, 1, seed=2)[0]
    assert torch.equal(first(seen(*inputs)), first(never(*inputs)))


# ---- float16 and bfloat16 ------------------------------------------------------------------------

LOW_PRECISION = [torch.float16, torch.bfloat16]


def assert_exact_twins(
    wide: nn.Module, narrow: nn.Module, x: torch.Tensor, dtype, with_parameters: bool
) -> None:
    """The float32 model and its twin in dtype on x (exact in both), in training then in eval:
    the same outputs and input gradients (and parameter gradients), bit for bit."""
    for training in (True, False):
        wide.train(training)
        narrow.train(training)
        x_wide, x_narrow = x.clone().requires_grad_(), x.to(dtype).requires_grad_()
        y_wide, y_narrow = wide(x_wide), narrow(x_narrow)
        assert y_narrow.dtype == dtype
        assert torch.equal(y_narrow.float(), y_wide)
        y_wide.sum().backward()
        y_narrow.sum().backward()
        assert torch.equal(x_narrow.grad.float(), x_wide.grad)
        if with_parameters:
            for p_wide, p_narrow in zip(wide.parameters(), narrow.parameters()):
                assert torch.equal(p_narrow.grad.float(), p_wide.grad)
        wide.zero_grad()
        narrow.zero_grad()


def learned_scale(model: nn.Module, exponent: int) -> None:
    """Past its statistics (two training calls with collect_stats_steps=1), the activation
    quantizer's learned scale set to 2^exponent: threshold * 2^exponent is exact in every dtype,
    and so is its division by the threshold."""
    for inputs in batches("relu", 2):
        model(*inputs)
    for module in model.modules():
        if hasattr(module, "collect_stats_steps"):
            threshold = 255.0 if isinstance(model, qnn.QuantReLU) else 128.0
            with torch.no_grad():
                module.value.fill_(threshold * 2.0**exponent)


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=["f16", "bf16"])
@pytest.mark.parametrize("make", [qnn.QuantReLU, qnn.QuantIdentity], ids=["relu", "identity"])
def test_low_precision_activation_equals_float32_where_exact(make, dtype):
    """Scale 2^-5 (exact in every dtype): x / s is exact, its rounding too, and 8-bit integers
    times 2^-5 are exact in float16 and bfloat16, so the model in dtype gives the float32
    model's outputs and input gradients, in training and in eval."""
    wide, narrow = make(collect_stats_steps=1), make(collect_stats_steps=1).to(dtype)
    learned_scale(wide, -5)
    learned_scale(narrow, -5)
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(3)).to(dtype)
    assert_exact_twins(wide, narrow, x.float(), dtype, with_parameters=False)


def small_int_weight(shape, g) -> torch.Tensor:
    """Integers in [-1, 1] with one 127, times 2^-7: max|w| / 127 = 2^-7 is the weight scale
    (Int8WeightPerTensorFloat, narrow range), exact in every dtype, and so is every w / s."""
    w = torch.randint(-1, 2, shape, generator=g).float()
    w.view(-1)[0] = 127.0
    return w * 2.0**-7


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=["f16", "bf16"])
@pytest.mark.parametrize("name", ["linear", "conv2d"])
def test_low_precision_weight_layer_equals_float32_where_exact(name, dtype):
    """A default QuantLinear / QuantConv2d (weight quantizer only) whose quantized weights,
    inputs and biases are small integers times powers of two: every sum stays an integer below
    256 times 2^-11, exact in bfloat16's 8 bits, so the dtype model gives the float32 model's
    outputs and gradients (input, weight, bias) exactly."""
    g = torch.Generator().manual_seed(4)
    if name == "linear":
        wide, x = qnn.QuantLinear(6, 3), torch.randint(-1, 2, (4, 6), generator=g)
    else:
        wide, x = qnn.QuantConv2d(3, 4, 3), torch.randint(-1, 2, (2, 3, 5, 5), generator=g)
    with torch.no_grad():
        wide.weight.copy_(small_int_weight(wide.weight.shape, g))
        wide.bias.copy_(torch.randint(-4, 5, wide.bias.shape, generator=g) * 2.0**-11)
    narrow = type(wide)(*((6, 3) if name == "linear" else (3, 4, 3)))
    narrow.load_state_dict(wide.state_dict())
    narrow.to(dtype)
    assert_exact_twins(wide, narrow, x * 2.0**-4, dtype, with_parameters=True)


def test_float16_statistics_stop_at_the_smallest_normal_scale():
    """scaling_min_val (1e-10) is 0 in float16, whose scales stop at its smallest normal number,
    2^-14 (the least scale the ops take): an all-zero batch in the statistics phase gets that
    scale there, and the float32 model still gets 1e-10 / 128."""
    zeros = torch.zeros(2, 4)
    narrow = qnn.QuantIdentity().half().train()
    out = narrow.act_quant(zeros.half())
    assert torch.equal(out.value, zeros.half())
    assert out.scale.item() == torch.finfo(torch.float16).tiny
    wide = qnn.QuantIdentity().train()
    assert wide.act_quant(zeros).scale.item() == torch.tensor(1e-10 / 128).item()


def test_float16_bias_is_quantized_in_float32_below_float16_normal_scales():
    """Int32Bias's scale, input scale x weight scale, is below float16's smallest normal number
    (2^-14, the least scale the ops take) for most 8-bit scales: the bias is quantized in
    float32, where that scale is normal, and returned in float16: round(b / s) * s in float32."""
    torch.manual_seed(0)
    layer = qnn.QuantLinear(
        6, 3, input_quant=Int8ActPerTensorFloat, bias_quant=Int32Bias, **short_warmup("input_")
    ).half()
    x = (0.1 * torch.randn(4, 6)).half()
    layer(x)  # one statistics step
    layer.eval()
    quant_x, quant_w = layer.input_quant(x), layer.weight_quant(layer.weight)
    scale = quant_x.scale * quant_w.scale  # in float16, as the layer computes it
    assert 0 < scale.item() < torch.finfo(torch.float16).tiny
    quant_b = layer.bias_quant(layer.bias, quant_x, quant_w)
    expected = torch.round(layer.bias.float() / scale.float()) * scale.float()
    assert quant_b.value.dtype == torch.float16
    assert torch.equal(quant_b.value, expected.half())
    assert layer(x).dtype == torch.float16


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float16,
        pytest.param(
            torch.bfloat16, marks=pytest.mark.skipif(JIT_ENABLED, reason="float16's path")
        ),
    ],
    ids=["f16", "bf16"],
)
def test_low_precision_lstm_trains_from_zero_states(dtype):
    """The issue's QuantLSTM(3, 4, batch_first=True).half(): its first forward quantizes the
    all-zero initial state in the statistics phase; outputs in dtype through the statistics
    phase and after it (the step-by-step reference in dtype: test_quant_rnn)."""
    model = qnn.QuantLSTM(3, 4, batch_first=True, **short_warmup(*LSTM_PREFIXES)).to(dtype)
    for (x,) in batches("lstm", 4):
        out, (h, c) = model(x.to(dtype))
        assert out.dtype == h.dtype == c.dtype == dtype
        assert torch.isfinite(out).all() and torch.isfinite(c).all()


# ---- the meta device and to_empty ----------------------------------------------------------------


def meta_built(name: str) -> nn.Module:
    with torch.device("meta"):
        model = build(name)
    assert all(t.is_meta for t in all_tensors(model))
    return model


@pytest.mark.parametrize("name", layers("mha"))
def test_built_on_meta_then_loaded_equals_the_cpu_model(name):
    """Built on meta (FSDP's way for large models), given memory with to_empty() and loaded from
    a trained CPU model's state_dict: the CPU model's outputs, then the same training steps."""
    cpu = build(name).train()
    for inputs in batches(name, 3):
        train_step(cpu, inputs)
    cpu.zero_grad()
    model = meta_built(name)
    model.to_empty(device="cpu")
    model.load_state_dict(cpu.state_dict())
    assert sharing(model) == sharing(cpu)
    sgd_cpu = torch.optim.SGD(cpu.parameters(), lr=1e-3)
    sgd_model = torch.optim.SGD(model.parameters(), lr=1e-3)
    for inputs in batches(name, 3, seed=5):
        assert torch.equal(train_step(model, inputs, sgd_model), train_step(cpu, inputs, sgd_cpu))
    cpu.eval()
    model.eval()
    inputs = batches(name, 1, seed=6)[0]
    assert torch.equal(first(model(*inputs)), first(cpu(*inputs)))


@pytest.mark.parametrize("name", layers("mha"))
def test_built_on_meta_then_reset_equals_a_new_cpu_model(name):
    """to_empty() then reset_parameters(): every quantizer tensor (state and constants) as in a
    model built on the CPU, the weights tied to the quantizers that read them as there; given
    that model's float weights, the same training."""
    cpu = build(name).train()
    model = meta_built(name)
    model.to_empty(device="cpu")
    model.reset_parameters()
    assert sharing(model) == sharing(cpu)
    with torch.no_grad():
        for key, p in model.named_parameters(remove_duplicate=False):
            if "tensor_quant" not in key:  # the layer's float weights
                p.copy_(cpu.get_parameter(key))
    expected = dict(cpu.named_parameters(remove_duplicate=False))
    expected.update(cpu.named_buffers(remove_duplicate=False))
    got = dict(model.named_parameters(remove_duplicate=False))
    got.update(model.named_buffers(remove_duplicate=False))
    assert got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key], expected[key]), key
    sgd_cpu = torch.optim.SGD(cpu.parameters(), lr=1e-3)
    sgd_model = torch.optim.SGD(model.parameters(), lr=1e-3)
    for inputs in batches(name, 4):
        assert torch.equal(train_step(model, inputs, sgd_model), train_step(cpu, inputs, sgd_cpu))


@pytest.mark.parametrize(
    "name",
    ["linear", pytest.param("lstm", marks=pytest.mark.skipif(JIT_ENABLED, reason="seconds"))],
)
def test_to_meta_moves_every_tensor_and_keeps_the_ties(name):
    """.to('meta') of a CPU model moves every parameter and buffer (none left behind on the
    CPU) and keeps each weight the same object as the quantizer's that reads it."""
    model = build(name)
    ties = sharing(model)
    model.to("meta")
    assert all(t.is_meta for t in all_tensors(model))
    assert sharing(model) == ties


# ---- torch.save of whole models -----------------------------------------------------------------


def saved_and_loaded(model: nn.Module) -> nn.Module:
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


@pytest.mark.skipif(JIT_ENABLED, reason="BREVITAS_JIT=1 refuses pickling (next test)")
@pytest.mark.parametrize("name", LAYERS)
def test_whole_model_save_and_load(name):
    """torch.save(model) / torch.load(weights_only=False) mid-training (in the statistics phase):
    the copy continues as the original does, outputs and gradients, into the learned phase."""
    model = build(name).train()
    train_step(model, batches(name, 1)[0])
    model.zero_grad()
    copy = saved_and_loaded(model)
    assert copy is not model and type(copy) is type(model)
    for inputs in batches(name, 3, seed=7):
        assert torch.equal(train_step(copy, inputs), train_step(model, inputs))
        assert_same_grads(copy, model)


@pytest.mark.skipif(not JIT_ENABLED, reason="the refusal of BREVITAS_JIT=1")
def test_whole_model_save_is_refused_with_what_to_do_under_jit():
    with pytest.raises(pickle.PicklingError, match=r"BREVITAS_JIT=1.*state_dict\(\)"):
        torch.save(qnn.QuantLinear(6, 3), io.BytesIO())


def test_quantizer_classes_pickle():
    """A class made by .let() is saved as its base and attributes; a module-level one by name."""
    made = Int8ActPerTensorFloat.let(bit_width=4)
    copy = pickle.loads(pickle.dumps(made))
    assert copy.__bases__ == (Int8ActPerTensorFloat,) and copy.bit_width == 4
    assert pickle.loads(pickle.dumps(Int8ActPerTensorFloat)) is Int8ActPerTensorFloat
