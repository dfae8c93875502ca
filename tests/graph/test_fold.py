"""graph.merge_bn: BatchNorms folded into the layers they follow, found by tracing. The
reference is the model itself before folding (eval mode), and the folded weights written out."""

import pytest
import torch
from graph_models import ResNet18
from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.graph import Quantizer, merge_bn


def _randomize_batch_norms(model, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=g))
            m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            m.weight.data.copy_(torch.randn(c, generator=g))
            m.bias.data.copy_(torch.randn(c, generator=g))
    return model.to(dtype)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_resnet18_folds_every_conv_batch_norm_pair(dtype, tolerance):
    torch.manual_seed(0)
    model = _randomize_batch_norms(ResNet18(), dtype).eval()
    x = torch.randn(2, 3, 32, 32, dtype=dtype)
    with torch.no_grad():
        before = model(x)
    folded = merge_bn(model, x)
    assert len(folded) == 20  # every conv, the downsample ones included
    assert ("layer2.0.downsample.0", "layer2.0.downsample.1") in folded
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    with torch.no_grad():
        after = model(x)
    assert ((after - before).abs().max() / before.abs().max()).item() <= tolerance


def test_folded_weights_are_the_formula():
    conv, bn = nn.Conv2d(2, 3, 1, bias=False), nn.BatchNorm2d(3)
    _randomize_batch_norms(nn.Sequential(bn))
    model = nn.Sequential(conv, bn).eval()
    w, mean, var, gamma, beta = (
        t.detach().clone()
        for t in (conv.weight, bn.running_mean, bn.running_var, bn.weight, bn.bias)
    )
    merge_bn(model, torch.randn(1, 2, 4, 4))
    scale = gamma / torch.sqrt(var + bn.eps)
    assert torch.allclose(model[0].weight, w * scale.view(-1, 1, 1, 1), rtol=1e-6, atol=0)
    assert torch.allclose(model[0].bias, beta - mean * scale, rtol=1e-6, atol=1e-7)
    assert isinstance(model[1], nn.Identity)


def test_a_layer_read_elsewhere_or_a_training_batch_norm_is_not_folded():
    class TwoReaders(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(2, 2, 1), nn.BatchNorm2d(2)

        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y  # the conv's output is also read by the add

    model = TwoReaders().eval()
    assert merge_bn(model, torch.randn(1, 2, 3, 3)) == []
    with pytest.raises(RuntimeError, match="merge_bn: bn in training mode"):
        merge_bn(TwoReaders(), torch.randn(1, 2, 3, 3))


def test_fold_then_quantize():
    torch.manual_seed(0)
    model = _randomize_batch_norms(ResNet18()).eval()
    x = torch.randn(2, 3, 32, 32)
    merge_bn(model, x)
    Quantizer(model, bits_weights=8).prepare_model()
    assert (
        isinstance(model.layer1[0].conv1, qnn.QuantConv2d)
        and model.layer1[0].conv1.bias is not None
    )
    model(x).sum().backward()
