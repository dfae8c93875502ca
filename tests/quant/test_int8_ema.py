"""Seed 003's quantizers (brevitas_cpp.quant.int8_ema) in quant layers, against the seed's
formulas written out here and hand-built float models:

    QL = 2^(bits-1) - 1
    weights:     t = max|w|                   (per tensor, or per output channel)
    activations: t = max|x| of the first training batch, then t * (1 - d) + max|x| * d (float32)
    power2:      t = 2^ceil(log2 t)
    scale = t / QL,   y = clamp(round_half_even(x / scale), -QL, QL) * scale

Also: the delay, the gradient modes, ReLU, what the proxies report, Int32Bias on their scales,
state_dict round trips and errors, BREVITAS_JIT, torch.jit.script and torch.compile against
eager mode, construction errors, and the automatic-quantization config."""

import os
import subprocess
import sys
import textwrap
from typing import Callable, Dict, List, Optional, Tuple

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import brevitas_cpp
from brevitas_cpp import config
from brevitas_cpp.core.quant import QuantizationInt8
from brevitas_cpp.graph import Quantizer, quantize_model
from brevitas_cpp.graph.config import load_config, resolve_quantizers
from brevitas_cpp.nn import (
    QuantCat,
    QuantConv1d,
    QuantConv2d,
    QuantConv3d,
    QuantConvTranspose1d,
    QuantConvTranspose2d,
    QuantConvTranspose3d,
    QuantEltwiseAdd,
    QuantEmbedding,
    QuantHardTanh,
    QuantIdentity,
    QuantLinear,
    QuantReLU,
    QuantScaleBias,
    QuantSigmoid,
    QuantTanh,
)
from brevitas_cpp.quant import (
    Int8ActPerTensorEma,
    Int8ActPerTensorEmaPower2,
    Int8WeightPerChannelMaxAbs,
    Int8WeightPerChannelMaxAbsPower2,
    Int8WeightPerTensorMaxAbs,
    Int32Bias,
)
from brevitas_cpp.quant_tensor import IntQuantTensor

# ---- the seed's formulas ---------------------------------------------------------------------


def quant_level(bits: int) -> float:
    return float(2 ** (bits - 1) - 1)


def power2_up(t: Tensor) -> Tensor:
    """2^ceil(log2 t), 0 kept (in float64, where log2 of a float32 is never rounded to an
    integer it is not)."""
    t64 = t.double()
    return torch.where(t64 > 0, torch.exp2(torch.ceil(torch.log2(t64))), t64).float()


def ref_quant(x: Tensor, t: Tensor, bits: int = 8, power2: bool = False) -> Tuple[Tensor, Tensor]:
    """(y, scale) for threshold t (float32, shaped to broadcast to x)."""
    if power2:
        t = power2_up(t)
    ql = quant_level(bits)
    scale = (t / ql).to(x.dtype)
    y = torch.clamp(torch.round(x / scale), -ql, ql) * scale
    # A zero threshold (an all-zero channel) gives 0, not 0 / 0.
    return torch.where(scale == 0, torch.zeros_like(y), y), scale


def max_abs(w: Tensor, axis: Optional[int] = None) -> Tensor:
    """max|w| as float32: over everything (shape []), or per channel along axis, shaped to
    broadcast to w."""
    w = w.detach().abs()
    if axis is None:
        return w.max().float()
    dims = [d for d in range(w.dim()) if d != axis]
    # amax over no dims would reduce over all of them: a 1-d weight is its own per-channel max.
    return (w.amax(dim=dims, keepdim=True) if dims else w).float()


def ema(history: Tensor, current: Tensor, decay: float) -> Tensor:
    return history * (1 - decay) + current * decay


def ref_weight(layer: nn.Module, axis: Optional[int], power2: bool = False) -> Tensor:
    return ref_quant(layer.weight.detach(), max_abs(layer.weight, axis), power2=power2)[0]


def act_block(layer: nn.Module, proxy: str = "act_quant") -> QuantizationInt8:
    return getattr(layer, proxy).fused_activation_quant_proxy.tensor_quant


