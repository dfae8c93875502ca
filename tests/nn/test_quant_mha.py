"""QuantMultiheadAttention against Brevitas 0.12's recorded numbers (golden/brevitas_0_12_mha.pt,
written by golden/record_mha.py from the cases in golden/mha_cases.py) and against its own
quantizers around the float attention written out here.

Golden replay, per case: the seeded initial state_dict bit for bit; every training step's output
and attention weights (every QuantTensor field) at the precision the float kernels define
(golden/precision.py: the projections and attention products are this CPU's, whose last bits
differ between CPUs and torch versions, so within 64 ulps of the largest magnitude, and a value
with a recorded scale one quantization step off in at most 1 % of its elements; the attention
output, out_proj's unquantized output, also one flipped operand away, an Int32Bias element moving
a channel by the accumulator step, with that step's gradients left out, see precision.py);
gradients to the inputs and every parameter at rtol 1e-6 plus the step's summation bound (the
fused quantizer ops sum the scales' gradients in another order: eps32 * sum|terms|, measured by
SummationBound); parameters set to Brevitas's after each step; eval outputs (batched, and
unbatched for self-attention); an nn.MultiheadAttention checkpoint loaded into a fresh layer
(reports and state bit for bit, eval outputs at kernel precision). Every replay also runs under
golden/foreign_kernels.py, which moves every matrix-product result by up to an ulp, as another
CPU would.
"""

import importlib.util
import math
import os
from typing import Any, Dict, List

import pytest
import torch
import torch.nn.functional as F
from helpers import MHA_PREFIXES, short_warmup
from torch import nn

import brevitas_cpp.nn as qnn
import brevitas_cpp.quant as qquant
from brevitas_cpp import config
from brevitas_cpp.quant_tensor import QuantTensor

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN: Dict[str, Any] = torch.load(os.path.join(HERE, "golden", "brevitas_0_12_mha.pt"))
RUNTIME_SCALE = "fused_activation_quant_proxy.tensor_quant.scaling_impl.value"
GRAD_RTOL = 1e-6
SEED = 2024


