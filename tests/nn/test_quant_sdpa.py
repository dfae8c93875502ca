"""ScaledDotProductAttention and QuantScaledDotProductAttention against Brevitas 0.12's recorded
numbers (the "sdpa_cases" of golden/brevitas_0_12_mha.pt, from golden/record_mha.py and the
cases in golden/mha_cases.py), against F.scaled_dot_product_attention with quantization off,
and against the layer's own quantizers around the attention written out here.

The golden replay compares every training step's output and the eval output at the precision the
float kernels define (golden/precision.py: the attention products are this CPU's, whose last bits
differ between CPUs and torch versions, so within 64 ulps of the largest magnitude), gradients at
rtol 1e-6 plus the step's summation bound (eps32 * sum|terms| of the scale gradients the fused
quantizer ops sum, golden/precision.py's SummationBound), and runs also under
golden/foreign_kernels.py, which moves every matrix-product result by up to an ulp, as another
CPU would."""

import importlib.util
import math
import os
from typing import Any, Dict

import pytest
import torch
import torch.nn.functional as F

import brevitas_cpp.nn as qnn
import brevitas_cpp.quant as qquant

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN: Dict[str, Any] = torch.load(os.path.join(HERE, "golden", "brevitas_0_12_mha.pt"))
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


mc = _load_golden("nn_golden_mha_cases_sdpa", "mha_cases.py")
pr = _load_golden("nn_golden_precision", "precision.py")


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as recorded
    yield
    torch.set_num_threads(threads)


# Every golden replay runs on this machine's float kernels and under foreign_kernels.py.
float_kernels = pr.float_kernels_fixture(SEED)


@pytest.mark.parametrize("name", list(mc.SDPA_CASES))
def test_against_brevitas(name: str, float_kernels) -> None:
    rec = GOLDEN["sdpa_cases"][name]
    torch.manual_seed(SEED)
    model = mc.build_sdpa(qnn, qquant, name)
    model.train()
    for index, step in enumerate(rec["steps"]):
        args = [a.clone().requires_grad_(True) for a in step["data"]["args"]]
        out = model(*args, **step["data"]["kwargs"])
        pr.assert_flat_at_kernel_precision({"out": out}, step["out"], f"step {index}")
        with pr.SummationBound() as summation:
            (out * step["g"]).sum().backward()
        bound = summation.take()
        what = f"step {index} d loss /"
        for i, (got, expected) in enumerate(zip(args, step["input_grads"], strict=True)):
            pr.assert_grad_close(got.grad, expected, f"{what} d input {i}", bound, GRAD_RTOL)
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        assert sorted(grads) == sorted(step["grads"])
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
    pr.assert_flat_at_kernel_precision({"out": out}, rec["eval_out"], "eval")
    state = model.state_dict()
    assert list(state) == list(rec["state"])
    for key, value in rec["state"].items():
        torch.testing.assert_close(state[key], value, rtol=1e-6, atol=0, msg=key)


def test_the_replay_still_catches_a_quantizer_bug() -> None:
    """The tolerance is the float kernels', not a quantizer's: every quantizer flooring instead
    of rounding fails the first output comparison."""
    with (
        pr.FloorInsteadOfRound(),
        pytest.raises(AssertionError, match=r"step 0 out.*elements differ"),
    ):
        test_against_brevitas("sdpa_float_mask_scale", float_kernels=None)


def _inputs(tgt: int = 4, src: int = 5):
    torch.manual_seed(0)
    return torch.randn(2, 2, tgt, 8), torch.randn(2, 2, src, 8), torch.randn(2, 2, src, 8)


@pytest.mark.parametrize(
    "call",
    [
        {},
        {"is_causal": True},
        # Every query keeps at least one key (a row with none would be NaN in both).
        {
            "attn_mask": torch.tensor(
                [[1, 0, 1, 1, 0], [0, 1, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 1, 1]]
            ).bool()
        },
        {"attn_mask": torch.linspace(-1, 1, 20).view(4, 5), "scale": 0.2},
    ],
)
def test_unquantized_equals_the_float_function(call) -> None:
    q, k, v = _inputs()
    off = {
        n: None
        for n in ("attn_output_weights_quant", "q_scaled_quant", "k_transposed_quant", "v_quant")
    }
    quant = qnn.QuantScaledDotProductAttention(**off)
    expected = F.scaled_dot_product_attention(q, k, v, **call)
    torch.testing.assert_close(quant(q, k, v, **call), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        qnn.ScaledDotProductAttention()(q, k, v, **call), expected, rtol=0, atol=0
    )


