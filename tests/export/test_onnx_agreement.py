"""onnxruntime against the PyTorch eval model on the exported files: the activation integers of
every quantizer call and the outputs. The graph as written (no onnxruntime optimization) computes
what the model computes: integers equal, or one step apart where a float sum in another order
lands next to a rounding boundary (counted, and bounded here); outputs within float rounding."""

import pytest
import torch
from export_models import DigitsCNN, calibrate, digits_cnn, images, quantized_resnet

import brevitas_cpp.nn as qnn
import brevitas_cpp.quant as bq
from brevitas_cpp.export import check_onnx_qcdq, export_onnx_qcdq

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

# At most this fraction of activation integers may be one step off (measured: 0 on these models).
MAX_MISMATCH_FRACTION = 1e-3


def assert_agrees(model, x_export, x_check, tmp_path, optimization="disable"):
    path = tmp_path / "model.onnx"
    export_onnx_qcdq(model, x_export, path)
    agreement = check_onnx_qcdq(model, path, x_check, optimization=optimization)
    print(agreement)
    assert agreement.int_elements > 0
    assert agreement.max_int_diff <= 1
    assert agreement.int_mismatches <= MAX_MISMATCH_FRACTION * agreement.int_elements
    with torch.no_grad():
        scale = model(x_check).abs().max().item()
    # Outputs are float sums of dequantized values: equal up to the order of the sums, unless an
    # activation integer one step off (counted above) reaches them.
    tolerance = 1e-5 if agreement.int_mismatches == 0 else 1e-2
    assert agreement.max_abs_diff <= tolerance * scale
    return agreement


@pytest.mark.parametrize(
    "bits, per_channel", [(8, True), (8, False), (4, True)], ids=["W8A8", "W8A8-per-tensor", "W4A4"]
)
def test_digits_cnn(bits, per_channel, tmp_path):
    model = calibrate(digits_cnn(bits, per_channel=per_channel), images(32, seed=0))
    # Exported with a batch of 4, checked on 256 other images (the batch dimension is dynamic).
    assert_agrees(model, images(4, seed=1), images(256, seed=2), tmp_path)


def test_digits_cnn_with_quant_tensors_and_int32_bias(tmp_path):
    model = digits_cnn(8, return_quant_tensor=True)
    model.conv2.bias_quant = type(model.conv2.bias_quant)(model.conv2, bq.Int32Bias)
    calibrate(model, images(32, seed=0))
    assert_agrees(model, images(4, seed=1), images(256, seed=2), tmp_path)


def test_digits_cnn_with_seed_003_quantizers(tmp_path):
    weight = {"weight_quant": bq.Int8WeightPerChannelMaxAbs}
    act = {"act_quant": bq.Int8ActPerTensorEma}
    model = calibrate(DigitsCNN(weight, act), images(32, seed=0))
    assert_agrees(model, images(4, seed=1), images(256, seed=2), tmp_path)


def test_graph_quantized_resnet_block(tmp_path):
    """brevitas_cpp.graph's automatic quantization, residual adds quantized by insertion."""
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    model = quantized_resnet(x)
    check = torch.randn(32, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    agreement = assert_agrees(model, x[:2], check, tmp_path)
    # Every inserted quantizer is in the graph: two operands of each of the two residual adds.
    inserted = [q for q in agreement.quantizers if q.quantizer.startswith("inserted_quantizers")]
    assert len(inserted) == 4


def test_optimized_onnxruntime_is_reported(tmp_path):
    """onnxruntime's optimizations rewrite a QDQ graph for integer execution (the float biases
    are quantized to int32): the report counts what that changes."""
    model = calibrate(digits_cnn(8), images(32, seed=0))
    path = tmp_path / "model.onnx"
    export_onnx_qcdq(model, images(4, seed=1), path)
    exact = check_onnx_qcdq(model, path, images(256, seed=2))
    optimized = check_onnx_qcdq(model, path, images(256, seed=2), optimization="all")
    print(exact, optimized, sep="\n")
    assert optimized.int_elements == exact.int_elements
    assert optimized.max_int_diff <= 2
    assert optimized.as_dict()["int_mismatches"] == optimized.int_mismatches
    with pytest.raises(ValueError, match="optimization"):
        check_onnx_qcdq(model, path, images(2, seed=2), optimization="fast")


class SelfAttention(torch.nn.Module):
    def __init__(self, packed_in_proj: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.attn = qnn.QuantMultiheadAttention(
            8, 2, batch_first=True, packed_in_proj=packed_in_proj
        )

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


@pytest.mark.parametrize("packed_in_proj", [True, False], ids=["packed", "separate"])
def test_self_attention_exports(packed_in_proj, tmp_path):
    # torch.export traces the packed layer's check that query, key and value are one tensor.
    # With separate projections their input quantizers see one tensor, learn one scale and
    # write alike QuantizeLinear nodes, each kept (merged, the check would miss calls).
    model = SelfAttention(packed_in_proj)
    x = torch.randn(2, 5, 8)
    for _ in range(3):
        model(x)
    model.eval()
    assert_agrees(model, x, torch.randn(4, 5, 8), tmp_path)
    onnx = pytest.importorskip("onnx")
    nodes = onnx.load(str(tmp_path / "model.onnx")).graph.node
    quantize = [n for n in nodes if n.op_type == "QuantizeLinear"]
    inputs = [n.input[0] for n in quantize]
    assert (len(inputs) > len(set(inputs))) == (not packed_in_proj)
    assert all(a.name != "brevitas_cpp_call" for n in quantize for a in n.attribute)