def _load_golden(module_name: str, file_name: str):
    # pytest runs with --import-mode=importlib: the golden/ files are loaded by path.
    spec = importlib.util.spec_from_file_location(
        module_name, os.path.join(HERE, "golden", file_name)
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mc = _load_golden("nn_golden_mha_cases", "mha_cases.py")
pr = _load_golden("nn_golden_precision", "precision.py")


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as recorded: the same reduction order in the float kernels
    yield
    torch.set_num_threads(threads)


# Every golden replay runs on this machine's float kernels and under foreign_kernels.py.
float_kernels = pr.float_kernels_fixture(SEED)


def flatten(out: Any, prefix: str = "out") -> Dict[str, torch.Tensor]:
    flat: Dict[str, torch.Tensor] = {}
    if out is None:
        return flat
    if isinstance(out, QuantTensor):
        for field in ("value", "scale", "zero_point", "bit_width"):
            flat[prefix if field == "value" else f"{prefix}.{field}"] = getattr(out, field)
    elif isinstance(out, torch.Tensor):
        flat[prefix] = out
    else:
        for i, item in enumerate(out):
            flat.update(flatten(item, f"{prefix}.{i}"))
    return flat


def values(out: Any) -> List[torch.Tensor]:
    if out is None:
        return []
    if isinstance(out, QuantTensor):
        return [out.value]
    if isinstance(out, torch.Tensor):
        return [out]
    return [v for item in out for v in values(item)]


def leaves(args):
    seen: Dict[int, torch.Tensor] = {}
    out = []
    for a in args:
        if id(a) not in seen:
            seen[id(a)] = a.clone().requires_grad_(True)
        out.append(seen[id(a)])
    return out


def build(name: str) -> nn.Module:
    torch.manual_seed(SEED)
    return mc.build(qnn, qquant, name)


def out_proj_operands(model: nn.Module) -> Dict[str, Any]:
    """The attention output (out.0) is out_proj's unquantized output: within one flip of one of
    its quantized operands (golden/precision.py, LayerOperands)."""
    return {"out.0": pr.LayerOperands(model.out_proj)}


@pytest.mark.parametrize("name", list(mc.CASES))
def test_against_brevitas(name: str, float_kernels) -> None:
    rec = GOLDEN["cases"][name]
    model = build(name)
    state = model.state_dict()
    assert list(state) == list(rec["init_state"])
    for key, value in rec["init_state"].items():
        assert torch.equal(state[key], value), key
    model.train()
    layers = out_proj_operands(model)
    flips = 0
    for index, step in enumerate(rec["steps"]):
        args = leaves(step["data"]["args"])
        out = model(*args, **step["data"]["kwargs"])
        what = f"step {index}"
        flipped = pr.assert_flat_at_kernel_precision(flatten(out), step["out"], what, layers)
        with pr.SummationBound() as summation:
            sum((o * g).sum() for o, g in zip(values(out), step["g"])).backward()
        bound = summation.take()
        assert [n for n, _ in model.named_parameters()] == step["params"]
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        assert sorted(grads) == sorted(step["grads"])
        if flipped:  # see golden/precision.py: this step's gradients are left out
            flips = pr.note_flip(f"{name} {flipped}", flips)
        else:
            distinct = list({id(a): a for a in args}.values())
            for i, (got, expected) in enumerate(zip(distinct, step["input_grads"], strict=True)):
                pr.assert_grad_close(got.grad, expected, f"{what} d input {i}", bound, GRAD_RTOL)
            for key, grad in step["grads"].items():
                pr.assert_grad_close(grads[key], grad, f"{what} d {key}", bound, GRAD_RTOL)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(step["params_after"][n])
                p.grad = None
    model.eval()
    data = rec["eval_data"]
    with torch.no_grad():
        out = model(*data["args"], **data["kwargs"])
        pr.assert_flat_at_kernel_precision(flatten(out), rec["eval_out"], "eval", layers)
        if "eval_unbatched" in rec:
            x = data["args"][0][:, 0]
            out = model(x, x, x)
            want = rec["eval_unbatched"]
            pr.assert_flat_at_kernel_precision(flatten(out), want, "unbatched", layers)


@pytest.mark.parametrize("name", list(mc.CASES))
def test_float_checkpoint_loads_as_in_brevitas(name: str, float_kernels) -> None:
    rec = GOLDEN["cases"][name]["float"]
    model = build(name)
    report = model.load_state_dict(
        {k: v.clone() for k, v in rec["state_dict"].items()}, strict=False
    )
    # brevitas_cpp does not report the not-yet-initialised runtime-statistics scales as missing
    # (tests/nn/golden/README.md); every other reported key is Brevitas's.
    assert report.missing_keys == [k for k in rec["missing"] if not k.endswith(RUNTIME_SCALE)]
    assert report.unexpected_keys == rec["unexpected"]
    state = model.state_dict()
    assert list(state) == list(rec["loaded_state"])
    for key, value in rec["loaded_state"].items():
        assert torch.equal(state[key], value), key
    model.eval()
    data = GOLDEN["cases"][name]["eval_data"]
    layers = out_proj_operands(model)
    with torch.no_grad():
        out = model(*data["args"], **data["kwargs"])
    pr.assert_flat_at_kernel_precision(flatten(out), rec["eval_out"], "eval", layers)


def test_the_replay_still_catches_a_quantizer_bug() -> None:
    """The tolerance is the float kernels', not a quantizer's: every quantizer flooring instead
    of rounding fails the first output comparison (a QuantTensor output and per-head weights)."""
    with (
        pr.FloorInsteadOfRound(),
        pytest.raises(AssertionError, match=r"step 0 out.*(quantization step|elements differ)"),
    ):
        test_against_brevitas("mha_cross_masks", float_kernels=None)


def test_one_operand_flip_is_the_only_extra_allowance() -> None:
    """golden/precision.py's rule for out_proj's unquantized output: one Int32Bias element one
    accumulator step away (its whole channel) or one input element (its position, by input step
    x a weight column) passes and is named; two, or an output scaled by 1 + 1e-3, fail."""
    torch.manual_seed(4)
    mha = qnn.QuantMultiheadAttention(8, 2)
    layer = pr.LayerOperands(mha.out_proj)
    x = torch.randn(5, 2, 8)
    with torch.no_grad():
        out = mha(x, x, x)[0]
    step = layer.seen["bias_quant"][1]
    channel = torch.zeros(8)
    channel[3] = 1.0
    flip = pr.assert_at_kernel_precision(out + step * channel, out, "bias", layer=layer)
    assert flip == f"bias: bias element 3 (step {float(step):.3g})"
    row = out.clone()
    row[2, 1] -= layer.seen["input_quant"][1] * layer.seen["weight_quant"][0][:, 5]
    flip = pr.assert_at_kernel_precision(row, out, "input", layer=layer)
    assert flip == "input: input element 5 at output position 5"
    for bad in (out + step * (channel + channel.roll(1)), out * (1 + 1e-3)):
        with pytest.raises(AssertionError, match="elements differ"):
            pr.assert_at_kernel_precision(bad, out, "bug", layer=layer)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["f32", "f16", "bf16"]
)
def test_is_its_quantizers_around_the_float_attention(dtype) -> None:
    """The layer's own quantizers (QuantLinear, QuantIdentity) around softmax(q k^T / sqrt(d)) v
    with a bool padding mask, written out here; in float32 and in a float16 or bfloat16 model."""
    torch.manual_seed(0)
    mha = qnn.QuantMultiheadAttention(8, 2, batch_first=True).to(dtype)
    x = torch.randn(2, 5, 8).to(dtype)
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[1, 3:] = True
    with torch.no_grad():
        mha(x, x, x)  # statistics
        mha.eval()
        out, weights = mha(x, x, x, key_padding_mask=padding)
        q, k, v = mha.in_proj(x).chunk(3, dim=-1)  # (B, L, E)

        def heads(t):  # (B * H, L, d)
            return t.transpose(0, 1).contiguous().view(5, 4, 4).transpose(0, 1)

        q, k, v = heads(q), heads(k), heads(v)
        mask = torch.zeros(4, 1, 5, dtype=dtype).masked_fill_(
            padding.repeat_interleave(2, 0).unsqueeze(1), -math.inf
        )
        scores = torch.baddbmm(
            mask, mha.q_scaled_quant(q / math.sqrt(4)), mha.k_transposed_quant(k.transpose(1, 2))
        )
        w = mha.attn_output_weights_quant(F.softmax(scores, dim=-1))
        o = torch.bmm(w, mha.v_quant(v)).transpose(0, 1).contiguous().view(5, 2, 8)
        expected = mha.out_proj(o).transpose(0, 1)
    assert torch.equal(out, expected)
    assert torch.equal(weights, w.view(2, 2, 5, 5).sum(dim=1) / 2)
    assert torch.all(weights[1, :, 3:] == 0)  # padded keys get no weight


