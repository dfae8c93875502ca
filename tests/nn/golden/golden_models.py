"""The small models whose training runs are recorded from Brevitas 0.12 and replayed on brevitas_cpp.

Shared by generate.py (run with Brevitas) and test_golden_models.py (run with brevitas_cpp), so
both sides build exactly the same architecture. Every builder takes a `Lib`: the quant-layer
package (brevitas.nn or brevitas_cpp.nn), the quantizer package (brevitas.quant or
brevitas_cpp.quant) and the enum module; this file imports neither library itself.

Each model has a plain-torch twin (same attribute names for the layers that hold parameters) whose
state_dict is the "float checkpoint" loaded into the quant model.
"""

from typing import Any, Callable, Dict, NamedTuple, Tuple

import torch
from torch import nn


class Lib(NamedTuple):
    """The library a model is built from."""

    nn: Any  # quant layers: QuantConv2d, QuantIdentity, ...
    quant: Any  # quantizers: Int32Bias, Int8WeightPerChannelFloat, ...
    enum: Any  # BitWidthImplType, ...


# ---- (1) CNN: input quant -> 4-bit conv with 32-bit bias -> ReLU -> truncating avg pool -> linear --


class SmallCNN(nn.Module):
    def __init__(self, lib: Lib) -> None:
        super().__init__()
        qnn, q = lib.nn, lib.quant
        self.inp = qnn.QuantIdentity(return_quant_tensor=True)
        self.conv = qnn.QuantConv2d(
            3, 4, 3, weight_bit_width=4, bias=True, bias_quant=q.Int32Bias, return_quant_tensor=True
        )
        self.relu = qnn.QuantReLU(return_quant_tensor=True)
        self.pool = qnn.TruncAvgPool2d(kernel_size=2)
        self.fc = qnn.QuantLinear(4 * 3 * 3, 5)

    def forward(self, x):
        y = self.pool(self.relu(self.conv(self.inp(x))))
        return self.fc(y.flatten(1))


class FloatSmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Identity()
        self.conv = nn.Conv2d(3, 4, 3, bias=True)
        self.relu = nn.ReLU()
        self.pool = nn.AvgPool2d(kernel_size=2)
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        return self.fc(self.pool(self.relu(self.conv(self.inp(x)))).flatten(1))


# ---- (2) residual block: QuantEltwiseAdd and QuantCat sharing one input quantizer ---------------------


class ResidualBlock(nn.Module):
    """x -> conv -> relu -> conv, added back to x, then concatenated with x and mixed by a 1x1 conv.
    The add and the cat requantize their operands with one shared input quantizer, so in eval mode
    (where the quantizer's scale no longer depends on its input) the operands' scales agree, as
    Brevitas requires. Short statistics warm-ups so the run passes into the learned scales."""

    def __init__(self, lib: Lib) -> None:
        super().__init__()
        qnn, q = lib.nn, lib.quant
        self.inp = qnn.QuantIdentity(return_quant_tensor=True, collect_stats_steps=3)
        self.conv1 = qnn.QuantConv2d(3, 3, 3, padding=1, bias=False, return_quant_tensor=True)
        self.relu = qnn.QuantReLU(return_quant_tensor=True, collect_stats_steps=2)
        self.conv2 = qnn.QuantConv2d(3, 3, 3, padding=1, bias=True)
        # The shared input quantizer is called four times per forward (two add operands, two cat
        # operands), so 7 calls end its warm-up in the middle of the second step.
        self.add = qnn.QuantEltwiseAdd(
            return_quant_tensor=True, input_collect_stats_steps=7, output_collect_stats_steps=3
        )
        self.cat = qnn.QuantCat(
            input_quant=self.add.input_quant, output_quant=None, return_quant_tensor=True
        )
        self.head = qnn.QuantConv2d(6, 2, 1, bias=True, bias_quant=q.Int32Bias)

    def forward(self, x):
        x = self.inp(x)
        y = self.conv2(self.relu(self.conv1(x)))
        s = self.add(x, y)
        return self.head(self.cat([s, x], dim=1))


class FloatResidualBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 3, 3, padding=1, bias=False)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(3, 3, 3, padding=1, bias=True)
        self.head = nn.Conv2d(6, 2, 1, bias=True)

    def forward(self, x):
        s = x + self.conv2(self.relu(self.conv1(x)))
        return self.head(torch.cat([s, x], dim=1))


# ---- (3) MLP: per-channel weights, learned bit widths, QuantHardTanh, 16-bit bias ------------------


