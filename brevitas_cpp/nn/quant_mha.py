"""Quantized multi-head attention (Brevitas's brevitas.nn.quant_mha.QuantMultiheadAttention).

nn.MultiheadAttention's computation with quantizers at Brevitas 0.12's places, under its keyword
and submodule names (so its checkpoints and numbers carry over):

* the input projections are QuantLinear layers: one packed ``in_proj`` (self-attention, the
  default) or ``q_proj``/``k_proj``/``v_proj`` (``packed_in_proj=False``, or kdim/vdim differing
  from embed_dim), each with ``in_proj_input_quant``/``_weight_quant``/``_bias_quant``;
* the scaled queries ``q / sqrt(head_dim)`` (``q_scaled_quant``), the transposed keys
  (``k_transposed_quant``), the attention scores before the softmax (``softmax_input_quant``,
  off by default), the attention weights after it (``attn_output_weights_quant``) and the values
  (``v_quant``) each pass a QuantIdentity;
* the output projection ``out_proj`` is a QuantLinear with ``out_proj_*`` quantizers.

Keywords are routed by those prefixes (``in_proj_weight_bit_width=4`` reaches in_proj's weight
quantizer); a keyword with none of them is an error. Masks, ``need_weights``,
``average_attn_weights``, ``batch_first``, ``add_bias_kv``, ``add_zero_attn``, dropout and
unbatched inputs behave as in nn.MultiheadAttention. A float nn.MultiheadAttention state_dict
loads directly (``in_proj_weight`` and ``in_proj_bias`` split into q/k/v when unpacked).
"""

import math
import warnings
from functools import partial
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch._subclasses.fake_tensor import is_fake
from torch.nn.init import constant_, xavier_normal_, xavier_uniform_

from brevitas_cpp.proxy.materialize import apply_keeping_ties, reset_quantizers
from brevitas_cpp.proxy.script import script_error
from brevitas_cpp.quant import (
    Int8ActPerTensorFloat,
    Int8WeightPerTensorFloat,
    Int32Bias,
    Uint8ActPerTensorFloat,
)
from brevitas_cpp.quant_tensor import _unpack_quant_tensor

from ._error_context import call_naming_layer
from .mixin.utils import is_brevitas_keyword
from .quant_activation import QuantIdentity
from .quant_linear import QuantLinear

__all__ = ["QuantMultiheadAttention"]

_PREFIXES = (
    "in_proj_",
    "out_proj_",
    "softmax_input_",
    "attn_output_weights_",
    "q_scaled_",
    "k_transposed_",
    "v_",
)


