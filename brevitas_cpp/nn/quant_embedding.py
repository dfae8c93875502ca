"""QuantEmbedding: torch.nn.Embedding looking rows up in a quantized weight
(Int8WeightPerTensorFloat by default)."""

from typing import Optional

import torch
from torch import Tensor
from torch.nn import Embedding
from torch.nn.functional import embedding

from brevitas_cpp.proxy.script import script_error
from brevitas_cpp.quant import Int8WeightPerTensorFloat
from brevitas_cpp.quant_tensor import IntQuantTensor, QuantTensor

from ._error_context import call_naming_layer
from .mixin.parameter import QuantWeightMixin, WeightQuantType

__all__ = ["QuantEmbedding"]


class QuantEmbedding(QuantWeightMixin, Embedding):
    """Embedding over weight_quant(weight). With return_quant_tensor the rows come back as an
    IntQuantTensor carrying the weight's scale, zero point and bit width (per-row scales are
    looked up along with the rows)."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: Optional[int] = None,
        max_norm: Optional[float] = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Optional[Tensor] = None,
        weight_quant: WeightQuantType = Int8WeightPerTensorFloat,
        return_quant_tensor=False,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
        **kwargs,
    ) -> None:
        if not isinstance(return_quant_tensor, bool):
            raise TypeError(
                f"QuantEmbedding: return_quant_tensor must be a bool, got {return_quant_tensor!r} "
                f"({type(return_quant_tensor).__name__})"
            )
        Embedding.__init__(
            self,
            num_embeddings=num_embeddings,
            embedding_dim=embedding_dim,
            padding_idx=padding_idx,
            max_norm=max_norm,
            norm_type=norm_type,
            scale_grad_by_freq=scale_grad_by_freq,
            sparse=sparse,
            _weight=_weight,
            device=device,
            dtype=dtype,
        )
        QuantWeightMixin.__init__(self, weight_quant=weight_quant, **kwargs)
        self.accept_quant_tensor = False
        self.return_quant_tensor = return_quant_tensor

    @property
    def output_channel_dim(self) -> int:
        return 0

    @property
    def out_channels(self) -> int:
        return self.num_embeddings

    def _lookup(self, inp: Tensor, table: Tensor) -> Tensor:
        return embedding(
            inp,
            table,
            self.padding_idx,
            self.max_norm,
            self.norm_type,
            self.scale_grad_by_freq,
            self.sparse,
        )

    def _row_metadata(self, inp: Tensor, field: Tensor) -> Tensor:
        """A per-tensor field as is; a per-row one ([num_embeddings, 1]) looked up with the rows,
        so it broadcasts against them."""
        if field.numel() == 1:
            return field
        return embedding(inp, field.reshape(self.num_embeddings, -1))

    def __prepare_scriptable__(self) -> "QuantEmbedding":
        if self.return_quant_tensor:
            raise script_error(
                self,
                "return_quant_tensor=True",
                "Build the layer with return_quant_tensor=False (the default), or trace the model.",
            )
        return self

    def forward(self, inp: Tensor):
        if torch.jit.is_scripting():
            return self._lookup(inp, self.weight_quant(self.weight)[0])
        # An error names the layer (TorchScript compiles no try statement: eager mode only).
        return call_naming_layer(self, self._layer_forward, inp)

    def _layer_forward(self, inp: Tensor):
        if isinstance(inp, QuantTensor):
            raise TypeError(
                "QuantEmbedding: the input must be an integer index tensor, got a QuantTensor"
            )
        quant_weight = self.quant_weight()
        if not isinstance(quant_weight, QuantTensor):
            if self.return_quant_tensor:
                raise RuntimeError(
                    "QuantEmbedding: return_quant_tensor=True, but the weight is not quantized "
                    "(weight_quant=None); enable weight quantization to return a QuantTensor"
                )
            return self._lookup(inp, quant_weight)
        out = self._lookup(inp, quant_weight.value)
        if not self.return_quant_tensor:
            return out
        return IntQuantTensor(
            out,
            self._row_metadata(inp, quant_weight.scale),
            self._row_metadata(inp, quant_weight.zero_point),
            quant_weight.bit_width,
            quant_weight.signed,
            quant_weight.training,
        )
