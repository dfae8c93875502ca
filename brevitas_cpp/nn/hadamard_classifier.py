"""``HadamardClassifier`` (Brevitas's ``brevitas.nn.hadamard_classifier``; Hadamard-matrix
classifiers, arXiv:1801.04540): a classifier with no learned weights. The input is divided by its
Frobenius norm (over the whole batch, as in Brevitas), projected on the first rows of a fixed
Sylvester Hadamard matrix and multiplied by ``-scale``, a learned scalar (a buffer with
``fixed_scale=True``) initialised to 1/sqrt(out_channels).

A quantized input (an IntQuantTensor) with ``return_quant_tensor=True`` gives an IntQuantTensor:
scale input_scale * scale / norm, the input's zero point (which must be 0), a bit width bounding
the sum of in_channels unsigned inputs, signed. Brevitas 0.12.1 fails on the other cases (a plain
input has no ``.value``; with ``return_quant_tensor=False`` its zero-point test calls ``.any()``
on a bool); here they return the plain output tensor. The matrix is built here (Brevitas needs
scipy) and, as in Brevitas, is not part of the ``state_dict``."""

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from brevitas_cpp.function import ceil_ste, max_int
from brevitas_cpp.quant_tensor import IntQuantTensor, _unpack_quant_tensor

from ._error_context import call_naming_layer
from .mixin.base import QuantLayerMixin

__all__ = ["HadamardClassifier", "hadamard"]


def _sylvester(n: int) -> Tensor:
    """The n x n Sylvester Hadamard matrix (n a power of 2) in float32: H_1 = [1],
    H_2k = [[H_k, H_k], [H_k, -H_k]]."""
    matrix = torch.ones(1, 1)
    while matrix.shape[0] < n:
        matrix = torch.cat([torch.cat([matrix, matrix], 1), torch.cat([matrix, -matrix], 1)], 0)
    return matrix


def hadamard(n: int, dtype: Any = int) -> Any:
    """scipy.linalg.hadamard, which Brevitas's module imports under this name: the n x n
    Sylvester Hadamard matrix as a numpy array of ``dtype``; n must be a positive power of 2."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n & (n - 1):
        raise ValueError(f"hadamard: n must be a positive integer and a power of 2, got {n!r}")
    return _sylvester(n).numpy().astype(dtype)


class HadamardClassifier(QuantLayerMixin, nn.Module):
    """``in_channels`` features to ``out_channels`` logits through a fixed Hadamard projection and
    one learned scale (``fixed_scale=True``: a constant)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        fixed_scale: bool = False,
        return_quant_tensor: bool = False,
    ) -> None:
        nn.Module.__init__(self)
        QuantLayerMixin.__init__(self, return_quant_tensor=return_quant_tensor)
        for name, count in (("in_channels", in_channels), ("out_channels", out_channels)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(
                    f"HadamardClassifier: {name} must be a positive integer, got {count!r}"
                )
        if not isinstance(fixed_scale, bool):
            raise TypeError(f"HadamardClassifier: fixed_scale must be a bool, got {fixed_scale!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        size = 2 ** math.ceil(math.log2(max(in_channels, out_channels)))
        # Rebuilt from the sizes, never saved (Brevitas drops it from its state_dict too).
        self.register_buffer("proj", _sylvester(size), persistent=False)
        init_scale = torch.tensor(1.0 / math.sqrt(out_channels))
        if fixed_scale:
            self.register_buffer("scale", init_scale)
        else:
            self.scale = nn.Parameter(init_scale)
        self.eps = 1e-8

    def max_output_bit_width(self, input_bit_width: Tensor) -> Tensor:
        """Bits of the largest sum of in_channels unsigned inputs of input_bit_width bits."""
        max_input_val = max_int(signed=False, narrow_range=False, bit_width=input_bit_width)
        return ceil_ste(torch.log2(max_input_val * self.in_channels))

    def forward(self, inp: Tensor) -> Tensor:  # a QuantTensor too, in eager mode
        if torch.jit.is_scripting():
            return self._layer_forward(inp)
        # An error names the layer (TorchScript compiles no try statement: eager mode only).
        return call_naming_layer(self, self._layer_forward, inp)

    def _layer_forward(self, inp: Tensor) -> Tensor:
        if torch.jit.is_scripting():
            value = inp
        else:
            inp = self.unpack_input(inp)
            value = _unpack_quant_tensor(inp)
        # Tensor.norm("fro", keepdim=True) is this call (TorchScript has no "fro" overload).
        norm = torch.linalg.vector_norm(value, 2.0, None, True) + self.eps
        out = F.linear(value / norm, self.proj[: self.out_channels, : self.in_channels])
        out = -self.scale * out
        if torch.jit.is_scripting():
            return out
        if self.return_quant_tensor and isinstance(inp, IntQuantTensor):
            if (inp.zero_point != 0.0).any():
                raise RuntimeError("Computing zero point of output accumulator not supported yet.")
            out = IntQuantTensor(
                out,
                scale=inp.scale * self.scale / norm,
                zero_point=inp.zero_point,
                bit_width=self.max_output_bit_width(inp.bit_width),
                signed=True,
                training=self.training,
            )
        return self.pack_output(out)

    def _load_from_state_dict(
        self, state_dict: Any, prefix: str, local_metadata: Any, strict: bool, *args: Any
    ) -> None:
        # A checkpoint that has the matrix anyway (Brevitas loads it too) is taken, not refused.
        proj = state_dict.pop(prefix + "proj", None)
        if proj is not None:
            with torch.no_grad():
                self.proj.copy_(proj)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, *args)