@pytest.mark.skipif(
    config.JIT_ENABLED, reason="key mapping only, no quantizer code: run with BREVITAS_JIT=0"
)
def test_float_state_dict_loads_exactly() -> None:
    torch.manual_seed(1)
    float_mha = nn.MultiheadAttention(8, 2)
    packed = qnn.QuantMultiheadAttention(8, 2)
    packed.load_state_dict(float_mha.state_dict())
    assert torch.equal(packed.in_proj.weight, float_mha.in_proj_weight)
    assert torch.equal(packed.out_proj.bias, float_mha.out_proj.bias)
    split = qnn.QuantMultiheadAttention(8, 2, packed_in_proj=False)
    split.load_state_dict(float_mha.state_dict())
    for part, rows in zip("qkv", torch.chunk(float_mha.in_proj_weight, 3)):
        assert torch.equal(getattr(split, f"{part}_proj").weight, rows)
    cross = nn.MultiheadAttention(8, 2, kdim=6, vdim=5)
    qcross = qnn.QuantMultiheadAttention(8, 2, kdim=6, vdim=5)
    qcross.load_state_dict(cross.state_dict())
    assert torch.equal(qcross.v_proj.weight, cross.v_proj_weight)


def test_unquantized_layer_computes_nn_multihead_attention() -> None:
    torch.manual_seed(2)
    off = {
        k: None
        for k in (
            "in_proj_input_quant",
            "in_proj_weight_quant",
            "in_proj_bias_quant",
            "attn_output_weights_quant",
            "q_scaled_quant",
            "k_transposed_quant",
            "v_quant",
            "out_proj_input_quant",
            "out_proj_weight_quant",
            "out_proj_bias_quant",
        )
    }
    float_mha = nn.MultiheadAttention(8, 2, batch_first=True)
    mha = qnn.QuantMultiheadAttention(8, 2, batch_first=True, **off)
    mha.load_state_dict(float_mha.state_dict())
    query, key = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    mask = torch.triu(torch.ones(3, 5, dtype=torch.bool), diagonal=1)
    split = qnn.QuantMultiheadAttention(8, 2, batch_first=True, packed_in_proj=False, **off)
    split.load_state_dict(float_mha.state_dict())
    got = split(query, key, key, attn_mask=mask)
    expected = float_mha(query, key, key, attn_mask=mask)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    x = torch.randn(2, 4, 8)
    for a, b in zip(mha(x, x, x, need_weights=False), float_mha(x, x, x, need_weights=False)):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: qnn.QuantMultiheadAttention(8, 3), ValueError, "divisible by num_heads"),
        (lambda: qnn.QuantMultiheadAttention(0, 1), ValueError, "embed_dim"),
        (lambda: qnn.QuantMultiheadAttention(8, 2, foo=1), TypeError, "foo=1.*in_proj_"),
        (
            lambda: qnn.QuantMultiheadAttention(8, 2, in_proj_weight_bitwidth=4),
            TypeError,
            "weight_bitwidth",
        ),
    ],
)
def test_bad_construction_names_the_argument(make, error, match) -> None:
    with pytest.raises(error, match=match):
        make()


