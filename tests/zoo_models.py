"""The zoo of tests/export/test_zoo.py: torchvision's, timm's and transformers' models, built
without downloads, each taken through the stages a user takes a model through (issue 33).

torchvision's wheel is built against its own torch release: beside the pinned CPU torch its C
extension does not load, and importing the package fails while it registers Meta kernels for
its missing ops. The model definitions need neither, so where the plain import fails the package
is entered without its ``__init__`` (``_models_only``): only ``torchvision.models`` is used. timm
and transformers import torchvision when it is installed, so that import comes first
(``_import_beside_torchvision``). Neither is a dependency: their models are skipped without them.
"""

import importlib
import importlib.util
import os
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from brevitas_cpp.export import check_onnx_qcdq, export_onnx_qcdq
from brevitas_cpp.graph import Quantizer
from brevitas_cpp.graph.quantize import functional_quantization_mode
from brevitas_cpp.nn import ScaledDotProductAttention

# A stage's outcome: passed, failed, or not applicable to the model (the float model cannot
# take that step either).
OK, FAIL, NOT_APPLICABLE = "ok", "FAIL", "n/a"


@dataclass(frozen=True)
class ZooModel:
    make: Callable[[], nn.Module]
    example: Callable[[], torch.Tensor]  # a batch of 4; drawn after torch.manual_seed(0)
    needs: Tuple[str, ...]  # the packages to be installed
    # Why the float model does not script, when it does not: the script stage is then n/a
    # (checked each run: the float model must still fail to script).
    float_does_not_script: str = ""


class NotApplicable(Exception):
    """A stage the float model cannot take either."""


def _images(side: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.randn(4, 3, side, side)


def _tokens(vocab: int) -> Callable[[], torch.Tensor]:
    return lambda: torch.randint(0, vocab, (4, 8))


def _torchvision(make: Callable[[types.ModuleType], nn.Module], side: int) -> ZooModel:
    return ZooModel(lambda: make(torchvision_models()), _images(side), ("torchvision",))


def _timm(name: str, side: int) -> ZooModel:
    def make() -> nn.Module:
        timm = _import_beside_torchvision("timm")
        return timm.create_model(name, pretrained=False, num_classes=10)

    return ZooModel(make, _images(side), ("timm", "torchvision"))


class Logits(nn.Module):
    """A transformers model fed token ids, returning logits [batch, classes]: a language
    model's at the last position (the next token's), a classifier's as they are. Its attention
    (F.scaled_dot_product_attention, transformers' default) runs through the model's
    ScaledDotProductAttention child, which the quantizer replaces by a quant one: Brevitas's
    functional_quantization_mode, entered for each forward, as its LLM flow does."""

    def __init__(self, model: nn.Module, last_position: bool) -> None:
        super().__init__()
        self.model = model
        self.last_position = last_position
        self.attention_mode = functional_quantization_mode(
            model, {F.scaled_dot_product_attention: ScaledDotProductAttention}
        )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        with self.attention_mode:
            logits = self.model(input_ids=ids).logits
        return logits[:, -1] if self.last_position else logits


# Small, so that the zoo stays quick; the vocabulary and the labels cover the train stage's
# targets (0..3) and more.
VOCAB = 32


def _gpt2() -> nn.Module:
    transformers = _import_beside_torchvision("transformers")
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=4,
        vocab_size=VOCAB,
        n_positions=16,
        bos_token_id=0,
        eos_token_id=0,
    )
    return Logits(transformers.GPT2LMHeadModel(config), last_position=True)


def _bert() -> nn.Module:
    transformers = _import_beside_torchvision("transformers")
    config = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=VOCAB,
        max_position_embeddings=16,
        num_labels=10,
    )
    return Logits(transformers.BertForSequenceClassification(config), last_position=False)


_CONFIGS_DO_NOT_SCRIPT = "TorchScript cannot get the source of transformers' configs"

