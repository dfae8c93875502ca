"""Scaled dot-product attention (Brevitas's brevitas.nn.quant_sdpa): ScaledDotProductAttention,
F.scaled_dot_product_attention as a module, and QuantScaledDotProductAttention, the same
computation written out with quantizers on the scaled queries (``q_scaled_quant``), the
transposed keys (``k_transposed_quant``), the values (``v_quant``), the scores before the
softmax (``softmax_input_quant``, off by default), the attention weights after it
(``attn_output_weights_quant``) and the output (``sdpa_output_quant``, off by default).

Masks follow F.scaled_dot_product_attention: a bool ``attn_mask`` is True where attention is
allowed, a float one is added to the scores; ``is_causal`` masks the upper triangle; ``scale``
replaces 1/sqrt(E). As in Brevitas (and the float function), ``dropout_p > 0`` drops attention
weights whatever the module's training mode. Keywords are routed by those prefixes.
"""

import math
from typing import Any, Callable, Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from brevitas_cpp.function import identity
from brevitas_cpp.proxy.script import script_error
from brevitas_cpp.quant import Int8ActPerTensorFloat, Uint8ActPerTensorFloat
from brevitas_cpp.quant_tensor import QuantTensor, _unpack_quant_tensor

from ._error_context import call_naming_layer
from .mixin.utils import is_brevitas_keyword
from .quant_activation import QuantIdentity

__all__ = ["ScaledDotProductAttention", "QuantScaledDotProductAttention"]

_PREFIXES = (
    "q_scaled_",
    "k_transposed_",
    "v_",
    "softmax_input_",
    "attn_output_weights_",
    "sdpa_output_",
)


class _AttentionForward(nn.Module):
    """The forward both modules share: F.scaled_dot_product_attention's arguments, computed by
    the subclass's _layer_forward. An error names the module, or the quant layer inside it that
    raised it (neither module scripts: no TorchScript path to keep apart)."""

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Optional[Tensor] = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: Optional[float] = None,
        enable_gqa: bool = False,
    ) -> Tensor:
        return call_naming_layer(
            self,
            self._layer_forward,
            query,
            key,
            value,
            attn_mask,
            dropout_p,
            is_causal,
            scale,
            enable_gqa,
        )

    def _layer_forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Optional[Tensor],
        dropout_p: float,
        is_causal: bool,
        scale: Optional[float],
        enable_gqa: bool,
    ) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define _layer_forward")


class ScaledDotProductAttention(_AttentionForward):
    """F.scaled_dot_product_attention after optional pre-processing of q, k and v."""

    def __init__(
        self,
        pre_process_q: Callable = identity,
        pre_process_k: Callable = identity,
        pre_process_v: Callable = identity,
    ) -> None:
        super().__init__()
        self.pre_process_q = pre_process_q
        self.pre_process_k = pre_process_k
        self.pre_process_v = pre_process_v

    def _layer_forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Optional[Tensor],
        dropout_p: float,
        is_causal: bool,
        scale: Optional[float],
        enable_gqa: bool,
    ) -> Tensor:
        extra: Dict[str, Any] = {}
        if scale is not None:
            extra["scale"] = scale
        if enable_gqa:
            extra["enable_gqa"] = enable_gqa
        return F.scaled_dot_product_attention(
            self.pre_process_q(query),
            self.pre_process_k(key),
            self.pre_process_v(value),
            attn_mask=attn_mask,
            dropout_p=dropout_p,
            is_causal=is_causal,
            **extra,
        )