def seeded(seed: int, *shape: int, scale: float = 1.0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


# ---- weights in every weight layer -------------------------------------------------------------

# name -> (layer factory, input, float op of (x, weight, bias), channel axis of the weight)
WeightCase = Tuple[Callable[..., nn.Module], Callable[[], Tensor], Callable, int]
WEIGHT_LAYERS: Dict[str, WeightCase] = {
    "linear": (lambda **kw: QuantLinear(6, 5, **kw), lambda: seeded(1, 4, 6), F.linear, 0),
    "conv1d": (
        lambda **kw: QuantConv1d(3, 4, 3, padding=1, **kw),
        lambda: seeded(1, 2, 3, 7),
        lambda x, w, b: F.conv1d(x, w, b, padding=1),
        0,
    ),
    "conv2d": (
        lambda **kw: QuantConv2d(3, 4, 3, stride=2, **kw),
        lambda: seeded(1, 2, 3, 7, 7),
        lambda x, w, b: F.conv2d(x, w, b, stride=2),
        0,
    ),
    "conv3d": (
        lambda **kw: QuantConv3d(2, 3, 2, **kw),
        lambda: seeded(1, 1, 2, 4, 4, 4),
        F.conv3d,
        0,
    ),
    "convtranspose1d": (
        lambda **kw: QuantConvTranspose1d(3, 4, 3, stride=2, **kw),
        lambda: seeded(1, 2, 3, 5),
        lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2),
        1,
    ),
    "convtranspose2d-groups": (
        lambda **kw: QuantConvTranspose2d(4, 6, 3, groups=2, **kw),
        lambda: seeded(1, 2, 4, 5, 5),
        lambda x, w, b: F.conv_transpose2d(x, w, b, groups=2),
        1,
    ),
    "convtranspose3d": (
        lambda **kw: QuantConvTranspose3d(2, 3, 2, **kw),
        lambda: seeded(1, 1, 2, 3, 3, 3),
        F.conv_transpose3d,
        1,
    ),
    "scale-bias": (
        lambda **kw: QuantScaleBias(3, True, **kw),
        lambda: seeded(1, 2, 3, 4, 4),
        lambda x, w, b: x * w.view(1, -1, 1, 1) + b.view(1, -1, 1, 1),
        0,
    ),
}

WEIGHT_QUANTS = [
    (Int8WeightPerTensorMaxAbs, False, False),
    (Int8WeightPerChannelMaxAbs, True, False),
    (Int8WeightPerChannelMaxAbsPower2, True, True),
]


@pytest.mark.parametrize("quant, per_channel, power2", WEIGHT_QUANTS, ids=lambda q: str(q))
@pytest.mark.parametrize("name", list(WEIGHT_LAYERS))
def test_weight_layers_equal_the_float_op_on_the_formula(name, quant, per_channel, power2):
    make, inputs, op, axis = WEIGHT_LAYERS[name]
    torch.manual_seed(0)
    layer = make(weight_quant=quant)
    with torch.no_grad():
        layer.bias.uniform_(-0.5, 0.5)  # ScaleBias starts at 0
        if name == "scale-bias":
            layer.weight.uniform_(-2.0, 2.0)  # and at 1
        if per_channel and name == "linear":
            layer.weight[2] = 0.0  # an all-zero channel: threshold 0, weights 0
    x = inputs()
    wq = ref_weight(layer, axis if per_channel else None, power2)
    for mode in ("train", "eval"):
        getattr(layer, mode)()
        assert torch.equal(layer(x), op(x, wq, layer.bias)), mode
    block = layer.weight_quant.tensor_quant
    assert isinstance(block, QuantizationInt8) and block.is_weight
    expected_t = max_abs(layer.weight, axis if per_channel else None).flatten()
    assert torch.equal(
        block.threshold.flatten(), expected_t.reshape(block.threshold.shape).flatten()
    )
    assert block.iteration.item() == 1  # the training call only


def test_embedding_weights_per_row():
    torch.manual_seed(0)
    layer = QuantEmbedding(10, 4, weight_quant=Int8WeightPerChannelMaxAbs)
    idx = torch.tensor([[1, 3, 9], [0, 3, 3]])
    assert torch.equal(layer(idx), F.embedding(idx, ref_weight(layer, 0)))


def test_weight_metadata_and_proxy_reports():
    torch.manual_seed(0)
    layer = QuantConv2d(3, 4, 3, weight_quant=Int8WeightPerChannelMaxAbs, weight_bit_width=6)
    proxy = layer.weight_quant
    assert proxy.is_quant_enabled and proxy.is_signed and proxy.is_narrow_range
    assert proxy.rounding_mode == "ROUND"
    qw = layer.quant_weight()
    assert isinstance(qw, IntQuantTensor) and qw.signed
    t = max_abs(layer.weight, 0)
    value, scale = ref_quant(layer.weight.detach(), t, bits=6)
    assert torch.equal(qw.value, value) and torch.equal(qw.scale, scale)
    assert qw.scale.shape == (4, 1, 1, 1)
    assert torch.equal(qw.zero_point, torch.tensor(0.0))
    assert torch.equal(qw.bit_width, torch.tensor(6.0))
    ints = qw.int()
    assert int(ints.abs().max()) == 31 and torch.equal(ints.float(), torch.round(value / scale))
    assert torch.equal(proxy.scale(), scale) and torch.equal(proxy.bit_width(), torch.tensor(6.0))
    assert torch.equal(proxy.zero_point(), torch.tensor(0.0))