def _route(kwargs: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """kwargs by prefix, the prefix removed; a keyword with no known prefix is an error, unless
    Brevitas knows it (another layer's), which is ignored as Brevitas ignores it."""
    routed: Dict[str, Dict[str, Any]] = {p: {} for p in _PREFIXES}
    for name, value in kwargs.items():
        prefix = max((p for p in _PREFIXES if name.startswith(p)), key=len, default=None)
        if prefix is None and is_brevitas_keyword(name):
            continue
        if prefix is None:
            raise TypeError(
                f"QuantMultiheadAttention: unexpected keyword argument {name}={value!r}. "
                f"Keywords beyond the layer's own arguments configure one of its quantized "
                f"parts and must start with its prefix: {', '.join(map(repr, _PREFIXES))}"
            )
        routed[prefix][name[len(prefix) :]] = value
    return routed


def _same_tensor(a: Any, b: Any) -> bool:
    """Whether a and b (tensors or QuantTensors) are one tensor: the same object, or in eager
    mode the same data (Brevitas compares data pointers). Traced tensors (torch.export,
    torch.compile) have no data pointer: there the object alone decides."""
    a, b = _unpack_quant_tensor(a), _unpack_quant_tensor(b)
    if a is b:
        return True
    if torch.compiler.is_compiling() or is_fake(a) or is_fake(b):
        return False
    return a.data_ptr() == b.data_ptr()


class QuantMultiheadAttention(nn.Module):
    """Brevitas's QuantMultiheadAttention (see the module docstring)."""

    # The keyword prefixes of its quantized parts (as QuantRNN's and QuantLSTM's _prefixes).
    _prefixes = _PREFIXES

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: Optional[int] = None,
        vdim: Optional[int] = None,
        packed_in_proj: bool = True,
        in_proj_input_quant: Any = Int8ActPerTensorFloat,
        in_proj_weight_quant: Any = Int8WeightPerTensorFloat,
        in_proj_bias_quant: Any = Int32Bias,
        softmax_input_quant: Any = None,
        attn_output_weights_quant: Any = Uint8ActPerTensorFloat,
        q_scaled_quant: Any = Int8ActPerTensorFloat,
        k_transposed_quant: Any = Int8ActPerTensorFloat,
        v_quant: Any = Int8ActPerTensorFloat,
        out_proj_input_quant: Any = Int8ActPerTensorFloat,
        out_proj_weight_quant: Any = Int8WeightPerTensorFloat,
        out_proj_bias_quant: Any = Int32Bias,
        out_proj_output_quant: Any = None,
        batch_first: bool = False,
        return_quant_tensor: bool = False,
        device: Any = None,
        dtype: Optional[torch.dtype] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        for name, size in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(
                    f"QuantMultiheadAttention: {name} must be a positive int, got {size!r}"
                )
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"QuantMultiheadAttention: embed_dim ({embed_dim}) must be divisible by "
                f"num_heads ({num_heads})"
            )
        if not 0.0 <= float(dropout) <= 1.0:
            raise ValueError(f"QuantMultiheadAttention: dropout must be in [0, 1], got {dropout!r}")
        routed = _route(kwargs)
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        in_quants = dict(
            bias=bias,
            input_quant=in_proj_input_quant,
            weight_quant=in_proj_weight_quant,
            bias_quant=in_proj_bias_quant,
            device=device,
            dtype=dtype,
            **routed["in_proj_"],
        )
        # Built in Brevitas's order: the layers draw their initial weights from the global
        # generator, so a seeded construction gives Brevitas's weights only in that order.
        if self._qkv_same_embed_dim and packed_in_proj:
            self.in_proj = QuantLinear(embed_dim, 3 * embed_dim, **in_quants)
            self.q_proj = self.k_proj = self.v_proj = None
        else:
            self.q_proj = QuantLinear(embed_dim, embed_dim, **in_quants)
            self.k_proj = QuantLinear(self.kdim, embed_dim, **in_quants)
            self.v_proj = QuantLinear(self.vdim, embed_dim, **in_quants)
            self.in_proj = None
        self.out_proj = QuantLinear(
            embed_dim,
            embed_dim,
            bias=bias,
            input_quant=out_proj_input_quant,
            weight_quant=out_proj_weight_quant,
            bias_quant=out_proj_bias_quant,
            output_quant=out_proj_output_quant,
            return_quant_tensor=return_quant_tensor,
            device=device,
            dtype=dtype,
            **routed["out_proj_"],
        )
        if add_bias_kv:
            self.bias_k = nn.Parameter(torch.empty((1, 1, embed_dim), device=device, dtype=dtype))
            self.bias_v = nn.Parameter(torch.empty((1, 1, embed_dim), device=device, dtype=dtype))
        else:
            self.bias_k = self.bias_v = None
        self.softmax_input_quant = QuantIdentity(softmax_input_quant, **routed["softmax_input_"])
        self.attn_output_weights_quant = QuantIdentity(
            attn_output_weights_quant, **routed["attn_output_weights_"]
        )
        self.q_scaled_quant = QuantIdentity(q_scaled_quant, **routed["q_scaled_"])
        self.k_transposed_quant = QuantIdentity(k_transposed_quant, **routed["k_transposed_"])
        self.v_quant = QuantIdentity(v_quant, **routed["v_"])
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def __prepare_scriptable__(self) -> "QuantMultiheadAttention":
        raise script_error(
            self,
            "its forward dispatches on Python state (masks of several kinds, packed or separate "
            "projections, QuantTensor outputs)",
            "Trace it (torch.jit.trace) or compile it (torch.compile) instead.",
        )

    def _apply(self, fn, recurse=True):
        # A quantizer reads the layer's weight as a parameter of its own (the same object):
        # moving to or from 'meta' must leave it so (brevitas_cpp.proxy.materialize).
        return apply_keeping_ties(self, partial(super()._apply, fn, recurse))

    def reset_parameters(self) -> None:
        """The float weights drawn as when the layer was built (out_proj's as nn.Linear's, then
        _reset_parameters), then every quantizer rebuilt (brevitas_cpp.proxy.materialize): what
        gives a layer built on the meta device its values after to_empty(), besides
        load_state_dict()."""
        nn.Linear.reset_parameters(self.out_proj)
        self._reset_parameters()
        reset_quantizers(self)

    def _reset_parameters(self) -> None:
        projections = (
            [self.in_proj] if self.in_proj is not None else [self.q_proj, self.k_proj, self.v_proj]
        )
        for proj in projections:
            xavier_uniform_(proj.weight)
        for proj in projections:
            if proj.bias is not None:
                constant_(proj.bias, 0.0)
        if self.out_proj.bias is not None:
            constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            xavier_normal_(self.bias_v)

    # ---- inputs ----

    def _check_inputs(
        self,
        query: Any,
        key: Any,
        value: Any,
        key_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor],
    ) -> bool:
        """Whether the inputs are batched; errors name the argument at fault."""
        dims = {
            n: _unpack_quant_tensor(t).dim()
            for n, t in (("query", query), ("key", key), ("value", value))
        }
        if dims["query"] not in (2, 3):
            raise ValueError(
                f"QuantMultiheadAttention: query must be unbatched 2-D or batched 3-D, got "
                f"{dims['query']}-D"
            )
        batched = dims["query"] == 3
        if dims["key"] != dims["query"] or dims["value"] != dims["query"]:
            raise ValueError(
                f"QuantMultiheadAttention: key and value must be {dims['query']}-D like query, got "
                f"{dims['key']}-D and {dims['value']}-D"
            )
        if key_padding_mask is not None and key_padding_mask.dim() != (2 if batched else 1):
            raise ValueError(
                f"QuantMultiheadAttention: key_padding_mask must be {2 if batched else 1}-D for a "
                f"{dims['query']}-D query, got {key_padding_mask.dim()}-D"
            )
        if key_padding_mask is not None and not (
            key_padding_mask.dtype == torch.bool or key_padding_mask.is_floating_point()
        ):
            raise TypeError(
                f"QuantMultiheadAttention: key_padding_mask must be bool or floating point, got "
                f"{key_padding_mask.dtype}"
            )
        if attn_mask is not None and attn_mask.dim() not in (2, 3):
            raise ValueError(
                f"QuantMultiheadAttention: attn_mask must be 2-D or 3-D, got {attn_mask.dim()}-D"
            )
        return batched

    def _attn_mask(
        self, attn_mask: Optional[Tensor], tgt_len: int, src_len: int, bsz: int
    ) -> Optional[Tensor]:
        """attn_mask as a bool or float (batch * heads or 1, L, S) tensor."""
        if attn_mask is None:
            return None
        if attn_mask.dtype == torch.uint8:
            warnings.warn(
                "Byte tensor for attn_mask in nn.MultiheadAttention is deprecated. Use bool "
                "tensor instead."
            )
            attn_mask = attn_mask.to(torch.bool)
        elif not (attn_mask.is_floating_point() or attn_mask.dtype == torch.bool):
            raise TypeError(
                f"QuantMultiheadAttention: attn_mask must be float, byte or bool, got "
                f"{attn_mask.dtype}"
            )
        expected = (
            (tgt_len, src_len) if attn_mask.dim() == 2 else (bsz * self.num_heads, tgt_len, src_len)
        )
        if tuple(attn_mask.shape) != expected:
            raise ValueError(
                f"QuantMultiheadAttention: the {attn_mask.dim()}-D attn_mask must have shape "
                f"{expected}, got {tuple(attn_mask.shape)}"
            )
        return attn_mask.unsqueeze(0) if attn_mask.dim() == 2 else attn_mask

    def _project(self, query: Any, key: Any, value: Any) -> Tuple[Tensor, Tensor, Tensor]:
        if self.in_proj is not None:
            if not (_same_tensor(query, key) and _same_tensor(key, value)):
                raise RuntimeError(
                    "QuantMultiheadAttention: the packed in_proj (packed_in_proj=True, the "
                    "default) serves self-attention only, with query, key and value the same "
                    "tensor; build the layer with packed_in_proj=False for distinct inputs"
                )
            q, k, v = self.in_proj(query).chunk(3, dim=-1)
            return q, k, v
        return self.q_proj(query), self.k_proj(key), self.v_proj(value)

    @property
    def in_proj_bias(self) -> Optional[Tensor]:
        """nn.MultiheadAttention's packed input-projection bias (None without bias): what torch's
        Transformer layers read to decide on their fused inference path (which a quantized
        attention never takes, see brevitas_cpp.graph)."""
        if self.in_proj is not None:
            return self.in_proj.bias
        biases = [proj.bias for proj in (self.q_proj, self.k_proj, self.v_proj)]
        return None if biases[0] is None else torch.cat(biases)

    # ---- forward ----

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Optional[Tensor] = None,
        need_weights: bool = True,
        attn_mask: Optional[Tensor] = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> Tuple[Any, Optional[Tensor]]:
        # An error names the layer, or the QuantLinear/QuantIdentity inside it that raised it
        # (the layer does not script: no TorchScript path to keep apart).
        return call_naming_layer(
            self,
            self._layer_forward,
            query,
            key,
            value,
            key_padding_mask,
            need_weights,
            attn_mask,
            average_attn_weights,
            is_causal,
        )

    def _layer_forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Optional[Tensor],
        need_weights: bool,
        attn_mask: Optional[Tensor],
        average_attn_weights: bool,
        is_causal: bool,
    ) -> Tuple[Any, Optional[Tensor]]:
        if any(getattr(t, "is_nested", False) for t in (query, key, value)):
            raise RuntimeError("QuantMultiheadAttention: nested tensors are not supported")
        if is_causal and attn_mask is None:
            # As nn.MultiheadAttention: is_causal is a hint that attn_mask is the causal mask,
            # which is what is applied (the numbers are those of the mask).
            raise RuntimeError(
                "QuantMultiheadAttention: is_causal=True needs attn_mask (the causal mask itself); "
                "is_causal is only a hint, as in nn.MultiheadAttention"
            )
        batched = self._check_inputs(query, key, value, key_padding_mask, attn_mask)
        if self.batch_first and batched:
            # Transposed together, so that query is key is value still holds for the packed path.
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = [t.transpose(1, 0) for t in (query, key)]
                    value = key
            else:
                query, key, value = [t.transpose(1, 0) for t in (query, key, value)]
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        out, weights = self._attention(
            query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights
        )
        if not batched:
            out = out.squeeze(1)
            if weights is not None:
                weights = weights.squeeze(0)
        elif self.batch_first:
            out = out.transpose(1, 0)
        return out, weights

    def _attention(
        self,
        query: Any,
        key: Any,
        value: Any,
        key_padding_mask: Optional[Tensor],
        need_weights: bool,
        attn_mask: Optional[Tensor],
        average_attn_weights: bool,
    ) -> Tuple[Any, Optional[Tensor]]:
        tgt_len, bsz, embed_dim = query.shape
        src_len = key.shape[0]
        if embed_dim != self.embed_dim:
            raise ValueError(
                f"QuantMultiheadAttention: query has {embed_dim} features, expected embed_dim="
                f"{self.embed_dim}"
            )
        if self.in_proj is not None and tuple(key.shape) != tuple(value.shape):
            raise ValueError(
                f"QuantMultiheadAttention: key shape {tuple(key.shape)} does not match value "
                f"shape {tuple(value.shape)}"
            )
        if tuple(key.shape[:2]) != tuple(value.shape[:2]):
            raise ValueError(
                f"QuantMultiheadAttention: key's sequence and batch dims {tuple(key.shape[:2])} "
                f"do not match value's {tuple(value.shape[:2])}"
            )
        heads, head_dim = self.num_heads, self.head_dim
        q, k, v = self._project(query, key, value)
        attn_mask = self._attn_mask(attn_mask, tgt_len, src_len, bsz)
        if self.bias_k is not None and self.bias_v is not None:
            k = torch.cat([k, self.bias_k.repeat(1, bsz, 1)])
            v = torch.cat([v, self.bias_v.repeat(1, bsz, 1)])
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, (0, 1))
        # (batch * heads, seq, head_dim)
        q = q.contiguous().view(tgt_len, bsz * heads, head_dim).transpose(0, 1)
        k = k.contiguous().view(k.shape[0], bsz * heads, head_dim).transpose(0, 1)
        v = v.contiguous().view(v.shape[0], bsz * heads, head_dim).transpose(0, 1)
        if self.add_zero_attn:
            zeros = (bsz * heads, 1, head_dim)
            k = torch.cat([k, torch.zeros(zeros, dtype=k.dtype, device=k.device)], dim=1)
            v = torch.cat([v, torch.zeros(zeros, dtype=v.dtype, device=v.device)], dim=1)
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, (0, 1))
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, (0, 1))
        src_len = k.size(1)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (bsz, src_len):
                raise ValueError(
                    f"QuantMultiheadAttention: key_padding_mask must have shape (batch, source "
                    f"length) = {(bsz, src_len)}, got {tuple(key_padding_mask.shape)}"
                )
            key_padding_mask = (
                key_padding_mask.view(bsz, 1, 1, src_len)
                .expand(-1, heads, -1, -1)
                .reshape(bsz * heads, 1, src_len)
            )
            if attn_mask is None:
                attn_mask = key_padding_mask
            elif attn_mask.dtype == torch.bool:
                attn_mask = attn_mask.logical_or(key_padding_mask)
            else:
                attn_mask = attn_mask.masked_fill(key_padding_mask, float("-inf"))
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            float_mask = torch.zeros_like(attn_mask, dtype=q.dtype)
            attn_mask = float_mask.masked_fill_(attn_mask, float("-inf"))
        q_scaled = self.q_scaled_quant(q / math.sqrt(q.shape[-1]))
        k_transposed = self.k_transposed_quant(k.transpose(-2, -1))
        if attn_mask is not None:
            scores = torch.baddbmm(attn_mask, q_scaled, k_transposed)
        else:
            scores = torch.bmm(q_scaled, k_transposed)
        weights = F.softmax(self.softmax_input_quant(scores), dim=-1)
        if self.training and self.dropout > 0.0:
            weights = F.dropout(weights, p=self.dropout)
        weights = self.attn_output_weights_quant(weights)
        out = torch.bmm(weights, self.v_quant(v))
        out = out.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        out = self.out_proj(out)
        if not need_weights:
            return out, None
        weights = _unpack_quant_tensor(weights).view(bsz, heads, tgt_len, src_len)
        if average_attn_weights:
            weights = weights.sum(dim=1) / heads
        return out, weights

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        # nn.MultiheadAttention's keys: in_proj_weight / in_proj_bias (packed), or
        # q_proj_weight, k_proj_weight, v_proj_weight when kdim/vdim differ.
        for name in (
            "in_proj_weight",
            "in_proj_bias",
            "q_proj_weight",
            "k_proj_weight",
            "v_proj_weight",
        ):
            key = prefix + name
            if key not in state_dict:
                continue
            tensor = state_dict.pop(key)
            kind = "weight" if name.endswith("weight") else "bias"
            if name.startswith("in_proj") and self.in_proj is not None:
                state_dict[f"{prefix}in_proj.{kind}"] = tensor
            elif name.startswith("in_proj"):
                if tensor.size(0) % 3 != 0:
                    raise RuntimeError(
                        f"QuantMultiheadAttention: {key} has {tensor.size(0)} rows, which do not "
                        f"split into q, k and v"
                    )
                for part, chunk in zip("qkv", torch.chunk(tensor, 3, dim=0)):
                    state_dict[f"{prefix}{part}_proj.{kind}"] = chunk
            else:
                state_dict[f"{prefix}{name[0]}_proj.weight"] = tensor
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
