"""Every quant layer and quantizer family on a GPU against the same module on the CPU (skipped
without one).

The CPU module is the reference: the CPU suites check it against Brevitas and hand-built
compositions. Each case runs in float64 through statistics steps, an SGD step on the learned
scales and weights, and an eval forward; float64 keeps cuDNN's, cuBLAS's and the CPU's
accumulation orders far below a quantization step, so outputs, input gradients, parameter
gradients and the state after the step must agree to 1e-9 relative."""

from typing import Callable, List, Tuple

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import brevitas_cpp
import brevitas_cpp.nn as qnn
from brevitas_cpp import quant as Q
from brevitas_cpp.quant.experimental import float as FQ
from brevitas_cpp.quant.experimental import mx_quant_ocp as MX

HAS_CUDA = torch.cuda.is_available() and brevitas_cpp.build_info()["cuda"]

Case = Tuple[Callable[[], nn.Module], Callable[[torch.Generator], List[torch.Tensor]]]


def rand(*shape):
    return lambda g: [torch.randn(*shape, generator=g, dtype=torch.float64)]


class QuantIn(nn.Module):
    """A quantized input (QuantTensor) into a layer that requires one."""

    def __init__(self, layer: nn.Module, **kw):
        super().__init__()
        self.inp = qnn.QuantIdentity(return_quant_tensor=True, collect_stats_steps=2, **kw)
        self.layer = layer

    def forward(self, x):
        return self.layer(self.inp(x))


class TwoInputs(nn.Module):
    def __init__(self, layer: nn.Module):
        super().__init__()
        self.a = qnn.QuantIdentity(return_quant_tensor=True, collect_stats_steps=2)
        self.b = qnn.QuantIdentity(return_quant_tensor=True, collect_stats_steps=2)
        self.layer = layer

    def forward(self, x, y):
        if isinstance(self.layer, qnn.QuantCat):
            return self.layer([self.a(x), self.b(y)], dim=1)
        return self.layer(self.a(x), self.b(y))


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = qnn.QuantEmbedding(12, 6, weight_bit_width=4)

    def forward(self, x):
        idx = (x.abs() * 4).long().clamp(max=11)
        return self.emb(idx)


class Attention(nn.Module):
    def __init__(self, packed_in_proj: bool):
        super().__init__()
        self.mha = qnn.QuantMultiheadAttention(8, 2, packed_in_proj=packed_in_proj)

    def forward(self, q, kv=None):
        kv = q if kv is None else kv  # self-attention: one tensor, as the packed in_proj needs
        return self.mha(q, kv, kv, need_weights=False)[0]


def graph_quantized() -> nn.Module:
    from brevitas_cpp.graph import Quantizer

    model = nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Conv2d(6, 6, 3, groups=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(6, 4),
    )
    return Quantizer(model, bits_weights=4, bits_activations=6).prepare_model()


def sdpa() -> nn.Module:
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.sdpa = qnn.QuantScaledDotProductAttention()

        def forward(self, q, k):
            return self.sdpa(q, k, k)

    return M()