# ---- activations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "quant, power2", [(Int8ActPerTensorEma, False), (Int8ActPerTensorEmaPower2, True)]
)
def test_activation_threshold_is_the_ema_of_max_abs(quant, power2):
    decay = 0.25
    layer = QuantIdentity(act_quant=quant, ema_decay=decay)
    block = act_block(layer)
    t: Optional[Tensor] = None
    for step in range(4):
        x = seeded(step, 3, 5, scale=1.0 + step)
        t = max_abs(x) if t is None else ema(t, max_abs(x), decay)
        y = layer(x)
        assert torch.equal(y, ref_quant(x, t, power2=power2)[0]), step
        assert torch.equal(block.threshold, t) and block.iteration.item() == step + 1
    # Eval: the stored threshold, no update.
    layer.eval()
    x = seeded(9, 3, 5, scale=10.0)
    assert torch.equal(layer(x), ref_quant(x, t, power2=power2)[0])
    assert torch.equal(block.threshold, t) and block.iteration.item() == 4


def test_activation_proxy_reports_and_quant_tensors():
    layer = QuantIdentity(act_quant=Int8ActPerTensorEma, bit_width=4, return_quant_tensor=True)
    proxy = layer.act_quant
    assert proxy.is_quant_enabled and proxy.is_signed and proxy.is_narrow_range
    # No data yet: threshold 0, so scale 0 (the op leaves x unquantized in eval).
    assert torch.equal(proxy.scale(), torch.tensor(0.0))
    x = seeded(0, 4, 6)
    qt = layer(x)
    value, scale = ref_quant(x, max_abs(x), bits=4)
    assert isinstance(qt, IntQuantTensor) and qt.signed and qt.training
    assert torch.equal(qt.value, value) and torch.equal(qt.scale, scale)
    assert torch.equal(qt.zero_point, torch.tensor(0.0))
    assert torch.equal(qt.bit_width, torch.tensor(4.0))
    assert int(qt.int().abs().max()) == 7
    # Reading the scale runs the quantizer in eval: the statistics do not move.
    assert torch.equal(proxy.scale(), scale) and act_block(layer).iteration.item() == 1
    assert torch.equal(proxy.bit_width(), torch.tensor(4.0))
    assert torch.equal(proxy.zero_point(), torch.tensor(0.0))


def test_relu_wastes_the_negative_half_of_the_signed_range():
    """Decision: as Brevitas's signed quantizers on a ReLU's output, accepted; the integers are
    in [0, QL] and the QuantTensor is reported signed."""
    layer = QuantReLU(act_quant=Int8ActPerTensorEma, return_quant_tensor=True)
    x = seeded(0, 5, 7)
    qt = layer(x)
    expected, scale = ref_quant(torch.relu(x), max_abs(torch.relu(x)))
    assert torch.equal(qt.value, expected) and torch.equal(qt.scale, scale) and qt.signed
    ints = qt.int()
    assert int(ints.min()) == 0 and int(ints.max()) == 127


@pytest.mark.parametrize(
    "make, act",
    [
        (lambda **kw: QuantSigmoid(**kw), torch.sigmoid),
        (lambda **kw: QuantTanh(**kw), torch.tanh),
    ],
    ids=["sigmoid", "tanh"],
)
def test_activation_function_then_quantizer(make, act):
    layer = make(act_quant=Int8ActPerTensorEma)
    x = seeded(0, 5, 7, scale=3.0)
    assert torch.equal(layer(x), ref_quant(act(x), max_abs(act(x)))[0])