# Small inputs and a batch of 4: the stages, not the accuracy, are tested (a batch of 2 at 32x32
# drives mobilenet_v2's float BatchNorms, over 1x1 maps, to non-finite gradients in its second
# step).
MODELS: Dict[str, ZooModel] = {
    "resnet18": _torchvision(lambda tv: tv.resnet18(num_classes=10), 32),
    "resnet50": _torchvision(lambda tv: tv.resnet50(num_classes=10), 32),  # bottlenecks
    # Hardswish, Hardsigmoid, ReLU
    "mobilenet_v3_small": _torchvision(lambda tv: tv.mobilenet_v3_small(num_classes=10), 32),
    "mobilenet_v2": _torchvision(lambda tv: tv.mobilenet_v2(num_classes=10), 64),  # ReLU6
    # SiLU, Sigmoid
    "efficientnet_b0": _torchvision(lambda tv: tv.efficientnet_b0(num_classes=10), 64),
    # chunk, channel shuffle
    "shufflenet_v2_x0_5": _torchvision(lambda tv: tv.shufflenet_v2_x0_5(num_classes=10), 32),
    "squeezenet1_0": _torchvision(lambda tv: tv.squeezenet1_0(num_classes=10), 64),
    "regnet_x_400mf": _torchvision(lambda tv: tv.regnet_x_400mf(num_classes=10), 64),
    # GELU, LayerNorm
    "convnext_tiny": _torchvision(lambda tv: tv.convnext_tiny(num_classes=10), 32),
    # concatenations, transitions through AvgPool2d
    "densenet121": _torchvision(lambda tv: tv.densenet121(num_classes=10), 32),
    # MultiheadAttention, GELU: vit_b_16's design, narrow and two layers deep
    "vit": _torchvision(
        lambda tv: tv.VisionTransformer(
            image_size=32,
            patch_size=8,
            num_layers=2,
            num_heads=2,
            hidden_dim=32,
            mlp_dim=64,
            num_classes=10,
        ),
        32,
    ),
    # roll, index, GELU, LayerNorm
    "swin_t": _torchvision(lambda tv: tv.swin_t(num_classes=10), 64),
    "resnet18d": _timm("resnet18d", 32),  # average-pooling downsample
    # timm's GroupNorm1, SiLU, attention written out
    "mobilevitv2_050": _timm("mobilevitv2_050", 64),
    # timm's Sigmoid, BatchNorm1d, cascaded group attention
    "efficientvit_m0": _timm("efficientvit_m0", 64),
    # Conv1D, NewGELUActivation, tied embeddings
    "gpt2": ZooModel(_gpt2, _tokens(VOCAB), ("transformers",), _CONFIGS_DO_NOT_SCRIPT),
    # GELUActivation, Tanh pooler
    "bert": ZooModel(_bert, _tokens(VOCAB), ("transformers",), _CONFIGS_DO_NOT_SCRIPT),
}
# The fast subset CI runs (BREVITAS_ZOO=full runs them all): a residual CNN, one with the
# activations of mobile models, and a GPT-style language model.
FAST = ("resnet18", "mobilenet_v3_small", "gpt2")
# The fraction of the first quantizer's integers onnxruntime may put one step off.
MAX_FIRST_MISMATCH = 1e-3
STAGES = ("quantize", "train", "eval", "script", "compile", "export", "onnx")

# Leaf types the automatic quantizer leaves in float, and why. Any other type left unmapped fails
# the test: a Conv, Linear or activation must be replaced.
FLOAT_TYPES: Dict[str, str] = {
    "BatchNorm2d": "Brevitas merges it into the convolution before quantizing "
    "(preprocess_for_quantize; here graph.merge_bn); unmerged, it stays float",
    "BatchNorm1d": "as BatchNorm2d, merged into a Linear or Conv1d before it; efficientvit's "
    "head's follows a pooling, so stays float",
    "MaxPool2d": "max pooling passes quantized values through unchanged",
    "AvgPool2d": "Brevitas 0.12.1's quantize flow maps it to None: float between quantized layers",
    "AdaptiveAvgPool2d": "as AvgPool2d: Brevitas 0.12.1's quantize flow leaves it float",
    "LayerNorm": "Brevitas 0.12.1's quantize flow maps no normalization layer",
    "LayerNorm2d": "a LayerNorm over channels (torchvision's): as LayerNorm",
    "GroupNorm1": "timm's GroupNorm with one group, a normalization: as LayerNorm",
    "StochasticDepth": "a random mask of whole samples: nothing to quantize",
    "DropPath": "timm's StochasticDepth: nothing to quantize",
    "Permute": "moves axes only",
}


@dataclass
class StageResult:
    status: str  # OK, FAIL or NOT_APPLICABLE
    seconds: float
    detail: str = ""


@dataclass
class ZooRun:
    name: str
    stages: Dict[str, StageResult] = field(default_factory=dict)
    replaced: int = 0
    unmapped: Dict[str, int] = field(default_factory=dict)


def torchvision_models() -> types.ModuleType:
    """torchvision.models, imported plainly where torchvision loads, else without its package
    __init__ (see the module docstring)."""
    try:
        return importlib.import_module("torchvision.models")
    except Exception:
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        return _models_only()


def _models_only() -> types.ModuleType:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        raise ImportError("torchvision is not installed")
    package = types.ModuleType("torchvision")
    package.__path__ = [os.path.dirname(spec.origin)]
    package.__file__ = spec.origin
    package.__spec__ = spec  # torch.onnx asks find_spec("torchvision")
    sys.modules["torchvision"] = package
    # The Meta kernels of torchvision's C++ ops, which did not load.
    sys.modules["torchvision._meta_registrations"] = types.ModuleType(
        "torchvision._meta_registrations"
    )
    return importlib.import_module("torchvision.models")


def _import_beside_torchvision(package: str) -> types.ModuleType:
    """timm or transformers, after torchvision.models where torchvision is installed (both
    import torchvision, whose plain import may fail: see the module docstring)."""
    if importlib.util.find_spec("torchvision") is not None:
        torchvision_models()
    return importlib.import_module(package)