def test_bad_forward_input_names_the_argument() -> None:
    mha = qnn.QuantMultiheadAttention(8, 2)
    x = torch.randn(5, 2, 8)
    with pytest.raises(RuntimeError, match="packed_in_proj=False"):
        mha(x, x.clone(), x.clone())
    with pytest.raises(ValueError, match="attn_mask must have shape"):
        mha(x, x, x, attn_mask=torch.zeros(5, 4))
    with pytest.raises(ValueError, match="key_padding_mask must have shape"):
        mha(x, x, x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="key and value must be 3-D"):
        mha(x, x[0], x[0])
    with pytest.raises(ValueError, match="embed_dim=8"):
        y = torch.randn(5, 2, 6)
        mha(y, y, y)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_trace_and_compile_work() -> None:
    torch.manual_seed(3)
    # The tracer hands the traced function copies of its inputs, so the packed in_proj (which
    # requires query, key and value to be one tensor, as in Brevitas) is traced unpacked.
    mha = qnn.QuantMultiheadAttention(8, 2, packed_in_proj=False)
    x = torch.randn(4, 2, 8)
    with torch.no_grad():
        mha(x, x, x)
    mha.eval()
    with torch.no_grad():
        expected = mha(x, x, x)
        traced = torch.jit.trace(mha, (x, x, x))
        got = traced(x, x, x)
        compiled = torch.compile(mha, backend="aot_eager")(x, x, x)
    for a, b, c in zip(expected, got, compiled):
        assert torch.equal(a, b) and torch.equal(a, c)


# ---- torch.jit.script: the eager layer is the reference ----

# Two statistics steps per activation quantizer: the steps below reach the learned scales.
MHA_WARMUP = short_warmup(*MHA_PREFIXES)
SCRIPT_STEPS = 4  # two warm-up steps, the switch to the learned scales, one learned step
L, S, B, E = 4, 5, 2, 8  # target and source lengths, batch, embed_dim (2 heads)


MASKS = torch.Generator().manual_seed(11)


def _padding(dtype: torch.dtype) -> torch.Tensor:
    mask = torch.zeros(B, S, dtype=torch.bool)
    mask[1, 3:] = True
    return mask if dtype == torch.bool else torch.zeros(B, S).masked_fill(mask, -math.inf)


# name: (layer keywords, inputs: "self" one tensor, "kv" key is value, "cross" three tensors,
# forward keywords). Each option of the layer is in at least one case; masks of each kind (bool,
# float, byte; 2-D and per head 3-D).
SCRIPT_CASES: Dict[str, Any] = {
    # softmax_input_quant only without masks: a masked score is -inf, which it can not scale.
    "packed-self-softmax-input-quant": (
        dict(softmax_input_quant=qquant.Int8ActPerTensorFloat, softmax_input_collect_stats_steps=2),
        "self",
        {},
    ),
    "packed-batch-first-masks-per-head": (
        dict(batch_first=True),
        "self",
        dict(
            key_padding_mask=_padding(torch.bool),
            attn_mask=torch.randn(S, S, generator=MASKS),
            average_attn_weights=False,
        ),
    ),
    "split-kdim-vdim-no-weights": (
        dict(kdim=6, vdim=5),
        "cross",
        dict(attn_mask=torch.rand(B * 2, L, S, generator=MASKS) > 0.7, need_weights=False),
    ),
    "split-batch-first-bias-kv-zero-attn-dropout": (
        dict(
            batch_first=True,
            packed_in_proj=False,
            bias=False,
            add_bias_kv=True,
            add_zero_attn=True,
            dropout=0.25,
        ),
        "kv",
        dict(
            key_padding_mask=_padding(torch.float32),
            attn_mask=(torch.rand(L, S, generator=MASKS) > 0.8).to(torch.uint8),
            is_causal=True,  # a hint only: the mask is what is applied
        ),
    ),
}


