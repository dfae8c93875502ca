"""Main job: quantization-aware training (QAT) of a small CNN on scikit-learn's 8x8 digits.

1. Train a float CNN (conv 1->16, ReLU, conv 16->32, ReLU, 2x2 average pool, linear) on a
   seeded, stratified train/test split of the 1797 bundled images (no download).
2. Build the same network from brevitas_cpp.nn layers for each requested bit width (W8A8,
   W4A4, W2A8 by default), load the float state_dict into it (strict, no flags), calibrate the
   activation quantizers and fine-tune with QAT.
3. Print a table: held-out accuracy, training-step time relative to float, model size in bits.
4. Script each quantized model with torch.jit.script (in eval mode); save, reload and check
   that the reloaded model's outputs equal the original's.
5. Plot test accuracy per QAT epoch for each bit width.

Run after set-up:  python3 examples/qat_digits.py   (--help for the flags; --jit for
TorchScript quantizer blocks). Everything is written under --out (default ./out).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor, nn
from tqdm import tqdm

# brevitas_cpp is imported inside main(), after --jit has set BREVITAS_JIT: the package reads
# the variable once, at import.

SPLIT_SEED = 0  # the train/test split is fixed; --seed varies the training only
BATCH_SIZE = 32
# Activations below 4 bits lose too much on this task: a bare "2" in --bits means W2A8.
MIN_DEFAULT_ACT_BITS = 4


@dataclass(frozen=True)
class BitConfig:
    weight_bits: int
    act_bits: int

    @property
    def name(self) -> str:
        return f"W{self.weight_bits}A{self.act_bits}"


@dataclass
class RunResult:
    """What one model's training produced: accuracy per epoch and per-step timings."""

    name: str
    accuracy_per_epoch: List[float]
    step_times_s: List[float]
    size_bits: int

    @property
    def accuracy(self) -> float:
        return self.accuracy_per_epoch[-1]

    @property
    def step_time_s(self) -> float:
        # The median: robust to the first steps (allocation) and to a shared machine.
        return statistics.median(self.step_times_s)