def missing_packages(name: str) -> Tuple[str, ...]:
    """The packages MODELS[name] needs that are not installed."""
    return tuple(p for p in MODELS[name].needs if importlib.util.find_spec(p) is None)


def build(name: str) -> Tuple[nn.Module, torch.Tensor]:
    spec = MODELS[name]
    torch.manual_seed(0)
    model = spec.make()
    return model, spec.example()


def run_zoo_model(name: str, stop_at_failure: bool = True) -> ZooRun:
    """Every stage of STAGES on a fresh model; with stop_at_failure the stages after a failing
    one are not run."""
    model, x = build(name)
    run = ZooRun(name)
    quantizer = Quantizer(model)

    def quantize() -> nn.Module:
        quant_model = quantizer.prepare_model()
        run.replaced = len(quantizer.replaced)
        run.unmapped = {kind: len(names) for kind, names in quantizer.unmapped.items()}
        unknown = sorted(set(quantizer.unmapped) - set(FLOAT_TYPES))
        if unknown:
            raise AssertionError(f"left in float, in no skip list: {unknown}")
        return quant_model

    quant_model = _stage(run, "quantize", quantize)
    if quant_model is None:
        return run
    target = torch.tensor([1, 2, 3, 4])
    optimizer = torch.optim.SGD(quant_model.parameters(), lr=1e-3)

    def train() -> None:
        for _ in range(2):
            optimizer.zero_grad()
            F.cross_entropy(quant_model(x), target).backward()
            optimizer.step()

    def evaluate() -> torch.Tensor:
        quant_model.eval()
        with torch.no_grad():
            return quant_model(x)

    def onnx() -> str:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, f"{name}.onnx")
            export_onnx_qcdq(quant_model, x, path)
            agreement = check_onnx_qcdq(quant_model, path, x)
        if agreement.int_elements == 0:
            raise AssertionError("no quantizer was checked against onnxruntime")
        # The first quantizer's input has met no rounding: there onnxruntime's float kernels
        # may put an integer one step off, rarely. Later quantizers inherit the differences,
        # which grow with depth in a random-weight model (squeezenet1_0: 2 of 322,944 in the
        # first, up to 3 steps and 12 % in the last), so they are reported, not bounded.
        first = agreement.quantizers[0]
        if first.max_int_diff > 1 or first.mismatches > MAX_FIRST_MISMATCH * first.elements:
            raise AssertionError(f"onnxruntime disagrees at the first quantizer: {first}")
        share = agreement.int_mismatches / agreement.int_elements
        return (
            f"first quantizer {first.mismatches}/{first.elements} off; all {share:.2%}, "
            f"<= {agreement.max_int_diff} steps"
        )

    steps: Tuple[Tuple[str, Callable[[], Any]], ...] = (
        ("train", train),
        ("eval", evaluate),
        ("script", lambda: script(name, quant_model, x)),
        ("compile", lambda: _same(torch.compile(quant_model, backend="aot_eager"), quant_model, x)),
        ("export", lambda: _same(torch.export.export(quant_model, (x,)).module(), quant_model, x)),
        ("onnx", onnx),
    )
    for stage, body in steps:
        if _stage(run, stage, body) is None and stop_at_failure:
            break
    return run


def script(name: str, quant_model: nn.Module, x: torch.Tensor) -> str:
    """torch.jit.script of the quant model, equal to eager; not applicable where the float model
    does not script (a fresh one is tried, so that a stale claim fails)."""
    reason = MODELS[name].float_does_not_script
    if not reason:
        return _same(torch.jit.script(quant_model), quant_model, x)
    float_model, _ = build(name)
    try:
        torch.jit.script(float_model)
    except Exception as error:
        raise NotApplicable(f"the float model does not script ({reason})") from error
    raise AssertionError("the float model scripts: script the quant model instead")


def _same(other: Callable[..., torch.Tensor], model: nn.Module, x: torch.Tensor) -> str:
    """other(x) against the eager model's output in eval mode: bit for bit."""
    with torch.no_grad():
        expected, got = model(x), other(x)
    if not torch.equal(expected, got):
        raise AssertionError(f"differs from eager by {(expected - got).abs().max().item():.3g}")
    return "equal to eager"


def _stage(run: ZooRun, stage: str, body: Callable[[], Any]) -> Optional[Any]:
    start = time.perf_counter()
    try:
        out = body()
    except NotApplicable as why:
        run.stages[stage] = StageResult(NOT_APPLICABLE, time.perf_counter() - start, str(why))
        return True  # the later stages go on
    except Exception as error:  # recorded: the table shows every failure, the test raises it
        detail = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        run.stages[stage] = StageResult(FAIL, time.perf_counter() - start, detail)
        return None
    detail = out if isinstance(out, str) else ""
    run.stages[stage] = StageResult(OK, time.perf_counter() - start, detail)
    return out if out is not None else True
