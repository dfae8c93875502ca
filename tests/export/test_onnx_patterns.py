"""The ONNX QCDQ graph per quantizer kind, read back from the file: node lists written out, the
integer initializers, scales, zero points, axes and Clip bounds checked against the PyTorch
quantizers' own numbers."""

import numpy as np
import pytest
import torch
from export_models import DigitsCNN, calibrate, digits_cnn, images
from torch import nn

import brevitas_cpp.quant as bq
from brevitas_cpp import nn as qnn
from brevitas_cpp.export import ExportError, export_onnx_qcdq

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

# What each digits-CNN layer becomes, in order (QuantIdentity, conv1, relu1, conv2, relu2,
# pool, flatten, fc).
ACT_8 = ["QuantizeLinear", "DequantizeLinear"]
ACT_BELOW_8 = ["QuantizeLinear", "Clip", "DequantizeLinear"]


def digits_nodes(act):
    return [
        *act,
        *["DequantizeLinear", "Conv"],
        *["Relu", *act],
        *["DequantizeLinear", "Conv"],
        *["Relu", *act],
        "AveragePool",
        "Reshape",
        *["DequantizeLinear", "Gemm"],
    ]


def ops(proto):
    return [n.op_type for n in proto.graph.node]


def initializer(proto, name):
    for t in proto.graph.initializer:
        if t.name == name:
            return t, numpy_helper.to_array(t)
    raise KeyError(name)


def nodes_of(proto, op_type):
    return [n for n in proto.graph.node if n.op_type == op_type]


def attribute(node, name):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return None


def producer(proto, value):
    return next(n for n in proto.graph.node if value in n.output)


def dequantized(proto, dq):
    """(int initializer, scale, zero point, axis) of a weight DequantizeLinear, as numpy."""
    ints = initializer(proto, dq.input[0])
    scale = initializer(proto, dq.input[1])[1]
    zero_point = initializer(proto, dq.input[2])[1] if len(dq.input) > 2 else None
    return ints, scale, zero_point, attribute(dq, "axis")


@pytest.fixture(scope="module")
def x():
    return images(8, seed=0)


def test_w8a8_per_channel_digits_cnn(x):
    model = calibrate(digits_cnn(8), x)
    proto = export_onnx_qcdq(model, x)
    assert ops(proto) == digits_nodes(ACT_8)
    assert {n.domain for n in proto.graph.node} == {""}
    assert [(o.domain, o.version) for o in proto.opset_import] == [("", 18)]
    # The batch dimension is symbolic; the rest is the example's.
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and [d.dim_value for d in dims[1:]] == [1, 8, 8]
    # conv1's weight: int8 integers along output channels (axis 0), one scale per channel.
    weight_dqs = [
        n for n in nodes_of(proto, "DequantizeLinear") if n.input[0].endswith("int_value_0")
    ]
    assert len(weight_dqs) == 3
    (tensor, ints), scale, zero_point, axis = dequantized(proto, weight_dqs[0])
    assert tensor.data_type == onnx.TensorProto.INT8 and ints.shape == (16, 1, 3, 3)
    assert axis == 0 and scale.shape == (16,) and zero_point.dtype == np.int8
    assert np.all(zero_point == 0) and np.abs(ints).max() <= 127  # narrow signed 8-bit
    expected = model.conv1.quant_weight()
    rebuilt = (ints.astype(np.float32) - zero_point[:, None, None, None]) * scale[
        :, None, None, None
    ]
    assert np.array_equal(rebuilt, expected.value.detach().numpy())
    # Activations: uint8 QuantizeLinear -> DequantizeLinear, the scale the quantizer reports.
    q = nodes_of(proto, "QuantizeLinear")[1]
    assert producer(proto, q.input[0]).op_type == "Relu"
    q_scale = initializer(proto, q.input[1])[1]
    q_zero_point = initializer(proto, q.input[2])[1]
    assert q_scale.shape == () and q_zero_point.dtype == np.uint8 and q_zero_point == 0
    assert q_scale == model.relu1.act_quant.scale().item()