def test_input_and_output_quantizers_of_a_conv_with_int32_bias():
    """input_quant and weight quantizers of seed 003 as the scale providers of Int32Bias: the
    bias is quantized at input scale x weight scale (32 bits: round(b / s) * s)."""
    torch.manual_seed(0)
    conv = QuantConv2d(
        3,
        4,
        3,
        weight_quant=Int8WeightPerChannelMaxAbs,
        input_quant=Int8ActPerTensorEma,
        output_quant=Int8ActPerTensorEma,
        bias_quant=Int32Bias,
        return_quant_tensor=True,
    )
    x = seeded(0, 2, 3, 6, 6)
    qx, in_scale = ref_quant(x, max_abs(x))
    qw, w_scale = ref_quant(conv.weight.detach(), max_abs(conv.weight, 0))
    acc_scale = (in_scale * w_scale).view(-1)
    qb = torch.round(conv.bias.detach() / acc_scale) * acc_scale
    acc = F.conv2d(qx, qw, qb)
    expected, out_scale = ref_quant(acc, max_abs(acc))
    out = conv(x)
    assert isinstance(out, IntQuantTensor)
    assert torch.equal(out.value, expected) and torch.equal(out.scale, out_scale)
    # Eval: the stored thresholds, the same layer and bias scale.
    conv.eval()
    assert torch.equal(conv(x).value, expected)


def test_eltwise_add_and_cat_share_one_input_quantizer():
    add = QuantEltwiseAdd(input_quant=Int8ActPerTensorEma, output_quant=Int8ActPerTensorEma)
    a, b = seeded(0, 3, 4), seeded(1, 3, 4, scale=2.0)
    # Training: the shared input quantizer sees a, then b (one EMA step).
    t_a = max_abs(a)
    t_b = ema(t_a, max_abs(b), 0.01)
    total = ref_quant(a, t_a)[0] + ref_quant(b, t_b)[0]
    assert torch.equal(add(a, b), ref_quant(total, max_abs(total))[0])
    add.eval()
    assert torch.equal(
        add(a, b), ref_quant(ref_quant(a, t_b)[0] + ref_quant(b, t_b)[0], max_abs(total))[0]
    )
    cat = QuantCat(input_quant=Int8ActPerTensorEma, output_quant=None).eval()
    cat.train()
    cat([a, b], dim=0)
    cat.eval()
    assert torch.equal(cat([a, b], dim=0), torch.cat([ref_quant(a, t_b)[0], ref_quant(b, t_b)[0]]))


def test_hardtanh_runs_with_the_quantizer_as_its_clamp():
    """As in Brevitas, a quantized QuantHardTanh leaves the clamp to its quantizer: here at the
    tracked threshold (symmetric), not at min_val/max_val."""
    layer = QuantHardTanh(act_quant=Int8ActPerTensorEma, min_val=-1.0, max_val=1.0)
    x = seeded(0, 4, 5, scale=3.0)
    assert torch.equal(layer(x), ref_quant(x, max_abs(x))[0])


# ---- delay and gradients -----------------------------------------------------------------------


def test_delay_quant_through_layers():
    layer = QuantIdentity(act_quant=Int8ActPerTensorEma, delay_quant=2, ema_decay=0.5)
    block = act_block(layer)
    xs = [seeded(i, 3, 4, scale=1.0 + i) for i in range(3)]
    t = max_abs(xs[0])
    assert torch.equal(layer(xs[0]), xs[0])  # delayed, but the statistics move
    assert torch.equal(block.threshold, t)
    t = ema(t, max_abs(xs[1]), 0.5)
    assert torch.equal(layer(xs[1]), xs[1])
    t = ema(t, max_abs(xs[2]), 0.5)
    assert torch.equal(layer(xs[2]), ref_quant(xs[2], t)[0])
    assert block.iteration.item() == 3
    # Weights: one delayed training call, then quantized.
    torch.manual_seed(0)
    linear = QuantLinear(4, 3, weight_quant=Int8WeightPerTensorMaxAbs, weight_delay_quant=1)
    x = seeded(5, 2, 4)
    assert torch.equal(linear(x), F.linear(x, linear.weight, linear.bias))
    assert torch.equal(linear(x), F.linear(x, ref_weight(linear, None), linear.bias))


def test_eval_calls_do_not_advance_the_delay():
    layer = QuantIdentity(act_quant=Int8ActPerTensorEma, delay_quant=1)
    x = seeded(0, 3, 4)
    layer(x)  # the delayed training call
    layer.eval()
    for _ in range(3):
        assert torch.equal(layer(x), ref_quant(x, max_abs(x))[0])
    assert act_block(layer).iteration.item() == 1


@pytest.mark.parametrize("grad_mode", ["ste", "clip"])
def test_activation_gradient_modes(grad_mode):
    layer = QuantIdentity(act_quant=Int8ActPerTensorEma, grad_mode=grad_mode, ema_decay=0.5)
    layer(seeded(0, 4, 4))  # t = max|x0|
    x = seeded(1, 4, 4, scale=4.0).requires_grad_()
    t = ema(max_abs(seeded(0, 4, 4)), max_abs(x), 0.5)
    layer(x).backward(torch.ones(4, 4))
    inside = (x.detach().abs() <= t).float()
    assert 0 < inside.sum() < 16  # both cases occur
    expected = inside if grad_mode == "clip" else torch.ones(4, 4)
    assert torch.equal(x.grad, expected)