def parse_bits(text: str) -> List[BitConfig]:
    """'8,4,2' -> W8A8, W4A4, W2A8; explicit 'w4a8' tokens are accepted too."""
    configs: List[BitConfig] = []
    for token in (t.strip().lower() for t in text.split(",") if t.strip()):
        explicit = re.fullmatch(r"w(\d+)a(\d+)", token)
        if explicit:
            weight_bits, act_bits = int(explicit.group(1)), int(explicit.group(2))
        elif token.isdigit():
            weight_bits = int(token)
            act_bits = weight_bits if weight_bits >= MIN_DEFAULT_ACT_BITS else 8
        else:
            raise argparse.ArgumentTypeError(
                f"{token!r} is neither a bit width (e.g. 4) nor 'wXaY' (e.g. w2a8)"
            )
        for what, bits in (("weight", weight_bits), ("activation", act_bits)):
            # Signed narrow-range weights need 2 bits to hold anything but zero.
            if not 2 <= bits <= 16:
                raise argparse.ArgumentTypeError(
                    f"{what} bit width {bits} in {token!r} is outside the accepted range [2, 16]"
                )
        configs.append(BitConfig(weight_bits, act_bits))
    if not configs:
        raise argparse.ArgumentTypeError(f"{text!r} names no bit width")
    return configs


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="QAT of a small CNN on the 8x8 digits with brevitas_cpp quant layers."
    )
    parser.add_argument(
        "--epochs",
        type=positive_int,
        default=8,
        help="QAT fine-tuning epochs per bit width (default 8)",
    )
    parser.add_argument(
        "--float-epochs",
        type=positive_int,
        default=40,
        help="training epochs of the float model (default 40)",
    )
    parser.add_argument(
        "--bits",
        type=parse_bits,
        default=parse_bits("8,4,2"),
        help="bit widths: '8,4,2' means W8A8, W4A4, W2A8 (activations below "
        "4 bits stay at 8); 'w4a8' tokens set both (default 8,4,2)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("out"),
        help="output folder for the table, plot and scripted models (default ./out)",
    )
    parser.add_argument(
        "--jit", action="store_true", help="BREVITAS_JIT=1: quantizer blocks as TorchScript modules"
    )
    parser.add_argument(
        "--subset",
        type=positive_int,
        default=None,
        help="use only the first N images (quick smoke runs)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of initialisation and batch order (the split is fixed)",
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="torch intra-op threads (default 1: the tensors are tiny, and on "
        "a busy 2-core machine 2 threads made a QAT epoch 9x slower)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.add_argument(
        "--ptq",
        action="store_true",
        help="also quantize without training: calibration of the activation scales and bias "
        "correction over one pass of the training images (brevitas_cpp.graph.calibrate)",
    )
    parser.add_argument(
        "--auto",
        action="store_true",
        help="also quantize the float CNN automatically (brevitas_cpp.graph.Quantizer, the same "
        "settings as the hand-built model) and train it the same way",
    )
    parser.add_argument(
        "--int8-ema",
        action="store_true",
        help="also train W8A8 with seed 003's quantizers: per-channel max-abs weight thresholds, "
        "EMA max-abs activation thresholds (brevitas_cpp.quant.int8_ema)",
    )
    parser.add_argument(
        "--fp8",
        action="store_true",
        help="also train with OCP FP8 E4M3 weights (per-channel scales) and activations "
        "(brevitas_cpp.quant.experimental.float_quant_ocp); not exported to ONNX (QCDQ is "
        "integer only)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="where to train: cpu (default) or cuda (needs a GPU and brevitas_cpp built "
        "with its CUDA kernels)",
    )
    return parser.parse_args(argv)


def checked_device(name: str) -> torch.device:
    """The torch.device for --device, or an error saying why it cannot be used here."""
    import brevitas_cpp

    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise SystemExit(f"--device {name!r}: {exc}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(
                "--device cuda: torch sees no GPU here (torch.cuda.is_available() is False)"
            )
        if not brevitas_cpp.build_info()["cuda"]:
            raise SystemExit(
                "--device cuda: this brevitas_cpp was built without its CUDA kernels "
                "(build with a CUDA torch and nvcc; see README, 'GPU')"
            )
    elif device.type != "cpu":
        raise SystemExit(f"--device {name!r}: accepted: cpu, cuda, cuda:N")
    return device


def import_brevitas_cpp(jit: bool):
    """Import brevitas_cpp.nn, with TorchScript quantizer blocks if `jit` (or if BREVITAS_JIT=1
    is already in the environment). The package reads BREVITAS_JIT once, at import, so --jit
    after an import without it is an error rather than a silent fallback."""
    if jit and "brevitas_cpp" not in sys.modules:
        os.environ["BREVITAS_JIT"] = "1"
    import brevitas_cpp.nn as qnn
    from brevitas_cpp import config

    if jit and not config.JIT_ENABLED:
        raise RuntimeError(
            "--jit: brevitas_cpp was already imported without BREVITAS_JIT (or PYTORCH_JIT=0 "
            "disables TorchScript); run in a fresh process"
        )
    return qnn, config.JIT_ENABLED


# ---------------------------------------------------------------------------------------------
# Data


@dataclass
class Digits:
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor


def load_data(subset: Optional[int]) -> Digits:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    if subset is not None:
        images, labels = images[:subset], labels[:subset]
    # Pixels are 0..16: scale to [0, 1], which the unsigned input quantizer covers exactly.
    images = (images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    x_train, x_test, y_train, y_test = train_test_split(
        images,
        labels,
        test_size=0.3,
        random_state=SPLIT_SEED,
        stratify=labels if subset is None else None,
    )
    return Digits(
        torch.from_numpy(x_train),
        torch.from_numpy(y_train).long(),
        torch.from_numpy(x_test),
        torch.from_numpy(y_test).long(),
    )


def batches(n: int, generator: torch.Generator) -> List[Tensor]:
    return list(torch.randperm(n, generator=generator).split(BATCH_SIZE))


# ---------------------------------------------------------------------------------------------
# Models: the float network and its quantized twin use the same attribute names, so the float
# state_dict loads into the quantized one as it is.


class FloatNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool = nn.AvgPool2d(2)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = self.relu1(self.conv1(x))
        x = self.pool(self.relu2(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


def quant_net(qnn, bits: BitConfig, collect_stats_steps: int) -> nn.Module:
    """FloatNet with quantized input, weights and activations (biases stay float, as in
    Brevitas's default layers). Per-channel weight scales: at 2 and 4 bits one scale for
    a whole layer wastes most of the levels of the channels with small weights."""
    from brevitas_cpp.quant import Int8WeightPerChannelFloat, Uint8ActPerTensorFloat

    w, a = bits.weight_bits, bits.act_bits
    weight = dict(weight_quant=Int8WeightPerChannelFloat, weight_bit_width=w)
    # Activation scales: statistics over the calibration passes, then learned (Brevitas's
    # default warm-up is 300 training steps, longer than a short QAT run).
    act = dict(bit_width=a, collect_stats_steps=collect_stats_steps)
    # The input is in [0, 1]: unsigned, so no level is spent on negative values.
    return quant_cnn(qnn, weight, act, dict(act, act_quant=Uint8ActPerTensorFloat))


def int8_ema_net(qnn) -> nn.Module:
    """FloatNet with seed 003's int8 quantizers (brevitas_cpp.quant.int8_ema): weights with a
    per-output-channel max-abs threshold, the input and ReLU outputs with an exponential moving
    average of their max-abs; symmetric signed ranges [-127, 127], straight-through gradients."""
    from brevitas_cpp.quant import Int8ActPerTensorEma, Int8WeightPerChannelMaxAbs

    act = dict(act_quant=Int8ActPerTensorEma)
    return quant_cnn(qnn, dict(weight_quant=Int8WeightPerChannelMaxAbs), act, act)


def fp8_net(qnn, collect_stats_steps: int) -> nn.Module:
    """FloatNet with OCP FP8 E4M3 minifloats: per-output-channel weight scales, and per-tensor
    activation scales learned after collect_stats_steps of max statistics."""
    from brevitas_cpp.quant.experimental.float_quant_ocp import (
        Fp8e4m3OCPActPerTensorFloat,
        Fp8e4m3OCPWeightPerChannelFloat,
    )

    act = dict(act_quant=Fp8e4m3OCPActPerTensorFloat, collect_stats_steps=collect_stats_steps)
    return quant_cnn(qnn, dict(weight_quant=Fp8e4m3OCPWeightPerChannelFloat), act, act)


def quant_cnn(qnn, weight: Dict[str, Any], act: Dict[str, Any], input_act: Dict[str, Any]):
    """FloatNet's layers as quant layers with these keyword arguments."""

    # Defined here because brevitas_cpp is only imported once main() has read --jit.
    class QuantNet(FloatNet):
        def __init__(self) -> None:
            nn.Module.__init__(self)
            self.inp = qnn.QuantIdentity(**input_act)
            self.conv1 = qnn.QuantConv2d(1, 16, 3, padding=1, **weight)
            self.relu1 = qnn.QuantReLU(**act)
            self.conv2 = qnn.QuantConv2d(16, 32, 3, padding=1, **weight)
            self.relu2 = qnn.QuantReLU(**act)
            self.pool = nn.AvgPool2d(2)
            self.fc = qnn.QuantLinear(32 * 4 * 4, 10, bias=True, **weight)

        def forward(self, x: Tensor) -> Tensor:
            # FloatNet's forward after the input quantizer, written out: TorchScript does not
            # compile super().
            x = self.relu1(self.conv1(self.inp(x)))
            x = self.pool(self.relu2(self.conv2(x)))
            return self.fc(torch.flatten(x, 1))

    return QuantNet()


def auto_quant_net(float_model: nn.Module, bits: BitConfig, collect_stats_steps: int) -> nn.Module:
    """quant_net's settings, applied by brevitas_cpp.graph.Quantizer to a copy of the float
    model: every conv, linear and ReLU replaced in place, the input quantizer on conv1."""
    from brevitas_cpp.graph import Quantizer
    from brevitas_cpp.quant import Int8WeightPerChannelFloat, Uint8ActPerTensorFloat

    input_quant = dict(
        input_quant=Uint8ActPerTensorFloat,
        input_bit_width=bits.act_bits,
        input_collect_stats_steps=collect_stats_steps,
    )
    quantizer = Quantizer(
        copy.deepcopy(float_model),
        bits_weights=bits.weight_bits,
        bits_activations=bits.act_bits,
        overrides={"conv1": input_quant},
        weight_kwargs=dict(weight_quant=Int8WeightPerChannelFloat),
        act_kwargs=dict(collect_stats_steps=collect_stats_steps),
    )
    return quantizer.prepare_model()


def post_training_quantize(
    qnn, bits: BitConfig, float_state, data: Digits, steps: int, seed: int, device
) -> Tuple[float, float]:
    """quant_net with the float weights, without training: test accuracy after its activation
    scales are calibrated in float over `steps` training batches, then after its biases are
    also corrected over the same batches."""
    from brevitas_cpp.graph import bias_correction_mode, calibration_mode

    model = quant_net(qnn, bits, steps).to(device)
    model.load_state_dict(float_state)
    accuracies = []
    for mode in (calibration_mode, bias_correction_mode):
        generator = torch.Generator().manual_seed(seed)
        with mode(model):
            for index in batches(len(data.y_train), generator)[:steps]:
                model(data.x_train[index])
        accuracies.append(accuracy(model, data.x_test, data.y_test))
    return accuracies[0], accuracies[1]


def size_bits(model: nn.Module, weight_bits: int) -> int:
    """Weights at their bit width plus biases at 32 bits. The quantizer scales (a float per
    output channel and per activation quantizer, 61 here) are left out."""
    total = 0
    for name, param in model.named_parameters():
        if name.endswith(".weight"):
            total += param.numel() * weight_bits
        elif name.endswith(".bias"):
            total += param.numel() * 32
    return total


# ---------------------------------------------------------------------------------------------
# Training


@torch.no_grad()
def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    was_training = model.training
    model.eval()
    correct = (model(x).argmax(1) == y).sum().item()
    model.train(was_training)
    return 100.0 * correct / len(y)


def synchronize(device: torch.device) -> None:
    """Waits for the GPU's queued work, so that step times include it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(
    model: nn.Module, data: Digits, epochs: int, lr: float, desc: str, progress: bool, seed: int
) -> Tuple[List[float], List[float]]:
    """Adam with a cosine learning-rate decay; (test accuracy after each epoch, step times)."""
    generator = torch.Generator().manual_seed(seed)
    steps_per_epoch = math.ceil(len(data.y_train) / BATCH_SIZE)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs * steps_per_epoch)
    loss_fn = nn.CrossEntropyLoss()
    accuracies: List[float] = []
    step_times: List[float] = []
    model.train()
    with tqdm(
        total=epochs * steps_per_epoch,
        desc=desc,
        disable=not progress,
        leave=False,
        dynamic_ncols=True,
    ) as bar:
        for _ in range(epochs):
            for index in batches(len(data.y_train), generator):
                xb, yb = data.x_train[index], data.y_train[index]
                synchronize(xb.device)
                start = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                loss = loss_fn(model(xb), yb)
                loss.backward()
                optimizer.step()
                synchronize(xb.device)
                step_times.append(time.perf_counter() - start)
                scheduler.step()
                bar.update()
            accuracies.append(accuracy(model, data.x_test, data.y_test))
            bar.set_postfix(loss=f"{loss.item():.3f}", test_acc=f"{accuracies[-1]:.2f}")
    return accuracies, step_times


def calibrate(model: nn.Module, data: Digits, steps: int, seed: int) -> None:
    """Statistics warm-up of the activation quantizers: `steps` training-mode forward passes
    without gradients, after which their scales are learned parameters initialised from the
    statistics (Brevitas's collect_stats_steps, run before QAT instead of during it)."""
    generator = torch.Generator().manual_seed(seed)
    model.train()
    done = 0
    with torch.no_grad():
        while done < steps:
            for index in batches(len(data.y_train), generator):
                if done == steps:
                    break
                model(data.x_train[index])
                done += 1


# ---------------------------------------------------------------------------------------------
# TorchScript export


def export_and_check(model: nn.Module, x_test: Tensor, path: Path) -> Dict[str, object]:
    """Script the model (eval mode), save it, load it back and compare outputs bit for bit."""
    with warnings.catch_warnings():
        # torch 2.13 marks TorchScript deprecated in favour of torch.export; this step is
        # about TorchScript on purpose (C++ deployment with torch::jit::load).
        warnings.filterwarnings(
            "ignore", message=r"`torch\.jit\.\w+` is deprecated", category=DeprecationWarning
        )
        return _export_and_check(model, x_test, path)


def _export_and_check(model: nn.Module, x_test: Tensor, path: Path) -> Dict[str, object]:
    model.eval()
    # No fallback: the quant layers script (a failure here is a bug).
    scripted = torch.jit.script(model)
    torch.jit.save(scripted, str(path))
    reloaded = torch.jit.load(str(path))
    with torch.no_grad():
        equal = torch.equal(reloaded(x_test), model(x_test))
        # Another batch size too.
        equal_small = torch.equal(reloaded(x_test[:7]), model(x_test[:7]))
    return {
        "method": "torch.jit.script",
        "path": str(path),
        "reloaded_equal": bool(equal and equal_small),
    }


def onnx_export_and_check(
    model: nn.Module, x_test: Tensor, path: Path
) -> Optional[Dict[str, object]]:
    """ONNX QCDQ export (brevitas_cpp.export) and onnxruntime's agreement with the model in eval
    mode on the test images: as written (graph optimizations off), and as a deployed onnxruntime
    runs it (all optimizations: integer kernels). None when onnx/onnxruntime are not installed."""
    try:
        import onnx  # noqa: F401
        import onnxruntime

        from brevitas_cpp.export import check_onnx_qcdq, export_onnx_qcdq
    except ImportError:
        return None
    model = model.cpu().eval()  # onnxruntime runs on the CPU
    x_test = x_test.cpu()
    export_onnx_qcdq(model, x_test[:1], str(path))
    exact = check_onnx_qcdq(model, str(path), x_test)
    deployed = check_onnx_qcdq(model, str(path), x_test, optimization="all")
    # The deployed file's own test accuracy, from onnxruntime's default session (all optimizations).
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    logits = session.run(None, {session.get_inputs()[0].name: x_test.numpy()})[0]
    return {
        "path": str(path),
        "onnxruntime_predictions": torch.from_numpy(logits).argmax(1),
        "int_mismatches": exact.int_mismatches,
        "int_elements": exact.int_elements,
        "max_int_diff": exact.max_int_diff,
        "optimized_int_mismatches": deployed.int_mismatches,
        "optimized_max_int_diff": deployed.max_int_diff,
        "max_abs_diff": exact.max_abs_diff,
    }


# ---------------------------------------------------------------------------------------------
# Report


def table(results: List[RunResult], float_result: RunResult) -> str:
    lines = [
        "| model | test accuracy (%) | vs float (points) | step time vs float | size (bits) |"
        " size vs float |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in [float_result, *results]:
        lines.append(
            f"| {r.name} | {r.accuracy:.2f} | {r.accuracy - float_result.accuracy:+.2f} | "
            f"{r.step_time_s / float_result.step_time_s:.2f}x | {r.size_bits:,} | "
            f"{r.size_bits / float_result.size_bits:.3f} |"
        )
    return "\n".join(lines)


def plot(results: List[RunResult], float_result: RunResult, path: Path) -> None:
    """Accuracy per QAT epoch: the whole range (left), and zoomed on the trained models (right),
    where the low-bit start would otherwise flatten the curves that matter into one line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    trained = [a for r in results for a in r.accuracy_per_epoch[1:]] + [float_result.accuracy]
    for ax in axes:
        for r in results:
            # Epoch 0: after loading the float weights and calibrating, before any QAT step.
            ax.plot(
                range(len(r.accuracy_per_epoch)), r.accuracy_per_epoch, marker="o", label=r.name
            )
        ax.axhline(
            float_result.accuracy,
            color="black",
            linestyle="--",
            label=f"float ({float_result.accuracy:.2f}%)",
        )
        ax.set_xlabel("QAT epoch (0 = float weights, calibrated)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0].set_title("QAT on 8x8 digits (brevitas_cpp)")
    axes[1].set_title("zoom: after the first QAT epoch")
    axes[1].set_ylim(max(min(trained) - 1.0, 0.0), min(max(trained) + 0.5, 100.5))
    axes[1].set_xlim(0.5, max(len(r.accuracy_per_epoch) for r in results) - 0.5)
    axes[1].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, object]:
    args = parse_args(argv)
    qnn, jit = import_brevitas_cpp(args.jit)
    device = checked_device(args.device)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    progress = not args.no_progress
    started = time.perf_counter()

    data = load_data(args.subset)
    data = Digits(*(t.to(device) for t in (data.x_train, data.y_train, data.x_test, data.y_test)))
    print(
        f"digits: {len(data.y_train)} train / {len(data.y_test)} test images; "
        f"BREVITAS_JIT={int(jit)}; {torch.get_num_threads()} thread(s); device {device}"
    )

    torch.manual_seed(args.seed)
    float_model = FloatNet().to(device)
    float_acc, float_times = train(
        float_model,
        data,
        args.float_epochs,
        lr=3e-3,
        desc="float",
        progress=progress,
        seed=args.seed,
    )
    float_result = RunResult("float32", float_acc, float_times, size_bits(float_model, 32))
    print(f"float: test accuracy {float_result.accuracy:.2f}% after {args.float_epochs} epochs")
    float_state = float_model.state_dict()

    calibration_steps = math.ceil(len(data.y_train) / BATCH_SIZE)  # one pass over the data
    results: List[RunResult] = []
    exports: Dict[str, Dict[str, object]] = {}
    runs = [(bits, "hand") for bits in args.bits]
    if args.auto:
        runs = [(bits, kind) for bits in args.bits for kind in ("hand", "auto")]
    if args.int8_ema:
        runs.append((BitConfig(8, 8), "ema"))
    if args.fp8:
        runs.append((BitConfig(8, 8), "fp8"))
    for bits, kind in runs:
        torch.manual_seed(args.seed)
        if kind == "auto":
            model = auto_quant_net(float_model, bits, calibration_steps).to(device)
        else:
            if kind == "ema":
                model = int8_ema_net(qnn)
            elif kind == "fp8":
                model = fp8_net(qnn, calibration_steps)
            else:
                model = quant_net(qnn, bits, calibration_steps)
            model = model.to(device)
            # A plain float state_dict loads strictly: the quantizers add no required keys.
            model.load_state_dict(float_state)
        name = {
            "hand": bits.name,
            "auto": f"{bits.name} auto",
            "ema": f"{bits.name} EMA",
            "fp8": "FP8 E4M3",
        }[kind]
        calibrate(model, data, calibration_steps, seed=args.seed)
        ptq_acc = accuracy(model, data.x_test, data.y_test)
        qat_acc, qat_times = train(
            model, data, args.epochs, lr=1e-3, desc=name, progress=progress, seed=args.seed + 1
        )
        result = RunResult(name, [ptq_acc, *qat_acc], qat_times, size_bits(model, bits.weight_bits))
        results.append(result)
        print(
            f"{name}: test accuracy {ptq_acc:.2f}% after calibration, "
            f"{result.accuracy:.2f}% after {args.epochs} QAT epochs"
        )
        file_name = name.lower().replace(" ", "_")
        exports[name] = export_and_check(
            model, data.x_test, args.out / f"qat_digits_{file_name}.pt"
        )
        onnx_report = None
        if kind != "fp8":  # QCDQ export is integer only
            onnx_report = onnx_export_and_check(
                model, data.x_test, args.out / f"qat_digits_{file_name}.onnx"
            )
        if onnx_report is not None:
            predictions = onnx_report.pop("onnxruntime_predictions")
            correct = (predictions == data.y_test.cpu()).sum().item()
            onnx_report["onnxruntime_accuracy"] = 100.0 * correct / len(data.y_test)
            exports[name]["onnx"] = onnx_report
        model.to(device)

    ptq: Dict[str, Dict[str, float]] = {}
    if args.ptq:
        for bits in args.bits:
            torch.manual_seed(args.seed)
            calibrated, corrected = post_training_quantize(
                qnn, bits, float_state, data, calibration_steps, args.seed, device
            )
            ptq[bits.name] = {"calibration": calibrated, "bias_correction": corrected}
    report = table(results, float_result)
    if ptq:
        report += (
            "\n\n| model | PTQ: calibration (%) | PTQ: + bias correction (%) | QAT (%) |"
            "\n| --- | ---: | ---: | ---: |"
        )
        qat = {r.name: r.accuracy for r in results}
        for name, value in ptq.items():
            report += (
                f"\n| {name} | {value['calibration']:.2f} | {value['bias_correction']:.2f} | "
                f"{qat[name]:.2f} |"
            )
    print("\n" + report + "\n")
    for name, export in exports.items():
        print(
            f"{name}: {export['method']} -> {export['path']}; reloaded outputs equal the "
            f"original's (torch.equal): {export['reloaded_equal']}"
        )
    onnx_rows = [(name, e["onnx"]) for name, e in exports.items() if "onnx" in e]
    if onnx_rows:
        qat = {r.name: r.accuracy for r in results}
        onnx_table = (
            "| model | ONNX QCDQ file | accuracy: PyTorch / onnxruntime (%) | activation integers "
            "off, as written (max steps) | off with onnxruntime's integer kernels | max output "
            "diff |\n| --- | --- | ---: | ---: | ---: | ---: |"
        )
        for name, o in onnx_rows:
            onnx_table += (
                f"\n| {name} | {Path(o['path']).name} | {qat[name]:.2f} / "
                f"{o['onnxruntime_accuracy']:.2f} | {o['int_mismatches']}/{o['int_elements']} "
                f"({o['max_int_diff']}) | {o['optimized_int_mismatches']} "
                f"({o['optimized_max_int_diff']}) | {o['max_abs_diff']:.2g} |"
            )
        print("\n" + onnx_table + "\n")
        report += "\n\n" + onnx_table
    else:
        print("ONNX export skipped: onnx and onnxruntime are not installed (requirements-dev.txt)")
    (args.out / "qat_digits_results.md").write_text(report + "\n")
    plot_path = args.out / "qat_digits_accuracy.png"
    plot(results, float_result, plot_path)
    print(f"plot: {plot_path}")

    summary = {
        "float": {
            "accuracy": float_result.accuracy,
            "step_time_s": float_result.step_time_s,
            "size_bits": float_result.size_bits,
        },
        "quant": {
            r.name: {
                "accuracy": r.accuracy,
                "accuracy_per_epoch": r.accuracy_per_epoch,
                "step_time_s": r.step_time_s,
                "size_bits": r.size_bits,
                **exports[r.name],
            }
            for r in results
        },
        "ptq": ptq,
        "jit": jit,
        "device": str(device),
        "wall_s": time.perf_counter() - started,
    }
    (args.out / "qat_digits_results.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"total {summary['wall_s']:.1f} s")
    return summary


if __name__ == "__main__":
    main()