def test_w4a4_activations_are_clipped_to_their_bit_width(x):
    model = calibrate(digits_cnn(4, per_channel=False), x)
    proto = export_onnx_qcdq(model, x)
    assert ops(proto) == digits_nodes(ACT_BELOW_8)
    for clip in nodes_of(proto, "Clip"):
        low, high = (initializer(proto, name)[1] for name in clip.input[1:])
        assert (low.dtype, int(low), int(high)) == (np.uint8, 0, 15)  # unsigned 4 bits
        assert producer(proto, clip.input[0]).op_type == "QuantizeLinear"
    for dq in nodes_of(proto, "DequantizeLinear"):
        if dq.input[0].endswith("int_value_0"):
            (_, ints), scale, _, axis = dequantized(proto, dq)
            # Narrow signed 4-bit integers, one scale per tensor.
            assert ints.dtype == np.int8 and np.abs(ints).max() <= 7 and axis is None
            assert scale.shape == ()


def test_int32_bias_and_quant_tensor_flow(x):
    """Int32Bias takes input scale x weight scale from the QuantTensors between the layers; it is
    exported as int32 integers on that scale."""
    model = digits_cnn(8, return_quant_tensor=True)
    model.conv2 = qnn.QuantConv2d(
        16,
        32,
        3,
        padding=1,
        weight_quant=bq.Int8WeightPerChannelFloat,
        bias_quant=bq.Int32Bias,
        return_quant_tensor=True,
    )
    calibrate(model, x)
    proto = export_onnx_qcdq(model, x)
    conv2 = nodes_of(proto, "Conv")[1]
    bias_dq = producer(proto, conv2.input[2])
    assert bias_dq.op_type == "DequantizeLinear" and len(bias_dq.input) == 2  # int32: no zp
    (tensor, ints), scale, _, axis = dequantized(proto, bias_dq)
    assert tensor.data_type == onnx.TensorProto.INT32 and ints.shape == (32,) and axis == 0
    with torch.no_grad():
        quant_input = model.relu1(model.conv1(model.inp(x)))
        quant_weight = model.conv2.quant_weight()
        quant_bias = model.conv2.bias_quant(model.conv2.bias, quant_input, quant_weight)
    assert np.array_equal(scale, quant_bias.scale.reshape(-1).numpy())
    assert np.array_equal(ints.astype(np.float32) * scale, quant_bias.value.numpy())
    assert model.conv2.return_quant_tensor  # restored after export


def test_seed_003_quantizers_are_narrow_signed_int8(x):
    weight = {"weight_quant": bq.Int8WeightPerChannelMaxAbs}
    act = {"act_quant": bq.Int8ActPerTensorEma}
    model = calibrate(DigitsCNN(weight, act), x)
    proto = export_onnx_qcdq(model, x)
    assert ops(proto) == digits_nodes(ACT_BELOW_8)  # narrow range: Clip even at 8 bits
    for clip in nodes_of(proto, "Clip"):
        low, high = (int(initializer(proto, name)[1]) for name in clip.input[1:])
        assert (low, high) == (-127, 127)
    (_, ints), scale, _, axis = dequantized(proto, nodes_of(proto, "DequantizeLinear")[1])
    assert axis == 0 and scale.shape == (16,) and np.abs(ints).max() == 127  # max|w_c| -> 127
    threshold = model.inp.act_quant.fused_activation_quant_proxy.tensor_quant.threshold
    q_scale = initializer(proto, nodes_of(proto, "QuantizeLinear")[0].input[1])[1]
    assert np.isclose(q_scale, threshold.item() / 127, rtol=1e-6)


def test_binary_activation_is_computed_and_binary_weights_are_integers():
    model = nn.Sequential(
        qnn.QuantIdentity(act_quant=bq.SignedBinaryActPerTensorConst),
        qnn.QuantLinear(8, 4, weight_quant=bq.SignedBinaryWeightPerTensorConst),
    ).eval()
    proto = export_onnx_qcdq(model, torch.randn(2, 8))
    # sign(x) * scale as torch's exporter writes it (the negated scale folded to a constant).
    assert ops(proto) == ["GreaterOrEqual", "Where", "DequantizeLinear", "Gemm"]
    (_, ints), scale, _, _ = dequantized(proto, nodes_of(proto, "DequantizeLinear")[0])
    assert set(np.unique(ints)) <= {-1, 1} and scale == np.float32(0.1)