def test_weight_gradient_clip_mode_passes_every_weight():
    """Weights never exceed their own max-abs threshold: clip equals ste for them."""
    grads = []
    for mode in ("ste", "clip"):
        torch.manual_seed(0)
        layer = QuantLinear(5, 3, weight_quant=Int8WeightPerChannelMaxAbs, weight_grad_mode=mode)
        layer(seeded(0, 2, 5)).square().sum().backward()
        grads.append(layer.weight.grad)
    assert torch.equal(grads[0], grads[1])


# ---- state -------------------------------------------------------------------------------------


class Net(nn.Module):
    """A small CNN with every seed-003 quantizer, and a quantized bias."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = QuantIdentity(act_quant=Int8ActPerTensorEma, return_quant_tensor=False)
        self.conv = QuantConv2d(
            2,
            4,
            3,
            weight_quant=Int8WeightPerChannelMaxAbs,
            weight_grad_mode="clip",
            input_quant=Int8ActPerTensorEmaPower2,
            input_delay_quant=1,
            bias_quant=Int32Bias,
        )
        self.relu = QuantReLU(act_quant=Int8ActPerTensorEma, ema_decay=0.1)
        self.fc = QuantLinear(4 * 4 * 4, 3, weight_quant=Int8WeightPerChannelMaxAbsPower2)
        self.out = QuantIdentity(act_quant=Int8ActPerTensorEma, grad_mode="clip", delay_quant=2)

    def forward(self, x: Tensor) -> Tensor:
        y = self.relu(self.conv(self.inp(x)))
        return self.out(self.fc(torch.flatten(y, 1)))


def make_net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def batch(step: int) -> Tensor:
    return seeded(100 + step, 3, 2, 6, 6, scale=1.0 + 0.5 * step)


def buffers(model: nn.Module) -> Dict[str, Tensor]:
    return {
        k: v.detach().clone()
        for k, v in model.state_dict().items()
        if k.endswith(("threshold", "iteration"))
    }


def train(model: nn.Module, steps: range, lr: float = 0.1) -> List[Tensor]:
    """Outputs and parameter gradients of SGD steps on batch(step), then one eval output."""
    params = [p for p in model.parameters()]
    optimizer = torch.optim.SGD(params, lr=lr)
    record = []
    model.train()
    for step in steps:
        optimizer.zero_grad()
        y = model(batch(step))
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        optimizer.step()
        record += [y.detach()] + [p.grad.clone() for p in params]
    model.eval()
    with torch.no_grad():
        record.append(model(batch(99)))
    model.train()
    return record


def assert_records_equal(a: List[Tensor], b: List[Tensor]) -> None:
    assert len(a) == len(b)
    for i, (u, v) in enumerate(zip(a, b)):
        assert torch.equal(u, v), i


def assert_buffers_equal(a: Dict[str, Tensor], b: Dict[str, Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key


def test_state_dict_holds_the_buffers():
    net = make_net()
    state = net.state_dict()
    assert state["conv.weight_quant.tensor_quant.threshold"].shape == (4,)
    assert state["conv.input_quant.fused_activation_quant_proxy.tensor_quant.threshold"].shape == ()
    assert (
        state["inp.act_quant.fused_activation_quant_proxy.tensor_quant.iteration"].dtype
        == torch.int64
    )
    assert len(buffers(net)) == 12  # 6 quantizers


def test_state_dict_round_trip_through_the_whole_model():
    net = make_net()
    train(net, range(3))
    saved = {k: v.clone() for k, v in net.state_dict().items()}
    resumed = make_net(seed=1)
    resumed.load_state_dict(saved)
    assert_buffers_equal(buffers(resumed), buffers(net))
    assert_records_equal(train(resumed, range(3, 6)), train(net, range(3, 6)))
    assert_buffers_equal(buffers(resumed), buffers(net))


def test_state_dict_round_trip_through_a_layer():
    layer = QuantIdentity(act_quant=Int8ActPerTensorEma, delay_quant=3)
    for i in range(2):
        layer(seeded(i, 4, 4))
    fresh = QuantIdentity(act_quant=Int8ActPerTensorEma, delay_quant=3)
    fresh.load_state_dict(layer.state_dict())
    # The counter came with the checkpoint: one more delayed call, then quantized.
    outputs = []
    for i in range(2, 4):
        x = seeded(i, 4, 4)
        y = fresh(x)
        assert torch.equal(y, layer(x))
        outputs.append(y)
    assert torch.equal(outputs[0], seeded(2, 4, 4)) and not torch.equal(outputs[1], x)
    assert_buffers_equal(buffers(fresh), buffers(layer))


def test_checkpoint_of_another_granularity_is_a_clear_error():
    torch.manual_seed(0)
    per_tensor = QuantConv2d(3, 8, 3, weight_quant=Int8WeightPerTensorMaxAbs)
    per_channel = QuantConv2d(3, 8, 3, weight_quant=Int8WeightPerChannelMaxAbs)
    with pytest.raises(RuntimeError) as error:
        per_channel.load_state_dict(per_tensor.state_dict())
    message = str(error.value)
    assert (
        "QuantizationInt8: weight_quant.tensor_quant.threshold has shape [] in the checkpoint"
        in message
    )
    assert "one per channel along axis 0, shape [8]" in message
    assert "size mismatch" not in message  # reported once, in those words


def test_missing_or_bad_buffers_are_clear_errors():
    layer = QuantIdentity(act_quant=Int8ActPerTensorEma)
    state = layer.state_dict()
    key = "act_quant.fused_activation_quant_proxy.tensor_quant."
    with pytest.raises(RuntimeError, match=f'Missing key\\(s\\) in state_dict: "{key}iteration"'):
        layer.load_state_dict({k: v for k, v in state.items() if not k.endswith("iteration")})
    with pytest.raises(RuntimeError, match="iteration must be >= 0"):
        layer.load_state_dict({**state, key + "iteration": torch.tensor(-1)})
    with pytest.raises(RuntimeError, match="iteration must be one integer"):
        layer.load_state_dict({**state, key + "iteration": torch.tensor(1.5)})
    with pytest.raises(RuntimeError, match="threshold must hold finite values >= 0"):
        layer.load_state_dict({**state, key + "threshold": torch.tensor(float("nan"))})
    # A per-tensor threshold saved with shape [1] loads.
    layer.load_state_dict({**state, key + "threshold": torch.tensor([2.5])})
    assert torch.equal(act_block(layer).threshold, torch.tensor(2.5))


def test_a_float_checkpoint_loads_strictly_and_starts_the_statistics_afresh():
    """A float model's state_dict has neither buffer. It loads strictly, and, as every quantizer
    of the library is rebuilt when its layer loads a checkpoint (Brevitas's
    REINIT_ON_STATE_DICT_LOAD), the statistics start again from the next training batch."""
    torch.manual_seed(0)
    float_conv = torch.nn.Conv2d(3, 8, 3)
    conv = QuantConv2d(3, 8, 3, weight_quant=Int8WeightPerChannelMaxAbs)
    conv.load_state_dict(float_conv.state_dict())  # strict: no error
    assert torch.equal(conv.weight, float_conv.weight)
    assert int(conv.weight_quant.tensor_quant.iteration) == 0

    act = QuantIdentity(act_quant=Int8ActPerTensorEma)
    act.train()
    act(seeded(1, 2, 3))
    act.load_state_dict({})  # nn.Identity's state_dict: strict, no error
    block = act_block(act)
    assert int(block.iteration) == 0 and float(block.threshold) == 0.0
    x = seeded(2, 2, 3)
    act(x)  # the first batch initialises the threshold again
    assert torch.equal(block.threshold, max_abs(x))


def test_buffers_stay_float32_and_int64_in_a_double_model():
    net = make_net().double()
    for name, value in buffers(net).items():
        assert value.dtype == (torch.float32 if name.endswith("threshold") else torch.int64), name
    net(batch(0).double()).sum().backward()
    layer = QuantIdentity(act_quant=Int8ActPerTensorEma).double()
    x = seeded(0, 3, 4).double()
    assert torch.equal(layer(x), ref_quant(x, max_abs(x))[0])


# ---- TorchScript, BREVITAS_JIT and torch.compile against eager mode -----------------------------


def test_scripted_model_equals_eager_and_keeps_updating_its_buffers():
    eager, twin = make_net(), make_net()
    scripted = torch.jit.script(twin)
    assert_records_equal(train(scripted, range(4)), train(eager, range(4)))
    # The scripted copy shares the buffers with twin, and they moved as eager's did.
    assert_buffers_equal(buffers(twin), buffers(eager))
    assert_buffers_equal(
        {k: v for k, v in scripted.state_dict().items() if k in buffers(eager)}, buffers(eager)
    )
    assert act_block(eager.out).iteration.item() == 4


def test_compiled_model_equals_eager():
    eager, twin = make_net(), make_net()
    compiled = torch.compile(twin, backend="aot_eager", fullgraph=not config.JIT_ENABLED)
    assert_records_equal(train(compiled, range(4)), train(eager, range(4)))
    assert_buffers_equal(buffers(twin), buffers(eager))


_JIT_RUN = textwrap.dedent("""
    import sys, torch
    sys.path[:0] = [sys.argv[4], sys.argv[2]]  # the parent's brevitas_cpp, this file
    from brevitas_cpp import config
    assert config.JIT_ENABLED == (sys.argv[3] == "1")
    import test_int8_ema as t
    net = t.make_net()
    torch.save({"record": t.train(net, range(4)), "buffers": t.buffers(net)}, sys.argv[1])
