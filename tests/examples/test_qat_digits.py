"""Smoke test of the main-job example, examples/qat_digits.py: one float and one QAT epoch on
200 images, then the files it writes and the numbers it reports, recomputed independently from
the saved TorchScript models."""

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from brevitas_cpp import config

# The example silences these itself; this file calls torch.jit.load too.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "qat_digits.py"
SUBSET = 200


@pytest.fixture(scope="module")
def qat_digits():
    spec = importlib.util.spec_from_file_location("qat_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["qat_digits"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("qat_digits", None)


@pytest.fixture(scope="module")
def run(qat_digits, tmp_path_factory):
    out = tmp_path_factory.mktemp("qat_digits_out")
    argv = [
        "--epochs",
        "1",
        "--float-epochs",
        "1",
        "--subset",
        str(SUBSET),
        "--bits",
        "8,2",
        "--out",
        str(out),
        "--no-progress",
    ]
    if config.JIT_ENABLED:  # the example must run in the mode brevitas_cpp was imported in
        argv.append("--jit")
    return qat_digits.main(argv), out


def test_writes_table_plot_and_models(run):
    summary, out = run
    table = (out / "qat_digits_results.md").read_text()
    for name in ("float32", "W8A8", "W2A8"):
        assert f"| {name} |" in table
    assert (out / "qat_digits_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "qat_digits_results.json").is_file()
    assert summary["jit"] == config.JIT_ENABLED
    assert set(summary["quant"]) == {"W8A8", "W2A8"}
    for name, result in summary["quant"].items():
        assert Path(result["path"]) == out / f"qat_digits_{name.lower()}.pt"
        assert result["reloaded_equal"] is True
        assert result["method"].startswith(("torch.jit.script", "torch.jit.trace"))
        # Calibration (epoch 0) and one QAT epoch.
        assert len(result["accuracy_per_epoch"]) == 2


def test_saved_models_reproduce_reported_accuracy(run, qat_digits):
    # Independent of the example's own check: load each saved file in this process and
    # recount the correct test predictions on the same seeded split.
    summary, _ = run
    data = qat_digits.load_data(SUBSET)
    for name, result in summary["quant"].items():
        model = torch.jit.load(result["path"])
        with torch.no_grad():
            correct = (model(data.x_test).argmax(1) == data.y_test).sum().item()
        assert 100.0 * correct / len(data.y_test) == result["accuracy"], name


def test_model_sizes(run):
    summary, _ = run
    weights = 16 * 1 * 9 + 32 * 16 * 9 + 10 * 32 * 16
    biases = 16 + 32 + 10
    assert summary["float"]["size_bits"] == (weights + biases) * 32
    assert summary["quant"]["W8A8"]["size_bits"] == weights * 8 + biases * 32
    assert summary["quant"]["W2A8"]["size_bits"] == weights * 2 + biases * 32


def test_float_state_dict_loads_strictly(qat_digits):
    import brevitas_cpp.nn as qnn

    float_state = qat_digits.FloatNet().state_dict()
    model = qat_digits.quant_net(qnn, qat_digits.BitConfig(4, 4), collect_stats_steps=1)
    incompatible = model.load_state_dict(float_state)
    assert incompatible.missing_keys == [] and incompatible.unexpected_keys == []
    assert torch.equal(model.conv2.weight, float_state["conv2.weight"])


def test_parse_bits(qat_digits):
    parsed = qat_digits.parse_bits("8, 4,2,w3a6")
    assert [c.name for c in parsed] == ["W8A8", "W4A4", "W2A8", "W3A6"]
    for bad in ("", "x", "1", "w8a17"):
        with pytest.raises(argparse.ArgumentTypeError, match="bit width"):
            qat_digits.parse_bits(bad)


def test_device_flag_is_checked(qat_digits):
    assert qat_digits.checked_device("cpu") == torch.device("cpu")
    with pytest.raises(SystemExit, match="accepted: cpu, cuda"):
        qat_digits.checked_device("meta")
    with pytest.raises(SystemExit, match="--device 'gpu0'"):
        qat_digits.checked_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="no GPU"):
            qat_digits.checked_device("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_main_job_on_gpu_ends_where_cpu_does(qat_digits, tmp_path):
    """The same run on the GPU and on the CPU: the same accuracy, up to an image or two of the
    60 test images (cuDNN's and the CPU's convolutions differ in their last bits, which can move
    a quantizer input across a rounding tie)."""
    summaries = {}
    for device in ("cpu", "cuda"):
        argv = [
            "--epochs",
            "1",
            "--float-epochs",
            "1",
            "--subset",
            str(SUBSET),
            "--bits",
            "8",
            "--out",
            str(tmp_path / device),
            "--no-progress",
            "--device",
            device,
        ]
        if config.JIT_ENABLED:
            argv.append("--jit")
        summaries[device] = qat_digits.main(argv)
    gpu, cpu = summaries["cuda"], summaries["cpu"]
    assert gpu["device"] == "cuda"
    assert gpu["quant"]["W8A8"]["reloaded_equal"] is True
    assert abs(gpu["float"]["accuracy"] - cpu["float"]["accuracy"]) <= 2 * 100 / 60 + 1e-9
    assert (
        abs(gpu["quant"]["W8A8"]["accuracy"] - cpu["quant"]["W8A8"]["accuracy"])
        <= 2 * 100 / 60 + 1e-9
    )


def test_auto_quantized_model_trains_as_the_hand_built_one(qat_digits, tmp_path):
    """--auto: brevitas_cpp.graph.Quantizer applies the hand-built model's settings to the float
    CNN; the two are the same computation, so every epoch's accuracy is equal (the issue asks
    for 0.3 points)."""
    argv = ["--epochs", "1", "--float-epochs", "1", "--subset", str(SUBSET), "--bits", "4"]
    argv += ["--out", str(tmp_path), "--no-progress", "--auto"]
    if config.JIT_ENABLED:
        argv.append("--jit")
    summary = qat_digits.main(argv)
    assert set(summary["quant"]) == {"W4A4", "W4A4 auto"}
    hand, auto = summary["quant"]["W4A4"], summary["quant"]["W4A4 auto"]
    assert auto["accuracy_per_epoch"] == hand["accuracy_per_epoch"]
    assert auto["size_bits"] == hand["size_bits"]
    assert auto["reloaded_equal"] is True
    assert Path(auto["path"]) == tmp_path / "qat_digits_w4a4_auto.pt"


def test_ptq_reports_calibration_and_bias_correction(qat_digits, tmp_path):
    """--ptq: post-training quantization next to QAT, from brevitas_cpp.graph.calibrate."""
    argv = ["--epochs", "1", "--float-epochs", "3", "--subset", str(SUBSET), "--bits", "8"]
    argv += ["--out", str(tmp_path), "--no-progress", "--ptq"]
    if config.JIT_ENABLED:
        argv.append("--jit")
    summary = qat_digits.main(argv)
    ptq = summary["ptq"]["W8A8"]
    assert set(ptq) == {"calibration", "bias_correction"}
    # 8-bit post-training quantization stays near the float model (12.5 points: a few of the
    # subset's test images).
    for value in ptq.values():
        assert abs(value - summary["float"]["accuracy"]) <= 12.5
    assert "| W8A8 |" in (tmp_path / "qat_digits_results.md").read_text().split("QAT (%) |")[1]


def test_int8_ema_run_trains_with_the_seed_003_quantizers(qat_digits, tmp_path):
    """--int8-ema: W8A8 with seed 003's quantizers. The saved model reproduces the reported
    accuracy, and its conv1 fake-quantized weights lie on the seed's grid: per output channel,
    integers in [-127, 127] times max|w| / 127."""
    argv = ["--epochs", "1", "--float-epochs", "1", "--subset", str(SUBSET), "--bits", "8"]
    argv += ["--out", str(tmp_path), "--no-progress", "--int8-ema"]
    if config.JIT_ENABLED:
        argv.append("--jit")
    summary = qat_digits.main(argv)
    assert set(summary["quant"]) == {"W8A8", "W8A8 EMA"}
    result = summary["quant"]["W8A8 EMA"]
    assert result["reloaded_equal"] is True
    model = torch.jit.load(result["path"])
    data = qat_digits.load_data(SUBSET)
    with torch.no_grad():
        correct = (model(data.x_test).argmax(1) == data.y_test).sum().item()
    assert 100.0 * correct / len(data.y_test) == result["accuracy"]
    # The input quantizer and conv1, against the seed's formulas on the saved buffers.
    state = model.state_dict()
    t_in = state["inp.act_quant.fused_activation_quant_proxy.tensor_quant.threshold"]
    x = data.x_test[:8]
    x_q = torch.clamp(torch.round(x / (t_in / 127)), -127, 127) * (t_in / 127)
    weight = state["conv1.weight"]
    unit = weight.abs().amax(dim=(1, 2, 3), keepdim=True) / 127
    w_q = torch.clamp(torch.round(weight / unit), -127, 127) * unit
    with torch.no_grad():
        assert torch.equal(model.inp(x), x_q)
        expected = torch.nn.functional.conv2d(x_q, w_q, state["conv1.bias"], padding=1)
        assert torch.equal(model.conv1(x_q), expected)


def test_onnx_exports_run_in_onnxruntime(run):
    """Each quant model is written as standard ONNX (QuantizeLinear/DequantizeLinear, no custom
    ops), and onnxruntime's predictions on the test images are those of the model: the accuracy
    it gives, recounted here from the file, within two images of the reported one."""
    onnx = pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    summary, out = run
    data = None
    for name, result in summary["quant"].items():
        report = result["onnx"]
        path = out / f"qat_digits_{name.lower()}.onnx"
        assert Path(report["path"]) == path
        model = onnx.load(str(path))
        onnx.checker.check_model(model, full_check=True)
        ops = {node.op_type for node in model.graph.node}
        assert {"QuantizeLinear", "DequantizeLinear"} <= ops
        assert all(node.domain in ("", "ai.onnx") for node in model.graph.node)
        if data is None:
            import importlib

            data = importlib.import_module("qat_digits").load_data(SUBSET)
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        logits = session.run(None, {session.get_inputs()[0].name: data.x_test.numpy()})[0]
        correct = (torch.from_numpy(logits).argmax(1) == data.y_test).sum().item()
        accuracy = 100.0 * correct / len(data.y_test)
        assert accuracy == report["onnxruntime_accuracy"]
        assert abs(accuracy - result["accuracy"]) <= 2 * 100.0 / len(data.y_test) + 1e-9
        assert report["max_int_diff"] <= 1
