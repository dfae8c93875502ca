"""Quant layers and a QAT run on a GPU (skipped without one).

The reference is the same model on the CPU, whose layers the CPU suites check against Brevitas
and hand-built compositions. Models run in float64 so that cuDNN's and the CPU's convolutions
agree to far below a quantization step; a quantizer input can still land on the other side of
a rounding tie, so quantized outputs may differ by one step in a few elements."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import brevitas_cpp
import brevitas_cpp.nn as qnn

HAS_CUDA = torch.cuda.is_available() and brevitas_cpp.build_info()["cuda"]
pytestmark = pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU and a CUDA build of brevitas_cpp")


class Net(nn.Module):
    """Input quantizer, per-channel and per-tensor weights, runtime-statistics activations,
    a quantized residual add, pooling and a linear head."""

    def __init__(self, stats_steps: int = 4):
        super().__init__()
        self.inp = qnn.QuantIdentity(bit_width=8, collect_stats_steps=stats_steps)
        self.conv1 = qnn.QuantConv2d(
            3, 8, 3, padding=1, weight_bit_width=4, weight_scaling_per_output_channel=True
        )
        self.bn1 = nn.BatchNorm2d(8)
        self.relu1 = qnn.QuantReLU(bit_width=6, collect_stats_steps=stats_steps)
        self.conv2 = qnn.QuantConv2d(8, 8, 3, padding=1, weight_bit_width=8)
        self.add = qnn.QuantEltwiseAdd(
            input_bit_width=8,
            output_bit_width=8,
            input_collect_stats_steps=stats_steps,
            output_collect_stats_steps=stats_steps,
        )
        self.relu2 = qnn.QuantReLU(bit_width=8, collect_stats_steps=stats_steps)
        self.fc = qnn.QuantLinear(8, 5, bias=True, weight_bit_width=8)

    def forward(self, x):
        x = self.inp(x)
        y = self.relu1(self.bn1(self.conv1(x)))
        y = self.relu2(self.add(self.conv2(y), y))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, 8, 8, generator=g, dtype=torch.float64)
    y = (x[:, 0].mean((1, 2)) > 0).long() + 2 * (x[:, 1].mean((1, 2)) > 0).long()
    return x, y


def train(model, device, steps=30):
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = (t.to(device) for t in data())
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    model.eval()
    xt, yt = (t.to(device) for t in data(256, seed=1))
    with torch.no_grad():
        acc = (model(xt).argmax(1) == yt).double().mean()
    return (
        torch.stack(losses).cpu(),
        float(acc),
        {k: v.cpu() for k, v in model.state_dict().items()},
    )


@pytest.fixture(autouse=True)
def exact_gpu_math():
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def test_forward_on_gpu_matches_cpu():
    torch.manual_seed(0)
    cpu = Net().double()
    gpu = copy.deepcopy(cpu).cuda()
    x, _ = data()
    for _ in range(3):  # statistics phase, then (stats_steps=4) learned scales
        want = cpu(x)
        got = gpu(x.cuda()).cpu()
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_qat_on_gpu_ends_where_cpu_does():
    torch.manual_seed(0)
    model = Net().double()
    losses_cpu, acc_cpu, state_cpu = train(copy.deepcopy(model), "cpu")
    losses_gpu, acc_gpu, state_gpu = train(copy.deepcopy(model), "cuda")
    # The first steps agree to the convolutions' precision; later a quantizer input may land on
    # the other side of a rounding tie and the runs drift apart by a little.
    torch.testing.assert_close(losses_gpu[:5], losses_cpu[:5], rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(losses_gpu, losses_cpu, rtol=1e-2, atol=1e-4)
    assert abs(acc_gpu - acc_cpu) <= 2 / 256 + 1e-12
    assert acc_cpu > 0.5  # it learned something (4 classes)
    assert state_gpu.keys() == state_cpu.keys()
    for k in state_cpu:
        torch.testing.assert_close(state_gpu[k], state_cpu[k], rtol=1e-2, atol=1e-3, msg=k)


def test_state_dict_loads_into_a_model_on_the_gpu():
    """Loading rebuilds the quantizers (REINIT_ON_STATE_DICT_LOAD): they stay on the GPU."""
    torch.manual_seed(0)
    trained = Net(stats_steps=1)
    x, _ = data()
    trained.double()(x)
    trained(x)
    model = Net(stats_steps=1).double().cuda()
    model.load_state_dict(trained.state_dict())
    trained.eval()
    model.eval()
    torch.testing.assert_close(model(x.cuda()).cpu(), trained(x), rtol=1e-6, atol=1e-6)
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        assert t.device.type == "cuda", name


def test_quant_tensor_arithmetic_on_gpu():
    torch.manual_seed(0)
    a = qnn.QuantIdentity(bit_width=8, return_quant_tensor=True).cuda()
    b = qnn.QuantIdentity(bit_width=8, return_quant_tensor=True).cuda()
    x = torch.randn(4, 6, device="cuda")
    qa, qb = a(x), b(x * 2)
    for q in (qa, qb):
        assert q.value.device.type == "cuda" and q.scale.device.type == "cuda"
        assert q.bit_width.device.type == "cuda"
    s = qa + qa
    assert s.value.device.type == "cuda"
    torch.testing.assert_close(s.value, qa.value * 2)
    m = qa * qb
    torch.testing.assert_close(m.value, qa.value * qb.value)
    torch.testing.assert_close(m.scale, qa.scale * qb.scale)
    assert torch.equal(qa.int().cpu(), torch.round(qa.value / qa.scale).cpu().to(qa.int().dtype))


def test_learned_step_has_no_host_device_sync():
    """Once scales are learned, a training step never waits for the GPU (capturable by CUDA graphs)."""
    torch.manual_seed(0)
    model = Net(stats_steps=2).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = data()
    x, y = x.float().cuda(), y.cuda()

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(4):  # statistics, then the switch to learned scales
        step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_learned_forward_backward_capture_in_a_cuda_graph():
    torch.manual_seed(0)
    model = Net(stats_steps=2).cuda()
    x = torch.randn(16, 3, 8, 8, device="cuda")
    for _ in range(4):
        model(x).sum().backward()
    model.zero_grad(set_to_none=True)
    graphed = torch.cuda.make_graphed_callables(model, (x.clone().requires_grad_(),))
    xr = x.clone().requires_grad_()
    out = graphed(xr)
    out.sum().backward()
    want = model(x)
    torch.testing.assert_close(out, want)
    assert xr.grad is not None and torch.isfinite(xr.grad).all()