CASES = {
    "conv1d_per_channel_input_quant": (
        lambda: qnn.QuantConv1d(
            3, 4, 3, weight_quant=Q.Int8WeightPerChannelFloat, input_quant=Q.Int8ActPerTensorFloat
        ),
        rand(2, 3, 9),
    ),
    "conv2d_int32_bias_fixed_point": (
        lambda: QuantIn(
            qnn.QuantConv2d(
                4,
                5,
                3,
                padding=1,
                bias=True,
                weight_quant=Q.Int8WeightPerTensorFixedPoint,
                bias_quant=Q.Int32Bias,
            )
        ),
        rand(2, 4, 6, 6),
    ),
    "conv3d_4bit": (lambda: qnn.QuantConv3d(2, 3, 2, weight_bit_width=4), rand(1, 2, 4, 4, 4)),
    "convtranspose2d_per_channel": (
        lambda: qnn.QuantConvTranspose2d(
            4, 3, 3, stride=2, weight_quant=Q.Int8WeightPerChannelFloat
        ),
        rand(2, 4, 5, 5),
    ),
    "convtranspose1d_shifted_uint8": (
        lambda: qnn.QuantConvTranspose1d(3, 2, 3, weight_quant=Q.ShiftedUint8WeightPerTensorFloat),
        rand(2, 3, 7),
    ),
    "linear_mse_weights_and_acts": (
        lambda: qnn.QuantLinear(
            8,
            6,
            bias=True,
            weight_quant=Q.Int8WeightPerChannelFloatMSE,
            input_quant=Q.Int8ActPerTensorFloatMSE,
        ),
        rand(5, 8),
    ),
    "linear_hqo_weights": (
        lambda: qnn.QuantLinear(
            8, 6, bias=False, weight_quant=Q.ShiftedUint8WeightPerChannelFloatHQO
        ),
        rand(5, 8),
    ),
    "linear_decoupled_weights": (
        lambda: qnn.QuantLinear(
            8, 6, bias=False, weight_quant=Q.Int8WeightPerChannelFloatDecoupled
        ),
        rand(5, 8),
    ),
    "linear_a2q": (
        lambda: qnn.QuantLinear(
            8,
            6,
            bias=False,
            weight_quant=Q.Int8AccumulatorAwareWeightQuant,
            weight_accumulator_bit_width=12,
            input_quant=Q.Uint8ActPerTensorFloat,
        ),
        rand(5, 8),
    ),
    "linear_binary_ternary": (
        lambda: qnn.QuantLinear(
            8,
            6,
            bias=False,
            weight_quant=Q.SignedBinaryWeightPerTensorConst,
            input_quant=Q.SignedTernaryActPerTensorConst,
        ),
        rand(5, 8),
    ),
    "linear_fp8_e4m3": (
        lambda: qnn.QuantLinear(
            8,
            6,
            bias=True,
            weight_quant=FQ.Fp8e4m3WeightPerTensorFloat,
            input_quant=FQ.Fp8e4m3ActPerTensorFloat,
        ),
        rand(5, 8),
    ),
    "linear_fp8_e5m2_per_channel": (
        lambda: qnn.QuantLinear(8, 6, bias=False, weight_quant=FQ.Fp8e5m2WeightPerChannelFloat),
        rand(5, 8),
    ),
    "linear_mx_int8": (
        lambda: qnn.QuantLinear(
            64, 6, bias=False, weight_quant=MX.MXInt8Weight, input_quant=MX.MXInt8Act
        ),
        rand(5, 64),
    ),
    "linear_mx_fp8": (
        lambda: qnn.QuantLinear(
            40, 6, bias=False, weight_quant=MX.MXFloat8e4m3Weight, input_quant=MX.MXFloat8e4m3Act
        ),
        rand(5, 40),
    ),
    "linear_shifted_group": (
        lambda: qnn.QuantLinear(
            64,
            6,
            bias=False,
            weight_quant=Q.ShiftedUint8WeightGroupQuantFloat,
            weight_group_size=16,
        ),
        rand(5, 64),
    ),
    "identity_int8_ema": (
        lambda: qnn.QuantIdentity(act_quant=Q.Int8ActPerTensorEma, ema_decay=0.25),
        rand(4, 7),
    ),
    "relu_batch_quant": (
        lambda: qnn.QuantReLU(act_quant=Q.Uint8ActPerTensorFloatBatchQuant2d),
        rand(3, 4, 5, 5),
    ),
    "relu_learned_after_stats": (
        lambda: qnn.QuantReLU(bit_width=6, collect_stats_steps=2),
        rand(3, 4, 5),
    ),
    "relu_fixed_point_max_init": (
        lambda: qnn.QuantReLU(act_quant=Q.Uint8ActPerTensorFixedPointMaxInit, max_val=3.0),
        rand(3, 4, 5),
    ),
    "hardtanh": (lambda: qnn.QuantHardTanh(max_val=1.0, min_val=-1.0), rand(3, 9)),
    "sigmoid_tanh": (
        lambda: nn.Sequential(qnn.QuantSigmoid(), qnn.QuantTanh(collect_stats_steps=2)),
        rand(3, 9),
    ),
    "identity_per_channel_fp8_act": (
        lambda: qnn.QuantIdentity(
            act_quant=FQ.Fp8e4m3ActPerChannelFloat2d,
            per_channel_broadcastable_shape=(1, 4, 1, 1),
            scaling_stats_permute_dims=(1, 0, 2, 3),
        ),
        rand(2, 4, 3, 3),
    ),
    "eltwise_add": (
        lambda: TwoInputs(qnn.QuantEltwiseAdd()),
        lambda g: rand(2, 5)(g) + rand(2, 5)(g),
    ),
    "cat": (lambda: TwoInputs(qnn.QuantCat()), lambda g: rand(2, 5)(g) + rand(2, 5)(g)),
    "trunc_avg_pool": (lambda: QuantIn(qnn.TruncAvgPool2d(2)), rand(2, 3, 6, 6)),
    "trunc_adaptive_avg_pool": (
        lambda: QuantIn(qnn.TruncAdaptiveAvgPool2d((2, 2))),
        rand(2, 3, 6, 6),
    ),
    "upsampling": (
        lambda: nn.Sequential(
            QuantIn(qnn.QuantUpsamplingNearest2d(scale_factor=2)),
            qnn.QuantUpsamplingBilinear2d(scale_factor=2),
        ),
        rand(1, 2, 3, 3),
    ),
    "scale_bias_and_bn": (
        lambda: nn.Sequential(qnn.BatchNorm2dToQuantScaleBias(3), qnn.QuantScaleBias(3, bias=True)),
        rand(2, 3, 4, 4),
    ),
    "embedding": (Embed, rand(3, 5)),
    "rnn_bidirectional": (
        lambda: qnn.QuantRNN(5, 6, num_layers=2, bidirectional=True, batch_first=True),
        rand(2, 4, 5),
    ),
    "lstm_io_quant": (
        lambda: qnn.QuantLSTM(5, 6, num_layers=2, io_quant=Q.Int8ActPerTensorFloat),
        # Scaled so that no h = o * tanh(c) lands on a tie (unscaled, one did at step 2).
        lambda g: [0.7 * x for x in rand(4, 2, 5)(g)],
    ),
    "mha_cross_attention": (
        lambda: Attention(packed_in_proj=False),
        lambda g: rand(4, 2, 8)(g) + rand(3, 2, 8)(g),
    ),
    "mha_packed_self_attention": (lambda: Attention(packed_in_proj=True), rand(4, 2, 8)),
    "sdpa": (sdpa, lambda g: rand(2, 3, 4, 8)(g) + rand(2, 3, 5, 8)(g)),
    "graph_quantizer": (graph_quantized, rand(2, 3, 7, 7)),
}