class PerChannelMLP(nn.Module):
    def __init__(self, lib: Lib) -> None:
        super().__init__()
        qnn, q, enum = lib.nn, lib.quant, lib.enum
        self.fc1 = qnn.QuantLinear(
            8,
            12,
            bias=True,
            weight_quant=q.Int8WeightPerChannelFloat,
            weight_bit_width=6,
            weight_bit_width_impl_type=enum.BitWidthImplType.PARAMETER,
            input_quant=q.Int8ActPerTensorFloat,
            input_collect_stats_steps=2,
        )
        self.act = qnn.QuantHardTanh(
            min_val=-1.0,
            max_val=1.0,
            bit_width=4,
            bit_width_impl_type=enum.BitWidthImplType.PARAMETER,
            return_quant_tensor=True,
        )
        self.fc2 = qnn.QuantLinear(
            12, 4, bias=True, weight_quant=q.Int8WeightPerChannelFloat, bias_quant=q.Int16Bias
        )

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class FloatPerChannelMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 12)
        self.act = nn.Hardtanh(-1.0, 1.0)
        self.fc2 = nn.Linear(12, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


# ---- (4) transposed conv (per-channel weights on dim 1) and nearest upsampling --------------------


class DeconvUpsample(nn.Module):
    """Returns a QuantTensor: the upsampling keeps the transposed conv's scale and bit width."""

    def __init__(self, lib: Lib) -> None:
        super().__init__()
        qnn, q = lib.nn, lib.quant
        self.inp = qnn.QuantIdentity(return_quant_tensor=True, collect_stats_steps=2)
        self.deconv = qnn.QuantConvTranspose2d(
            3,
            2,
            3,
            stride=2,
            padding=1,
            output_padding=1,
            bias=True,
            weight_quant=q.Int8WeightPerChannelFloat,
            bias_quant=q.Int32Bias,
            return_quant_tensor=True,
        )
        self.up = qnn.QuantUpsamplingNearest2d(scale_factor=2)

    def forward(self, x):
        return self.up(self.deconv(self.inp(x)))


class FloatDeconvUpsample(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.deconv = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1, bias=True)
        self.up = nn.UpsamplingNearest2d(scale_factor=2)

    def forward(self, x):
        return self.up(self.deconv(x))


# ---- (5) quantized embedding feeding a linear layer with a 32-bit bias -----------------------------


class EmbeddingLinear(nn.Module):
    def __init__(self, lib: Lib) -> None:
        super().__init__()
        qnn, q = lib.nn, lib.quant
        self.emb = qnn.QuantEmbedding(10, 6, padding_idx=0, return_quant_tensor=True)
        self.fc = qnn.QuantLinear(6, 3, bias=True, bias_quant=q.Int32Bias)

    def forward(self, idx):
        return self.fc(self.emb(idx))


class FloatEmbeddingLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 6, padding_idx=0)
        self.fc = nn.Linear(6, 3)

    def forward(self, idx):
        return self.fc(self.emb(idx))


# ---- inputs -------------------------------------------------------------------------------------


def float_input(shape: Tuple[int, ...]) -> Callable[[torch.Generator, torch.dtype], torch.Tensor]:
    def make(gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        # drawn in float64 so the float32 and float64 runs see the same numbers
        return (torch.randn(shape, generator=gen, dtype=torch.float64) * 1.5).to(dtype)

    return make


def index_input(
    shape: Tuple[int, ...], high: int
) -> Callable[[torch.Generator, torch.dtype], torch.Tensor]:
    def make(gen: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
        return torch.randint(0, high, shape, generator=gen)

    return make


class ModelSpec(NamedTuple):
    quant: Callable[[Lib], nn.Module]
    float: Callable[[], nn.Module]
    make_input: Callable[[torch.Generator, torch.dtype], torch.Tensor]


MODELS: Dict[str, ModelSpec] = {
    "cnn": ModelSpec(SmallCNN, FloatSmallCNN, float_input((2, 3, 8, 8))),
    "residual": ModelSpec(ResidualBlock, FloatResidualBlock, float_input((2, 3, 5, 5))),
    "mlp": ModelSpec(PerChannelMLP, FloatPerChannelMLP, float_input((4, 8))),
    "deconv_upsample": ModelSpec(DeconvUpsample, FloatDeconvUpsample, float_input((2, 3, 4, 4))),
    "embedding": ModelSpec(EmbeddingLinear, FloatEmbeddingLinear, index_input((2, 5), 10)),
}