class QuantScaledDotProductAttention(_AttentionForward):
    """Brevitas's QuantScaledDotProductAttention (see the module docstring)."""

    # The keyword prefixes of its quantizers (as QuantMultiheadAttention's _prefixes).
    _prefixes = _PREFIXES

    def __init__(
        self,
        pre_process_q: Callable = identity,
        pre_process_k: Callable = identity,
        pre_process_v: Callable = identity,
        softmax_input_quant: Any = None,
        attn_output_weights_quant: Any = Uint8ActPerTensorFloat,
        q_scaled_quant: Any = Int8ActPerTensorFloat,
        k_transposed_quant: Any = Int8ActPerTensorFloat,
        v_quant: Any = Int8ActPerTensorFloat,
        sdpa_output_quant: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        routed: Dict[str, Dict[str, Any]] = {p: {} for p in _PREFIXES}
        for name, value in kwargs.items():
            prefix = max((p for p in _PREFIXES if name.startswith(p)), key=len, default=None)
            if prefix is None and is_brevitas_keyword(name):
                continue  # another Brevitas layer's keyword: ignored, as Brevitas ignores it
            if prefix is None:
                raise TypeError(
                    f"QuantScaledDotProductAttention: unexpected keyword argument "
                    f"{name}={value!r}; keywords configure one of its quantizers and must start "
                    f"with its prefix: {', '.join(map(repr, _PREFIXES))}"
                )
            routed[prefix][name[len(prefix) :]] = value
        self.pre_process_q = pre_process_q
        self.pre_process_k = pre_process_k
        self.pre_process_v = pre_process_v
        self.q_scaled_quant = QuantIdentity(q_scaled_quant, **routed["q_scaled_"])
        self.k_transposed_quant = QuantIdentity(k_transposed_quant, **routed["k_transposed_"])
        self.v_quant = QuantIdentity(v_quant, **routed["v_"])
        self.softmax_input_quant = QuantIdentity(softmax_input_quant, **routed["softmax_input_"])
        self.attn_output_weights_quant = QuantIdentity(
            attn_output_weights_quant, **routed["attn_output_weights_"]
        )
        self.sdpa_output_quant = QuantIdentity(sdpa_output_quant, **routed["sdpa_output_"])

    def __prepare_scriptable__(self) -> "QuantScaledDotProductAttention":
        raise script_error(
            self,
            "its pre_process_q/k/v are Python callables",
            "Trace it (torch.jit.trace) or compile it (torch.compile) instead.",
        )

    def _layer_forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attn_mask: Optional[Tensor],
        dropout_p: float,
        is_causal: bool,
        scale: Optional[float],
        enable_gqa: bool,
    ) -> Tensor:
        if is_causal and attn_mask is not None:
            raise ValueError(
                "QuantScaledDotProductAttention: give either attn_mask or is_causal=True, not both"
            )
        if enable_gqa:
            _check_gqa_heads(query, key, value)
        if not 0.0 <= dropout_p <= 1.0:
            raise ValueError(
                f"QuantScaledDotProductAttention: dropout_p must be in [0, 1], got {dropout_p!r}"
            )
        tgt_len, src_len = query.size(-2), key.size(-2)
        scale_factor = 1 / math.sqrt(query.size(-1)) if scale is None else scale
        bias_shape = (tgt_len, src_len) if attn_mask is None else attn_mask.shape
        attn_bias = torch.zeros(bias_shape, dtype=query.dtype, device=query.device)
        if is_causal:
            allowed = torch.ones(tgt_len, src_len, dtype=torch.bool, device=query.device).tril(0)
            attn_bias.masked_fill_(allowed.logical_not(), float("-inf"))
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                attn_bias.masked_fill_(attn_mask.logical_not(), float("-inf"))
            else:
                attn_bias += attn_mask
        query = self.pre_process_q(query)
        key = self.pre_process_k(key)
        value = self.pre_process_v(value)
        q_scaled = self.q_scaled_quant(query * scale_factor)
        k_transposed = self.k_transposed_quant(key.transpose(-2, -1))
        if enable_gqa:
            # Quantized before the heads are repeated: the statistics are those of the key
            # itself, which Brevitas, broadcasting one key head, also sees.
            k_transposed = _repeat_heads(k_transposed, query.size(-3))
        scores = q_scaled @ k_transposed
        scores += attn_bias
        weights = torch.softmax(self.softmax_input_quant(scores), dim=-1)
        weights = torch.dropout(weights, dropout_p, train=True)
        weights = self.attn_output_weights_quant(weights)
        quant_value = self.v_quant(value)
        if enable_gqa:
            quant_value = _repeat_heads(quant_value, query.size(-3))
        return self.sdpa_output_quant(weights @ quant_value)


def _check_gqa_heads(query: Tensor, key: Tensor, value: Tensor) -> None:
    """enable_gqa's conditions, as F.scaled_dot_product_attention sets them: heads at dim -3,
    and the key's and the value's head counts each dividing the query's."""
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if tensor.dim() < 3:
            raise ValueError(
                f"QuantScaledDotProductAttention: enable_gqa=True needs heads at dim -3, so "
                f"{name} must have at least 3 dims (..., heads, length, embedding), got shape "
                f"{tuple(tensor.shape)}"
            )
    heads = query.size(-3)
    for name, tensor in (("key", key), ("value", value)):
        if heads % tensor.size(-3) != 0:
            raise ValueError(
                f"QuantScaledDotProductAttention: enable_gqa=True repeats the {name} heads to "
                f"the query's, so the {name}'s {tensor.size(-3)} heads must divide the query's "
                f"{heads}"
            )


def _repeat_heads(x: Any, heads: int) -> Any:
    """x with each head (dim -3) repeated to ``heads`` heads in all, head h serving query heads
    h * r ... (h + 1) * r - 1 (repeat_interleave, as F.scaled_dot_product_attention). A
    QuantTensor (a quantizer's return_quant_tensor=True) keeps its metadata where its scale and
    zero point are the same for every head; otherwise torch gives a plain tensor."""
    value = _unpack_quant_tensor(x)
    repeats = heads // value.size(-3)
    if repeats == 1:
        return x
    if isinstance(x, QuantTensor) and all(
        t.dim() < 3 or t.size(-3) == 1 for t in (x.scale, x.zero_point)
    ):
        return x.set(value=value.repeat_interleave(repeats, dim=-3))
    return torch.repeat_interleave(x, repeats, dim=-3)
