"""export_int_weights: each layer's integers, scales, zero points and bit widths, against the
layers' own quantized tensors, and through torch.save."""

import io

import torch
from export_models import calibrate, digits_cnn, images
from torch import nn

import brevitas_cpp.quant as bq
from brevitas_cpp import nn as qnn
from brevitas_cpp.export import export_int_weights


def rebuilt(entry, ndim):
    """(int - zero_point) * scale, along the entry's axis."""
    shape = [1] * ndim
    if entry["axis"] is not None:
        shape[entry["axis"]] = -1
    zero_point = entry["zero_point"].reshape(shape)
    return (entry["int"].to(torch.int64) - zero_point).float() * entry["scale"].reshape(shape)


def test_weights_without_inputs():
    model = calibrate(digits_cnn(4), images(32, seed=0))
    view = export_int_weights(model)
    assert sorted(view) == ["conv1", "conv2", "fc"]  # no input: weights only (biases are float)
    for name in view:
        layer = getattr(model, name)
        entry = view[name]["weight"]
        assert view[name]["type"] == type(layer).__name__
        assert entry["int"].dtype == torch.int8 and entry["bit_width"] == 4
        assert (entry["qmin"], entry["qmax"], entry["axis"]) == (-7, 7, 0)
        assert entry["signed"] and entry["narrow_range"]
        expected = layer.quant_weight().value
        assert torch.equal(rebuilt(entry, expected.dim()), expected)


def test_activations_and_int32_biases_with_inputs():
    model = nn.Sequential(
        qnn.QuantIdentity(act_quant=bq.Uint8ActPerTensorFloat, return_quant_tensor=True),
        qnn.QuantLinear(8, 4, bias_quant=bq.Int32Bias, weight_bit_width=6),
    )
    x = torch.rand(16, 8)
    calibrate(model, x)
    view = export_int_weights(model, x)
    act = view["0"]["act"]
    assert (act["bit_width"], act["signed"], act["qmin"], act["qmax"]) == (8, False, 0, 255)
    assert act["scale"] == model[0].act_quant.scale()
    bias = view["1"]["bias"]
    assert bias["int"].dtype == torch.int32 and bias["bit_width"] == 32
    # Int32Bias: the accumulator scale, input scale x weight scale.
    weight_scale = model[1].quant_weight().scale
    assert torch.allclose(bias["scale"], (act["scale"] * weight_scale).reshape(()))
    buffer = io.BytesIO()
    torch.save(view, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert torch.equal(loaded["1"]["weight"]["int"], view["1"]["weight"]["int"])
    assert loaded["1"]["weight"]["int"].dtype == torch.int8
