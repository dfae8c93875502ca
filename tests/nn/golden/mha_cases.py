"""The attention cases of brevitas_0_12_mha.pt, defined once for both libraries (see
rnn_cases.py: record_mha.py builds them from Brevitas, tests/nn/test_quant_mha.py from
brevitas_cpp; "quant:<Name>" is that library's quantizer <Name>)."""

from typing import Any, Dict

import torch

EMBED, HEADS, KDIM = 8, 2, 6
TGT, SRC, BATCH = 4, 5, 2
STEPS = 3
LR = 0.05
QUANT_LR = 0.002

CASES: Dict[str, Dict[str, Any]] = {
    # Self-attention through the packed in_proj, default quantizers, weights averaged.
    "mha_self": {"kwargs": {}, "self_attention": True},
    # Separate projections (kdim), batch_first, both masks, bias_kv, zero attention, the output
    # quantizer on, per-head weights and QuantTensor outputs. (Not softmax_input_quant: a
    # padding mask puts -inf among its inputs, whose scale brevitas_cpp refuses as infinite
    # where Brevitas carries on; see mha_softmax_input.)
    "mha_cross_masks": {
        "kwargs": {
            "kdim": KDIM,
            "vdim": KDIM,
            "batch_first": True,
            "add_bias_kv": True,
            "add_zero_attn": True,
            "out_proj_output_quant": "quant:Int8ActPerTensorFloat",
            "return_quant_tensor": True,
            "in_proj_weight_bit_width": 4,
            "attn_output_weights_bit_width": 6,
            "q_scaled_collect_stats_steps": 2,
        },
        "self_attention": False,
    },
    # The optional softmax-input quantizer, with a causal float mask (finite values).
    "mha_softmax_input": {
        "kwargs": {"softmax_input_quant": "quant:Int8ActPerTensorFloat"},
        "self_attention": True,
        "float_mask": True,
    },
}


def lr_of(param_name: str) -> float:
    return QUANT_LR if "tensor_quant" in param_name else LR


def resolve(lib_quant: Any, value: Any) -> Any:
    if isinstance(value, str) and value.startswith("quant:"):
        return getattr(lib_quant, value[len("quant:") :])
    return value


def build(lib_nn: Any, lib_quant: Any, name: str) -> torch.nn.Module:
    kwargs = {k: resolve(lib_quant, v) for k, v in CASES[name]["kwargs"].items()}
    return lib_nn.QuantMultiheadAttention(EMBED, HEADS, **kwargs)


def float_twin(name: str) -> torch.nn.Module:
    kw = CASES[name]["kwargs"]
    return torch.nn.MultiheadAttention(
        EMBED,
        HEADS,
        kdim=kw.get("kdim"),
        vdim=kw.get("vdim"),
        batch_first=kw.get("batch_first", False),
        add_bias_kv=kw.get("add_bias_kv", False),
        add_zero_attn=kw.get("add_zero_attn", False),
    )


def inputs(name: str, gen: torch.Generator) -> Dict[str, Any]:
    """One forward's arguments: (query, key, value) and keywords."""
    kw = CASES[name]["kwargs"]
    if CASES[name]["self_attention"]:
        x = torch.randn(SRC, BATCH, EMBED, generator=gen)
        if CASES[name].get("float_mask"):
            causal = torch.triu(torch.full((SRC, SRC), -4.0), diagonal=1)
            return {"args": (x, x, x), "kwargs": {"attn_mask": causal}}
        return {"args": (x, x, x), "kwargs": {}}
    query = torch.randn(BATCH, TGT, EMBED, generator=gen)
    key = torch.randn(BATCH, SRC, kw["kdim"], generator=gen)
    padding = torch.zeros(BATCH, SRC, dtype=torch.bool)
    padding[0, -1] = True
    padding[1, 0] = True
    attn_mask = 0.1 * torch.randn(TGT, SRC, generator=gen)
    return {
        "args": (query, key, key),
        "kwargs": {
            "key_padding_mask": padding,
            "attn_mask": attn_mask,
            "average_attn_weights": False,
        },
    }


# QuantScaledDotProductAttention: keywords of the layer, keywords of its forward, whether the
# query, key and value are separate tensors (L = 4 queries over S = 5 keys) or one (L = S = 5).
SDPA_CASES: Dict[str, Dict[str, Any]] = {
    "sdpa_default": {"kwargs": {"q_scaled_collect_stats_steps": 2}, "call": {}, "square": False},
    "sdpa_float_mask_scale": {
        "kwargs": {
            "softmax_input_quant": "quant:Int8ActPerTensorFloat",
            "sdpa_output_quant": "quant:Int8ActPerTensorFloat",
            "v_bit_width": 4,
        },
        "call": {"float_mask": True, "scale": 0.3},
        "square": False,
    },
    "sdpa_bool_mask": {"kwargs": {}, "call": {"bool_mask": True}, "square": False},
    "sdpa_causal": {
        "kwargs": {"attn_output_weights_bit_width": 4},
        "call": {"is_causal": True},
        "square": True,
    },
}


def build_sdpa(lib_nn: Any, lib_quant: Any, name: str) -> torch.nn.Module:
    kwargs = {k: resolve(lib_quant, v) for k, v in SDPA_CASES[name]["kwargs"].items()}
    return lib_nn.QuantScaledDotProductAttention(**kwargs)


def sdpa_inputs(name: str, gen: torch.Generator) -> Dict[str, Any]:
    case = SDPA_CASES[name]
    tgt = SRC if case["square"] else TGT
    q = torch.randn(BATCH, HEADS, tgt, EMBED, generator=gen)
    k = torch.randn(BATCH, HEADS, SRC, EMBED, generator=gen)
    v = torch.randn(BATCH, HEADS, SRC, EMBED, generator=gen)
    call = case["call"]
    kwargs: Dict[str, Any] = {}
    if call.get("float_mask"):
        kwargs["attn_mask"] = 0.5 * torch.randn(tgt, SRC, generator=gen)
    if call.get("bool_mask"):
        mask = torch.ones(tgt, SRC, dtype=torch.bool)
        mask[:, -2:] = False
        kwargs["attn_mask"] = mask
    for key in ("scale", "is_causal"):
        if key in call:
            kwargs[key] = call[key]
    return {"args": (q, k, v), "kwargs": kwargs}