def test_is_its_quantizers_around_the_float_attention() -> None:
    q, k, v = _inputs()
    sdpa = qnn.QuantScaledDotProductAttention(sdpa_output_quant=qquant.Int8ActPerTensorFloat)
    with torch.no_grad():
        sdpa(q, k, v)
        sdpa.eval()
        out = sdpa(q, k, v, is_causal=True)
        causal = torch.zeros(4, 5).masked_fill_(
            torch.ones(4, 5, dtype=torch.bool).tril().logical_not(), -math.inf
        )
        scores = sdpa.q_scaled_quant(q / math.sqrt(8)) @ sdpa.k_transposed_quant(
            k.transpose(-2, -1)
        )
        weights = sdpa.attn_output_weights_quant(torch.softmax(scores + causal, dim=-1))
        expected = sdpa.sdpa_output_quant(weights @ sdpa.v_quant(v))
    assert torch.equal(out, expected)


def _gqa_inputs():
    torch.manual_seed(1)
    # 6 query heads over 2 key heads and 3 value heads (each divides 6, as torch requires).
    return torch.randn(2, 6, 4, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 3, 5, 8)


@pytest.mark.parametrize("call", [{}, {"is_causal": True}])
def test_gqa_unquantized_equals_the_float_function(call) -> None:
    q, k, v = _gqa_inputs()
    off = {
        n: None
        for n in ("attn_output_weights_quant", "q_scaled_quant", "k_transposed_quant", "v_quant")
    }
    out = qnn.QuantScaledDotProductAttention(**off)(q, k, v, enable_gqa=True, **call)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **call)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_gqa_is_the_float_function_on_the_dequantized_values() -> None:
    """Each key and value head serves the query heads h * r ... (h + 1) * r - 1; the key and
    the value are quantized before their heads are repeated (the statistics of the tensors
    themselves, as Brevitas sees them when one key head broadcasts)."""
    q, k, v = _gqa_inputs()
    sdpa = qnn.QuantScaledDotProductAttention(sdpa_output_quant=qquant.Int8ActPerTensorFloat)
    with torch.no_grad():
        sdpa(q, k, v, enable_gqa=True)  # statistics of the training call
        sdpa.eval()
        out = sdpa(q, k, v, enable_gqa=True)
        q_scaled = sdpa.q_scaled_quant(q / math.sqrt(8))
        k_quant = sdpa.k_transposed_quant(k.transpose(-2, -1))
        v_quant = sdpa.v_quant(v)
        # Query head j reads key head j // 3 and value head j // 2 (the heads written out).
        scores = q_scaled @ k_quant[:, [0, 0, 0, 1, 1, 1]]
        weights = sdpa.attn_output_weights_quant(torch.softmax(scores, dim=-1))
        expected = sdpa.sdpa_output_quant(weights @ v_quant[:, [0, 0, 1, 1, 2, 2]])
    assert torch.equal(out, expected)


def test_dropout_applies_whatever_the_mode_as_in_the_float_function() -> None:
    q, k, v = _inputs()
    sdpa = qnn.QuantScaledDotProductAttention().eval()
    assert torch.equal(sdpa(q, k, v, dropout_p=1.0), torch.zeros(2, 2, 4, 8))


def test_bad_input_names_the_argument() -> None:
    q, k, v = _inputs(5, 5)
    sdpa = qnn.QuantScaledDotProductAttention()
    with pytest.raises(ValueError, match="either attn_mask or is_causal"):
        sdpa(q, k, v, attn_mask=torch.zeros(5, 5), is_causal=True)
    with pytest.raises(ValueError, match="dropout_p"):
        sdpa(q, k, v, dropout_p=1.5)
    with pytest.raises(ValueError, match="key's 2 heads must divide the query's 3"):
        sdpa(torch.randn(2, 3, 5, 8), k, v, enable_gqa=True)
    with pytest.raises(ValueError, match="query must have at least 3 dims"):
        sdpa(q[0, 0], k[0, 0], v[0, 0], enable_gqa=True)
    with pytest.raises(TypeError, match="foo=1"):
        qnn.QuantScaledDotProductAttention(foo=1)


def test_script_is_refused_clearly_and_compile_works() -> None:
    sdpa = qnn.QuantScaledDotProductAttention()
    with pytest.raises(RuntimeError, match="torch.jit.script of QuantScaledDotProductAttention"):
        torch.jit.script(sdpa)
    q, k, v = _inputs()
    with torch.no_grad():
        sdpa(q, k, v)
    sdpa.eval()
    with torch.no_grad():
        expected = sdpa(q, k, v, is_causal=False)
        got = torch.compile(sdpa, backend="aot_eager")(q, k, v)
    assert torch.equal(expected, got)
