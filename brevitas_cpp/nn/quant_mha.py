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

One forward serves eager mode, torch.compile and torch.jit.script: it is written in what
TorchScript compiles (plain Tensors, shapes as lists), and the eager-only steps (QuantTensor
inputs, data pointers, naming the layer in errors) sit behind ``torch.jit.is_scripting()``.
"""

import math
import warnings
from functools import partial
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch._subclasses.fake_tensor import is_fake
from torch.nn.init import constant_, xavier_normal_, xavier_uniform_

from brevitas_cpp.proxy.materialize import apply_keeping_ties, reset_quantizers
from brevitas_cpp.proxy.script import ScriptableQuantModule
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


def _plain(t: Tensor) -> Tensor:
    """t's value: in eager mode a QuantTensor input's (between scripted layers inputs are plain)."""
    if torch.jit.is_scripting():
        return t
    return _unpack_quant_tensor(t)


def _same_tensor(a: Tensor, b: Tensor) -> bool:
    """Whether a and b (tensors or QuantTensors) are one tensor: the same object, or in eager
    mode the same data (Brevitas compares data pointers). Traced tensors (torch.export,
    torch.compile) have no data pointer: there the object alone decides. TorchScript has no
    data_ptr: there the same storage, offset, sizes and strides (``is_set_to``) decide."""
    if torch.jit.is_scripting():
        return a is b or a.is_set_to(b)
    a, b = _unpack_quant_tensor(a), _unpack_quant_tensor(b)
    if a is b:
        return True
    if torch.compiler.is_compiling() or is_fake(a) or is_fake(b):
        return False
    return a.data_ptr() == b.data_ptr()


def _shape_text(shape: List[int]) -> str:
    """shape as Python prints a tuple, "(5, 4)", in eager mode and TorchScript alike."""
    if len(shape) == 1:
        return f"({shape[0]},)"
    return "(" + ", ".join([str(size) for size in shape]) + ")"


class QuantMultiheadAttention(ScriptableQuantModule, nn.Module):
    """Brevitas's QuantMultiheadAttention (see the module docstring). ScriptableQuantModule keeps
    TorchScript away from its properties (in_proj_bias, which scripted code does not read)."""

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
    # Written in what TorchScript compiles: shapes compared as lists, messages without
    # conversions (under TorchScript a dtype prints as its number).

    def _check_inputs(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Optional[Tensor],
        attn_mask: Optional[Tensor],
    ) -> bool:
        """Whether the inputs are batched; errors name the argument at fault."""
        query_dim, key_dim, value_dim = _plain(query).dim(), _plain(key).dim(), _plain(value).dim()
        if query_dim not in (2, 3):
            raise ValueError(
                f"QuantMultiheadAttention: query must be unbatched 2-D or batched 3-D, got "
                f"{query_dim}-D"
            )
        batched = query_dim == 3
        if key_dim != query_dim or value_dim != query_dim:
            raise ValueError(
                f"QuantMultiheadAttention: key and value must be {query_dim}-D like query, got "
                f"{key_dim}-D and {value_dim}-D"
            )
        mask_dim = 2 if batched else 1
        if key_padding_mask is not None and key_padding_mask.dim() != mask_dim:
            raise ValueError(
                f"QuantMultiheadAttention: key_padding_mask must be {mask_dim}-D for a "
                f"{query_dim}-D query, got {key_padding_mask.dim()}-D"
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
        if attn_mask.dim() == 2:
            expected = [tgt_len, src_len]
        else:
            expected = [bsz * self.num_heads, tgt_len, src_len]
        if list(attn_mask.shape) != expected:
            raise ValueError(
                f"QuantMultiheadAttention: the {attn_mask.dim()}-D attn_mask must have shape "
                f"{_shape_text(expected)}, got {_shape_text(list(attn_mask.shape))}"
            )
        return attn_mask.unsqueeze(0) if attn_mask.dim() == 2 else attn_mask

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        # TorchScript resolves a submodule's None check statically: only the branch of the
        # layer's own projections is compiled.
        if self.in_proj is not None:
            if not (_same_tensor(query, key) and _same_tensor(key, value)):
                raise RuntimeError(
                    "QuantMultiheadAttention: the packed in_proj (packed_in_proj=True, the "
                    "default) serves self-attention only, with query, key and value the same "
                    "tensor; build the layer with packed_in_proj=False for distinct inputs"
                )
            q, k, v = self.in_proj(query).chunk(3, dim=-1)
        else:
            q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        return q, k, v

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

    # query, key, value and the output: Tensors, or in eager mode QuantTensors (annotated as
    # what TorchScript accepts).
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
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if torch.jit.is_scripting():
            return self._layer_forward(
                query,
                key,
                value,
                key_padding_mask,
                need_weights,
                attn_mask,
                average_attn_weights,
                is_causal,
            )
        # An error names the layer, or the QuantLinear/QuantIdentity inside it that raised it
        # (TorchScript compiles no try statement: eager mode only).
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
    ) -> Tuple[Tensor, Optional[Tensor]]:
        if _plain(query).is_nested or _plain(key).is_nested or _plain(value).is_nested:
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
                    query = query.transpose(1, 0)
                    key = query
                    value = query
                else:
                    query, key = query.transpose(1, 0), key.transpose(1, 0)
                    value = key
            else:
                query, key, value = (
                    query.transpose(1, 0),
                    key.transpose(1, 0),
                    value.transpose(1, 0),
                )
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
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Optional[Tensor],
        need_weights: bool,
        attn_mask: Optional[Tensor],
        average_attn_weights: bool,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        tgt_len, bsz, embed_dim = query.shape[0], query.shape[1], query.shape[2]
        src_len = key.shape[0]
        if embed_dim != self.embed_dim:
            raise ValueError(
                f"QuantMultiheadAttention: query has {embed_dim} features, expected embed_dim="
                f"{self.embed_dim}"
            )
        key_shape, value_shape = list(key.shape), list(value.shape)
        if self.in_proj is not None and key_shape != value_shape:
            raise ValueError(
                f"QuantMultiheadAttention: key shape {_shape_text(key_shape)} does not match "
                f"value shape {_shape_text(value_shape)}"
            )
        if key_shape[:2] != value_shape[:2]:
            raise ValueError(
                f"QuantMultiheadAttention: key's sequence and batch dims "
                f"{_shape_text(key_shape[:2])} do not match value's {_shape_text(value_shape[:2])}"
            )
        heads, head_dim = self.num_heads, self.head_dim
        q, k, v = self._project(query, key, value)
        attn_mask = self._attn_mask(attn_mask, tgt_len, src_len, bsz)
        bias_k, bias_v = self.bias_k, self.bias_v
        if bias_k is not None and bias_v is not None:
            k = torch.cat([k, bias_k.repeat(1, bsz, 1)])
            v = torch.cat([v, bias_v.repeat(1, bsz, 1)])
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, [0, 1])
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, [0, 1])
        # (batch * heads, seq, head_dim). reshape copies exactly where contiguous().view would;
        # after a contiguous() TorchScript's autodiff took the linear into a subgraph whose
        # derivative sums a transposed (batch_first) input in another order than eager autograd.
        q = q.reshape(tgt_len, bsz * heads, head_dim).transpose(0, 1)
        k = k.reshape(k.shape[0], bsz * heads, head_dim).transpose(0, 1)
        v = v.reshape(v.shape[0], bsz * heads, head_dim).transpose(0, 1)
        if self.add_zero_attn:
            zeros = [bsz * heads, 1, head_dim]
            k = torch.cat([k, torch.zeros(zeros, dtype=k.dtype, device=k.device)], dim=1)
            v = torch.cat([v, torch.zeros(zeros, dtype=v.dtype, device=v.device)], dim=1)
            if attn_mask is not None:
                attn_mask = F.pad(attn_mask, [0, 1])
            if key_padding_mask is not None:
                key_padding_mask = F.pad(key_padding_mask, [0, 1])
        src_len = k.size(1)
        if key_padding_mask is not None:
            padding_shape = list(key_padding_mask.shape)
            if padding_shape != [bsz, src_len]:
                raise ValueError(
                    f"QuantMultiheadAttention: key_padding_mask must have shape (batch, source "
                    f"length) = {_shape_text([bsz, src_len])}, got {_shape_text(padding_shape)}"
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
        weights = _plain(weights).view(bsz, heads, tgt_len, src_len)
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