def values(out) -> List[torch.Tensor]:
    """Every tensor of a layer's output (QuantTensor fields included), flattened in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if out is None or isinstance(out, (int, float, bool, str)):
        return []
    if hasattr(out, "_fields"):  # a QuantTensor (NamedTuple): its value and metadata
        return [t for f in out._fields for t in values(getattr(out, f))]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in values(o)]
    raise TypeError(f"unexpected output {type(out)}")


def run(name: str, device: str) -> List[Tuple[str, torch.Tensor]]:
    """Four training steps (forward, backward, SGD) and an eval forward; every output,
    gradient and the final state, on the CPU."""
    build, inputs = CASES[name]
    torch.manual_seed(0)
    model = build().double().to(device)  # built on the CPU, moved as a user would
    g = torch.Generator().manual_seed(1)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.05) if params else None
    got: List[Tuple[str, torch.Tensor]] = []
    for step in range(4):
        xs = [x.to(device).requires_grad_() for x in inputs(g)]
        outs = values(model(*xs))
        float_outs = [o for o in outs if o.is_floating_point()]
        loss = sum(
            (o * (1.0 + torch.arange(o.numel(), device=device).view_as(o) % 3)).sum()
            for o in float_outs
            if o.requires_grad
        )
        if isinstance(loss, torch.Tensor):
            loss.backward()
        got += [(f"step{step} out{i}", o.detach()) for i, o in enumerate(outs)]
        got += [(f"step{step} dx{i}", x.grad) for i, x in enumerate(xs) if x.grad is not None]
        got += [
            (f"step{step} d{n}", p.grad) for n, p in model.named_parameters() if p.grad is not None
        ]
        if opt is not None:
            opt.step()
            opt.zero_grad()
    model.eval()
    with torch.no_grad():
        got += [
            (f"eval out{i}", o)
            for i, o in enumerate(values(model(*[x.to(device) for x in inputs(g)])))
        ]
    got += [(f"state {k}", v) for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)]
    for label, t in got:  # QuantTensor's bool flags (signed_t, training_t) may stay on the host
        if t.is_floating_point():
            assert t.device.type == torch.device(device).type, f"{name}: {label} is on {t.device}"
    return [(label, t.cpu()) for label, t in got]


def mismatches(want, got) -> List[str]:
    """Every entry of got that is not want's to 1e-9 relative. atol: a gradient that is zero in
    exact arithmetic (a key bias's, softmax being invariant to it) is rounding noise of sums of
    terms of order 1."""
    assert [label for label, _ in got] == [label for label, _ in want]
    wrong = []
    for (label, w), (_, g) in zip(want, got):
        try:
            torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-10)
        except AssertionError:
            diff = (g.double() - w.double()).abs().max().item() if g.shape == w.shape else "shape"
            wrong.append(f"{label}: max |diff| {diff}")
    return wrong


@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU and a CUDA build of brevitas_cpp")
@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_on_gpu_matches_cpu(name):
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        want, got = run(name, "cpu"), run(name, "cuda")
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    wrong = mismatches(want, got)
    assert not wrong, f"{name}, every mismatch in order:\n" + "\n".join(wrong)


class TieFinder(TorchDispatchMode):
    """Records every int_quant input that sits on its rounding boundary (x / s + z at k + 1/2
    when rounding to nearest, at an integer for floor, ceil and round-to-zero) to 1e-12."""

    def __init__(self):
        super().__init__()
        self.ties: List[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.brevitas_cpp.int_quant.default:
            x, scale, zero_point = args[0], args[1], args[2]
            rounding = args[6] if len(args) > 6 else (kwargs or {}).get("rounding_mode", "round")
            u = (x / scale + zero_point).detach()
            bits, signed, narrow = float(args[3]), bool(args[4]), bool(args[5])
            lo = -(2 ** (bits - 1)) + narrow if signed else 0.0
            hi = 2 ** (bits - 1) - 1 if signed else 2**bits - 1 - narrow
            offset = 0.5 if rounding in ("round", "dpu") else 0.0
            gap = (u - offset - torch.round(u - offset)).abs()
            # A tie outside [lo - 1/2, hi + 1/2] clamps to the same value either way.
            near = (gap <= 1e-12 * u.abs().clamp_min(1.0)) & (u >= lo - 0.5) & (u <= hi + 0.5)
            if bool(near.any()):
                self.ties.append(f"{tuple(x.shape)} at {u[near][:3].tolist()} ({rounding})")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_case_is_well_conditioned_on_the_cpu(name):
    """The table itself, where there is no GPU: every case builds, trains and runs in eval, and
    no quantizer input of it sits on a rounding tie. Quantizing products of quantized values
    with a max-derived scale makes exact ties (an LSTM's h = o * tanh(c) at 24.5 steps, seen on
    the H200); another device's last-bit differences flip them, and a GPU mismatch would then
    say nothing about the GPU."""
    with TieFinder() as finder:
        got = run(name, "cpu")
    labels = [label for label, _ in got]
    assert any(label.startswith("step3 out") for label in labels)
    assert any(label.startswith("eval out") for label in labels)
    assert not finder.ties, f"{name}: quantizer inputs on a rounding tie: {finder.ties}"