def test_ternary_quantizers_are_narrow_2_bit_integers():
    model = nn.Sequential(
        qnn.QuantIdentity(act_quant=bq.SignedTernaryActPerTensorConst),
        qnn.QuantLinear(8, 4, weight_quant=bq.SignedTernaryWeightPerTensorConst),
    ).eval()
    proto = export_onnx_qcdq(model, torch.randn(2, 8))
    assert ops(proto) == [*ACT_BELOW_8, "DequantizeLinear", "Gemm"]
    low, high = (int(initializer(proto, n)[1]) for n in nodes_of(proto, "Clip")[0].input[1:])
    assert (low, high) == (-1, 1)


def test_unquantized_layers_export_as_float_ops():
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        qnn.QuantReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        qnn.QuantLinear(4, 2, weight_quant=None),
    ).eval()
    proto = export_onnx_qcdq(model, torch.randn(2, 3, 4, 4))
    assert ops(proto) == [
        "Conv",
        "BatchNormalization",
        "Relu",
        "QuantizeLinear",
        "DequantizeLinear",
        "MaxPool",
        "Reshape",
        "Gemm",
    ]
    conv_weight = initializer(proto, nodes_of(proto, "Conv")[0].input[1])[0]
    assert conv_weight.data_type == onnx.TensorProto.FLOAT


def test_16_bit_activations_need_opset_21():
    model = nn.Sequential(qnn.QuantIdentity(bit_width=12), qnn.QuantLinear(8, 4)).eval()
    x = torch.randn(2, 8)
    with pytest.raises(ExportError, match="opset 21"):
        export_onnx_qcdq(model, x)
    proto = export_onnx_qcdq(model, x, opset_version=21)
    # onnxruntime has no int16 Clip: the float input is clipped to the 12-bit range's ends.
    assert ops(proto) == ["Max", "Min", "QuantizeLinear", "DequantizeLinear"] + [
        "DequantizeLinear",
        "Gemm",
    ]
    assert [(o.domain, o.version) for o in proto.opset_import] == [("", 21)]
    q = nodes_of(proto, "QuantizeLinear")[0]
    assert initializer(proto, q.input[2])[0].data_type == onnx.TensorProto.INT16
    scale = model[0].act_quant.scale().item()
    high = initializer(proto, nodes_of(proto, "Min")[0].input[1])[1]
    assert high == np.float32(2047 * scale)


def test_file_is_written_and_checks(tmp_path, x):
    model = calibrate(digits_cnn(8), x)
    path = tmp_path / "digits.onnx"
    proto = export_onnx_qcdq(model, x, path)
    loaded = onnx.load(path)
    onnx.checker.check_model(loaded, full_check=True)
    assert ops(loaded) == ops(proto)


def test_a_weight_quantizer_shared_by_two_layers():
    """One proxy, one scale over both weights: each layer's own integers, on that scale."""
    first = qnn.QuantLinear(8, 8)
    second = qnn.QuantLinear(8, 4, weight_quant=first.weight_quant)
    model = nn.Sequential(qnn.QuantIdentity(), first, qnn.QuantReLU(), second).eval()
    proto = export_onnx_qcdq(model, torch.randn(4, 8))
    weight_dqs = [n for n in nodes_of(proto, "DequantizeLinear") if "int_value" in n.input[0]]
    shapes = [dequantized(proto, dq)[0][1].shape for dq in weight_dqs]
    assert shapes == [(8, 8), (4, 8)]
    for dq, layer in zip(weight_dqs, (first, second)):
        (_, ints), scale, _, _ = dequantized(proto, dq)
        assert scale == first.quant_weight().scale.item()
        expected = layer.weight_quant(layer.weight).value.detach().numpy()
        assert np.array_equal(ints.astype(np.float32) * scale, expected)