def _seeded_mha(layer_kwargs: Dict[str, Any]) -> nn.Module:
    torch.manual_seed(SEED)
    return qnn.QuantMultiheadAttention(E, 2, **layer_kwargs, **MHA_WARMUP).train()


def _script_inputs(kind: str, batch_first: bool, kdim: int, vdim: int, seed: int) -> List[Any]:
    g = torch.Generator().manual_seed(seed)

    def draw(length: int, width: int) -> torch.Tensor:
        shape = (B, length, width) if batch_first else (length, B, width)
        return torch.randn(*shape, generator=g)

    if kind == "self":
        x = draw(S, E)
        return [x, x, x]
    if kind == "kv":
        kv = draw(S, E)
        return [draw(L, E), kv, kv]
    return [draw(L, E), draw(S, kdim), draw(S, vdim)]


def _script_run(model: nn.Module, args: List[Any], kwargs: Dict[str, Any]) -> List[Any]:
    """Outputs, input gradients and parameter gradients of one step."""
    model.zero_grad(set_to_none=True)
    args = leaves(args)
    torch.manual_seed(7)  # the dropout draws
    out, weights = model(*args, **kwargs)
    probe = torch.linspace(-1.0, 1.0, out.numel()).view_as(out)
    loss = (out * probe).sum() + (0.0 if weights is None else (weights * weights).sum())
    loss.backward()
    distinct = list({id(a): a for a in args}.values())
    grads = [p.grad for p in model.parameters()]
    return [out.detach(), weights, [a.grad for a in distinct], grads]


def _assert_bitwise(expected: Any, got: Any, what: str) -> None:
    if isinstance(expected, list):
        assert len(got) == len(expected), what
        for i, (e, g) in enumerate(zip(expected, got)):
            _assert_bitwise(e, g, f"{what}.{i}")
    elif expected is None:
        assert got is None, what
    else:
        assert torch.equal(got, expected), what


@pytest.mark.filterwarnings("ignore:Byte tensor for attn_mask")
@pytest.mark.parametrize("name", list(SCRIPT_CASES))
def test_scripted_layer_trains_and_evaluates_like_the_eager_one(name: str, tmp_path) -> None:
    """Two layers built from one seed, one scripted (and saved and loaded back): at every
    training step (warm-up, switch to the learned scales, learned scales) and in eval mode,
    outputs, attention weights and gradients equal bit for bit."""
    layer_kwargs, kind, call_kwargs = SCRIPT_CASES[name]
    eager, scripted = (_seeded_mha(layer_kwargs) for _ in range(2))
    torch.jit.save(torch.jit.script(scripted), tmp_path / "mha.pt")
    scripted = torch.jit.load(tmp_path / "mha.pt")
    steps = [torch.optim.SGD(m.parameters(), lr=0.05).step for m in (eager, scripted)]
    batch_first = layer_kwargs.get("batch_first", False)
    kdim, vdim = layer_kwargs.get("kdim", E), layer_kwargs.get("vdim", E)
    for index in range(SCRIPT_STEPS + 1):
        if index == SCRIPT_STEPS:
            eager.eval()
            scripted.eval()
        args = _script_inputs(kind, batch_first, kdim, vdim, seed=index)
        expected = _script_run(eager, args, call_kwargs)
        _assert_bitwise(expected, _script_run(scripted, args, call_kwargs), f"{name} {index}")
        for step in steps:
            step()
    if kind == "self" and not call_kwargs:  # unbatched self-attention, in eval mode
        x = args[0][:, 0]
        _assert_bitwise(list(eager(x, x, x)), list(scripted(x, x, x)), "unbatched")


def test_scripted_packed_layer_needs_one_tensor() -> None:
    """Under TorchScript query, key and value are one tensor when they are the same object or
    share storage, offset, sizes and strides (TorchScript has no data pointer): a view as the
    whole works, as in eager mode, and distinct data is refused as in eager mode."""
    torch.manual_seed(3)
    mha = qnn.QuantMultiheadAttention(8, 2).eval()
    scripted = torch.jit.script(mha)
    x = torch.randn(4, 2, 8)
    with torch.no_grad():
        expected = mha(x, x, x)
        _assert_bitwise(list(expected), list(scripted(x, x[:], x.detach())), "views")
        with pytest.raises(torch.jit.Error, match="packed_in_proj=False"):
            scripted(x, x.clone(), x)


def test_scripting_refuses_quant_tensor_outputs() -> None:
    with pytest.raises(RuntimeError, match="torch.jit.script of QuantLinear.*return_quant_tensor"):
        torch.jit.script(qnn.QuantMultiheadAttention(8, 2, return_quant_tensor=True))