""")


def test_brevitas_jit_equals_eager_mode(tmp_path):
    """The same training in fresh interpreters with BREVITAS_JIT=0 and =1 (read at import)."""
    results = {}
    for jit in ("0", "1"):
        out = tmp_path / f"jit{jit}.pt"
        env = {**os.environ, "BREVITAS_JIT": jit}
        here = os.path.dirname(__file__)
        package_root = os.path.dirname(os.path.dirname(brevitas_cpp.__file__))
        subprocess.run(
            [sys.executable, "-P", "-c", _JIT_RUN, str(out), here, jit, package_root],
            env=env,
            check=True,
            timeout=300,
        )
        results[jit] = torch.load(out, weights_only=True)
    assert_records_equal(results["0"]["record"], results["1"]["record"])
    assert_buffers_equal(results["0"]["buffers"], results["1"]["buffers"])


def test_blocks_follow_the_jit_switch():
    block = Int8ActPerTensorEma.tensor_quant
    assert isinstance(block, torch.jit.ScriptModule) == config.JIT_ENABLED


# ---- construction errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "keywords, message",
    [
        (dict(ema_decay=1.5), r"ema_decay must be in the open interval \(0, 1\).*got 1.5"),
        (dict(ema_decay=0.0), r"ema_decay must be in the open interval \(0, 1\).*got 0.0"),
        (dict(grad_mode="foo"), r"grad_mode must be one of 'ste', 'clip', got 'foo'"),
        (dict(quant_mode="log"), r"quant_mode must be one of 'minmax', 'power2', got 'log'"),
        (dict(delay_quant=-1), r"delay_quant must be >= 0 .*got -1"),
        (dict(delay_quant=2.5), r"delay_quant must be an int .*got 2.5"),
        (dict(bit_width=1), r"bit_width must be in \[2, 24\] .*got 1"),
        (dict(bit_width=25), r"bit_width must be in \[2, 24\] .*got 25"),
    ],
)
def test_bad_keywords_fail_at_construction_naming_them(keywords, message):
    with pytest.raises((ValueError, TypeError), match="Int8ActPerTensorEma: " + message):
        QuantIdentity(act_quant=Int8ActPerTensorEma, **keywords)
    prefixed = {"weight_" + k: v for k, v in keywords.items()}
    with pytest.raises((ValueError, TypeError), match="Int8WeightPerChannelMaxAbs: " + message):
        QuantConv2d(2, 3, 3, weight_quant=Int8WeightPerChannelMaxAbs, **prefixed)
    with pytest.raises((ValueError, TypeError), match="QuantizationInt8: " + message):
        QuantizationInt8(**keywords)


def test_other_construction_errors():
    with pytest.raises(
        ValueError, match="scaling_per_output_type=CHANNEL is not offered for activations"
    ):
        QuantIdentity(act_quant=Int8ActPerTensorEma, scaling_per_output_type="channel")
    with pytest.raises(TypeError, match="Did you mean ema_decay"):
        QuantIdentity(act_quant=Int8ActPerTensorEma, ema_decy=0.1)
    with pytest.raises(ValueError, match="QuantizationInt8: channels must be >= 1"):
        QuantizationInt8(is_weight=True, channel_axis=0, channels=0)
    with pytest.raises(ValueError, match="channels=4 is given but channel_axis is None"):
        QuantizationInt8(channels=4)
    with pytest.raises(TypeError, match="QuantizationInt8: is_weight must be a bool"):
        QuantizationInt8(is_weight=1)


def test_block_directly():
    block = QuantizationInt8(bit_width=4, is_weight=True, channel_axis=1, channels=3)
    w = seeded(0, 2, 3, 5)
    y, scale, zero_point, bit_width = block(w)
    expected, expected_scale = ref_quant(w, max_abs(w, 1), bits=4)
    assert torch.equal(y, expected) and torch.equal(scale, expected_scale)
    assert scale.shape == (1, 3, 1)
    assert torch.equal(zero_point, torch.tensor(0.0)) and torch.equal(bit_width, torch.tensor(4.0))


# ---- automatic quantization --------------------------------------------------------------------


def test_names_resolve_in_configs():
    names = {
        "weight_quant": "Int8WeightPerChannelMaxAbs",
        "input_quant": "Int8ActPerTensorEmaPower2",
        "act_quant": "Int8ActPerTensorEma",
        "output_quant": "Int8ActPerTensorEma",
    }
    resolved = resolve_quantizers(names, "test")
    assert resolved["weight_quant"] is Int8WeightPerChannelMaxAbs
    assert resolved["input_quant"] is Int8ActPerTensorEmaPower2
    for name in ("Int8WeightPerTensorMaxAbs", "Int8WeightPerChannelMaxAbsPower2"):
        assert (
            load_config({"weight_kwargs": {"weight_quant": name}})["weight_kwargs"][
                "weight_quant"
            ].__name__
            == name
        )


def _float_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))


def test_quantizer_from_a_config_dict_passes_the_keywords():
    config_dict = {
        "bits_weights": 6,
        "weight_kwargs": {"weight_quant": "Int8WeightPerChannelMaxAbs", "weight_grad_mode": "clip"},
        "act_kwargs": {"act_quant": "Int8ActPerTensorEma", "ema_decay": 0.05, "delay_quant": 2},
        "overrides": {"3": {"weight_quant": "Int8WeightPerTensorMaxAbs", "weight_delay_quant": 4}},
    }
    model = Quantizer.from_config(_float_net(), config_dict).prepare_model()
    conv_block = model[0].weight_quant.tensor_quant
    assert isinstance(conv_block, QuantizationInt8) and conv_block.channel_axis == 0
    assert conv_block.grad_mode == "clip" and conv_block.nbits == 6
    relu_block = act_block(model[1])
    assert (relu_block.ema_decay, relu_block.delay_quant, relu_block.nbits) == (0.05, 2, 8)
    fc_block = model[3].weight_quant.tensor_quant
    assert fc_block.channel_axis is None and fc_block.delay_quant == 4
    model(batch(0)).sum().backward()


def test_quantize_model_with_an_inserted_ema_quantizer():
    model, controller = quantize_model(
        _float_net(),
        {
            "weight_kwargs": {"weight_quant": "Int8WeightPerTensorMaxAbs"},
            "act_kwargs": {"act_quant": "Int8ActPerTensorEma"},
            "insertions": [
                {
                    "scope": "Sequential/Flatten[2]/flatten_0",
                    "where": "output",
                    "act_quant": "Int8ActPerTensorEma",
                    "ema_decay": 0.2,
                }
            ],
        },
        torch.zeros(1, 2, 6, 6),
    )
    x = batch(0)
    y = model(x)
    inserted = [
        m for m in model.modules() if isinstance(m, QuantizationInt8) and m.ema_decay == 0.2
    ]
    assert len(inserted) == 1 and inserted[0].iteration.item() == 1
    # The float model by hand: conv, relu, the three EMA quantizers, linear.
    float_net = _float_net()
    conv_w = ref_quant(float_net[0].weight.detach(), max_abs(float_net[0].weight))[0]
    h = torch.relu(F.conv2d(x, conv_w, float_net[0].bias))
    h = ref_quant(h, max_abs(h))[0].flatten(1)
    h = ref_quant(h, max_abs(h))[0]
    fc_w = ref_quant(float_net[3].weight.detach(), max_abs(float_net[3].weight))[0]
    assert torch.equal(y, F.linear(h, fc_w, float_net[3].bias))
    stats = controller.statistics()
    assert all(entry["bit_width"] == [8.0] for entry in stats["quantizers"])


def test_calibration_mode_tracks_the_thresholds():
    """graph.calibration_mode runs the activation quantizers in training mode (without
    gradients): the EMA thresholds start and move on the calibration batches, then eval uses
    them."""
    from brevitas_cpp.graph import calibration_mode

    layer = QuantIdentity(act_quant=Int8ActPerTensorEma, ema_decay=0.5).eval()
    xs = [seeded(i, 3, 4, scale=1.0 + i) for i in range(2)]
    with calibration_mode(layer):
        for x in xs:
            assert torch.equal(layer(x), x)  # calibration computes in float
    t = ema(max_abs(xs[0]), max_abs(xs[1]), 0.5)
    assert torch.equal(act_block(layer).threshold, t) and not layer.training
    assert torch.equal(layer(xs[0]), ref_quant(xs[0], t)[0])
