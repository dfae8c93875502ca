"""ATen ops the hand-written ONNX translation table lacked (expand, chunk, arange, indexing with
a tensor, group_norm, scaled_dot_product_attention, dropout in eval), between quantized layers:
torch's ONNX exporter translates them, the quantizers stay QCDQ, and onnxruntime agrees with
PyTorch."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from brevitas_cpp import nn as qnn
from brevitas_cpp.export import check_onnx_qcdq, export_onnx_qcdq

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


class AnyOps(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = qnn.QuantIdentity()
        self.qk = qnn.QuantLinear(8, 16, bias=True)
        self.norm = nn.GroupNorm(2, 8)
        self.drop = nn.Dropout(0.5)
        self.relu = qnn.QuantReLU()
        self.out = qnn.QuantLinear(8, 3, bias=True)

    def forward(self, x):
        h = self.qk(self.inp(x))  # [B, T, 16]
        q, k = h.chunk(2, dim=-1)
        a = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), k.unsqueeze(1))
        a = a.squeeze(1)  # [B, T, 8]
        position = torch.arange(a.shape[1], dtype=a.dtype)
        a = a + position[None, :, None].expand(a.shape[0], -1, a.shape[2]) * 0.1
        a = a[:, torch.tensor([3, 0, 2, 1])]
        a = self.norm(a.transpose(1, 2)).transpose(1, 2)
        return self.out(self.relu(self.drop(a)))


def test_ops_the_old_table_lacked(tmp_path):
    model = AnyOps().eval()
    x = torch.randn(4, 4, 8, generator=torch.Generator().manual_seed(1))
    path = tmp_path / "any_ops.onnx"
    proto = export_onnx_qcdq(model, x, path)
    onnx.checker.check_model(onnx.load(path), full_check=True)
    ops = [n.op_type for n in proto.graph.node]
    assert {n.domain for n in proto.graph.node} == {""}
    # Two activation quantizers (input, relu) and the two linear layers' integer weights.
    assert ops.count("QuantizeLinear") == 2 and ops.count("DequantizeLinear") == 4
    # chunk, attention's softmax, expand, indexing with a tensor, group norm.
    assert {"Split", "Softmax", "Expand", "GatherND", "InstanceNormalization"} <= set(ops)
    check = torch.randn(16, 4, 8, generator=torch.Generator().manual_seed(2))
    agreement = check_onnx_qcdq(model, path, check)
    print(agreement)
    assert agreement.int_elements > 0 and agreement.max_int_diff <= 1
    assert agreement.int_mismatches <= 1e-3 * agreement.int_elements
    with torch.no_grad():
        scale = model(check).abs().max().item()
    tolerance = 1e-5 if agreement.int_mismatches == 0 else 1e-2
    assert agreement.max_abs_diff <= tolerance * scale
