"""torch.export: the torch QCDQ program (quantized_decomposed ops, saved and run in a process that
never imports brevitas_cpp), and torch.export.export of the training model itself (the C++ ops
traced through their Meta kernels) against eager mode, in training and eval mode."""

import copy
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
import torch
from export_models import DigitsCNN, calibrate, digits_cnn, images, quantized_resnet

import brevitas_cpp.quant as bq
from brevitas_cpp import config
from brevitas_cpp.export import export_torch_qcdq

# torch.export.export of the model itself traces plain modules only (the QCDQ exports set the
# TorchScript blocks aside themselves).
eager_blocks_only = pytest.mark.skipif(
    config.JIT_ENABLED, reason="BREVITAS_JIT=1 makes the quantizer blocks TorchScript modules"
)

# Everything the saved program needs: torch, and the module that registers quantized_decomposed.
RUN_SAVED = textwrap.dedent("""
    import sys
    import torch
    import torch.ao.quantization.fx._decomposed  # registers torch.ops.quantized_decomposed
    program = torch.export.load(sys.argv[1])
    torch.save(program.module()(torch.load(sys.argv[2])), sys.argv[3])
    assert not [m for m in sys.modules if m.startswith("brevitas_cpp")], "brevitas_cpp imported"
""")


def op_counts(program):
    return Counter(str(n.target) for n in program.graph.nodes if n.op == "call_function")


def test_torch_qcdq_program_runs_without_brevitas_cpp(tmp_path):
    model = calibrate(digits_cnn(4), images(32, seed=0))
    path = tmp_path / "digits.pt2"
    program = export_torch_qcdq(model, images(4, seed=1), path)
    assert op_counts(program) == {
        "quantized_decomposed.quantize_per_tensor.default": 3,  # input, relu1, relu2
        "quantized_decomposed.dequantize_per_tensor.default": 3,
        "quantized_decomposed.dequantize_per_channel.default": 3,  # conv1, conv2, fc weights
        "aten.conv2d.default": 2,
        "aten.relu.default": 2,
        "aten.avg_pool2d.default": 1,
        "aten.flatten.using_ints": 1,
        "aten.linear.default": 1,
    }
    # Weights are stored integers.
    ints = [t for name, t in program.state_dict.items() if "int_value" in name]
    assert len(ints) == 3 and all(t.dtype == torch.int8 for t in ints)
    x = images(64, seed=2)  # another batch size: the batch dimension is dynamic
    torch.save(x, tmp_path / "x.pt")
    # -P: not the source tree on sys.path, so nothing of brevitas_cpp can come in by accident.
    run = [sys.executable, "-P", "-c", RUN_SAVED, str(path), str(tmp_path / "x.pt")]
    result = subprocess.run(
        [*run, str(tmp_path / "y.pt")], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    y = torch.load(tmp_path / "y.pt")
    with torch.no_grad():
        expected = model(x)
    assert torch.equal(y, program.module()(x))
    # quantize_per_tensor multiplies by 1 / scale where brevitas_cpp divides by the scale: a
    # value right at a rounding boundary may land one step away (none did here).
    assert torch.allclose(y, expected, rtol=0, atol=1e-5 * expected.abs().max().item())
    print("torch QCDQ vs eager: bit-exact fraction", (y == expected).float().mean().item())


def test_export_leaves_the_model_as_it_was():
    model = digits_cnn(8, return_quant_tensor=True)
    calibrate(model, images(32, seed=0))
    model.train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    export_torch_qcdq(model, images(4, seed=1))
    assert model.training and all(m.training for m in model.modules())
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    for module in model.modules():
        assert not getattr(module, "export_mode", False)
        assert getattr(module, "export_handler", None) is None
    assert model.conv1.return_quant_tensor and model.inp.return_quant_tensor


def test_graph_quantized_resnet_torch_qcdq():
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    model = quantized_resnet(x)
    program = export_torch_qcdq(model, x)
    counts = op_counts(program)
    # 7 weight layers; the stem ReLU, 2 ReLUs per block and the 4 operands of the residual adds.
    assert counts["quantized_decomposed.quantize_per_tensor.default"] == 9
    assert not [t for t in counts if t.startswith("brevitas_cpp")]
    check = torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(check)
    assert torch.allclose(program.module()(check), expected, atol=1e-5)


def _steps(model, reference, steps, seed=0):
    """Runs both in training mode on the same batches, with a backward pass; compares outputs,
    gradients and state after each step."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.rand(4, 1, 8, 8, generator=generator)
        y, y_ref = model(x), reference(x)
        assert torch.equal(y, y_ref)
        y.square().sum().backward()
        y_ref.square().sum().backward()
        grads = {k: p.grad for k, p in model.named_parameters()}
        for name, p in reference.named_parameters():
            if name in grads:
                assert torch.equal(grads[name], p.grad), name
        state, ref_state = model.state_dict(), reference.state_dict()
        for key, value in ref_state.items():
            assert torch.equal(state[key], value), key


@eager_blocks_only
def test_torch_export_of_training_model_with_ema_thresholds():
    """The EMA thresholds are buffers the C++ op updates in place: the exported program keeps
    the in-place op (torch.export's default IR is not functionalized), so each call of the
    program's module moves its own buffers as eager mode moves the model's."""
    weight = {"weight_quant": bq.Int8WeightPerChannelMaxAbs}
    act = {"act_quant": bq.Int8ActPerTensorEma}
    model = DigitsCNN(weight, act).train()
    reference = copy.deepcopy(model)
    program = torch.export.export(copy.deepcopy(model), (images(4, seed=1),))
    assert "brevitas_cpp.quantization_int8.default" in op_counts(program)
    _steps(program.module(), reference, steps=4)
    iterations = [b for k, b in reference.named_buffers() if k.endswith("iteration")]
    assert iterations and all(int(i) == 4 for i in iterations)


@eager_blocks_only
def test_torch_export_of_training_model_after_warm_up():
    """Brevitas's runtime-statistics scales count their warm-up in Python: torch.export bakes in
    the phase the model is in, so export a training model after collect_stats_steps."""
    model = digits_cnn(8)  # collect_stats_steps=2
    calibrate(model, images(32, seed=0), steps=3)
    model.train()
    reference = copy.deepcopy(model)
    program = torch.export.export(copy.deepcopy(model), (images(4, seed=1),))
    # The activation quantizers' learned phase: their plan's one op (core/quant/plan).
    assert "brevitas_cpp.learned_int_quant.default" in op_counts(program)
    _steps(program.module(), reference, steps=3)


@eager_blocks_only
def test_torch_export_of_eval_model():
    model = calibrate(digits_cnn(4), images(32, seed=0))
    program = torch.export.export(model, (images(4, seed=1),))
    x = images(4, seed=3)
    with torch.no_grad():
        assert torch.equal(program.module()(x), model(x))


@eager_blocks_only
def test_torch_export_runs_quantizers_inserted_by_graph():
    """brevitas_cpp.graph's inserted quantizers find their operations under torch.export (whose
    tracer calls submodules through stand-ins: the scope tracker looks through them)."""
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    model = quantized_resnet(x)
    program = torch.export.export(model, (x,))
    # 7 weight quantizers (the stock one: the fused abs_max_int_quant) + 5 ReLU calls + 4 add
    # operands.
    counts = op_counts(program)
    assert counts["brevitas_cpp.abs_max_int_quant.default"] == 7
    assert counts["brevitas_cpp.int_quant.default"] == 9
    with torch.no_grad():
        assert torch.equal(program.module()(x), model(x))
