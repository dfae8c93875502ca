"""A checkpoint is checked at load: values no quantizer can run, a learned entry the saving model
had but the checkpoint lacks, and a checkpoint made for another quantizer are errors that name the
key and the value; the refused entries leave the model's own values in place. Checkpoints without
brevitas_cpp's metadata entries (Brevitas's) load as Brevitas loads them."""

import re
from typing import Callable, Dict

import pytest
import torch
from torch import nn

import brevitas_cpp.nn as qnn
from brevitas_cpp import config
from brevitas_cpp.core._state_dict import METADATA_KEY
from brevitas_cpp.inject.enum import BitWidthImplType, RestrictValueType

ACT_SCALE = "act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.value"
WEIGHT_OFFSET = "weight_quant.tensor_quant.msb_clamp_bit_width_impl.bit_width_offset"


def trained_relu(**kwargs) -> nn.Module:
    """A QuantReLU past its statistics phase (collect_stats_steps=1) and two learned steps."""
    torch.manual_seed(0)
    layer = qnn.QuantReLU(collect_stats_steps=1, **kwargs).train()
    for _ in range(3):
        layer(torch.randn(4, 5)).sum().backward()
    return layer


def learned_bit_width_linear() -> nn.Module:
    return qnn.QuantLinear(3, 3, bias=False, weight_bit_width_impl_type=BitWidthImplType.PARAMETER)


def with_entry(layer: nn.Module, key: str, value: float) -> Dict[str, torch.Tensor]:
    state = layer.state_dict()
    state[key] = torch.full_like(state[key], value)
    return state


def without_entry(layer: nn.Module, key: str) -> Dict[str, torch.Tensor]:
    state = layer.state_dict()
    del state[key]
    return state


# (case, model factory, checkpoint from a model of that factory, error pattern)
BAD_CHECKPOINTS = [
    (
        "zero scale",
        trained_relu,
        lambda m: with_entry(m, ACT_SCALE, 0.0),
        r"positive, finite.*\[0\.0\]",
    ),
    (
        "negative scale",
        trained_relu,
        lambda m: with_entry(m, ACT_SCALE, -0.5),
        r"positive, finite.*\[-0\.5\]",
    ),
    (
        "NaN scale",
        trained_relu,
        lambda m: with_entry(m, ACT_SCALE, float("nan")),
        r"positive, finite.*\[nan\]",
    ),
    (
        "infinite scale",
        trained_relu,
        lambda m: with_entry(m, ACT_SCALE, float("inf")),
        r"positive, finite.*\[inf\]",
    ),
    (
        "log2 scale overflowing",
        lambda: trained_relu(restrict_scaling_type=RestrictValueType.LOG_FP),
        lambda m: with_entry(m, ACT_SCALE, 200.0),
        r"positive, finite.*\[200\.0\].*LogFloatRestrictValue",
    ),
    (
        "bit width below min_bit_width",
        learned_bit_width_linear,
        lambda m: with_entry(m, WEIGHT_OFFSET, -30.0),
        r"bit_width_offset.*gives -28 bits",
    ),
    (
        "bit width above 32",
        learned_bit_width_linear,
        lambda m: with_entry(m, WEIGHT_OFFSET, 31.0),
        r"bit_width_offset.*gives 33 bits, above 32",
    ),
    (
        "constant bit width 0 into a learned one",
        learned_bit_width_linear,
        lambda m: {
            **{k: v for k, v in m.state_dict().items() if k != WEIGHT_OFFSET},
            WEIGHT_OFFSET.replace("bit_width_offset", "bit_width"): torch.tensor(0.0),
        },
        r"gives 0 bits",
    ),
    (
        "missing learned scale",
        trained_relu,
        lambda m: without_entry(m, ACT_SCALE),
        r"Missing key.*" + re.escape(ACT_SCALE),
    ),
    (
        "4-bit checkpoint into an 8-bit layer",
        lambda: qnn.QuantConv2d(2, 2, 3, weight_bit_width=8),
        lambda m: qnn.QuantConv2d(2, 2, 3, weight_bit_width=4).state_dict(),
        r"Unexpected key.*weight_quant.<brevitas_cpp quantizer record: made for another quantizer, "
        r"constant_bit_widths: checkpoint \{'msb_clamp_bit_width_impl': 4\.0\}, this layer "
        r"\{'msb_clamp_bit_width_impl': 8\.0\}",
    ),
    (
        "signed checkpoint into an unsigned activation",
        lambda: qnn.QuantReLU(),
        lambda m: qnn.QuantIdentity().state_dict(),
        r"act_quant.<brevitas_cpp quantizer record: made for another quantizer, signed: checkpoint "
        r"True, this layer False",
    ),
]


@pytest.mark.parametrize(
    "case,factory,checkpoint,pattern", BAD_CHECKPOINTS, ids=[c[0] for c in BAD_CHECKPOINTS]
)
def test_bad_checkpoint_is_refused(case, factory, checkpoint, pattern):
    state = checkpoint(factory())
    model = factory()
    refused = [k for k in (ACT_SCALE, WEIGHT_OFFSET) if k in state and "-bit" not in case]
    with pytest.raises(RuntimeError, match=pattern):
        model.load_state_dict(state)
    # A refused value is not copied in (the quantizer is as the load's rebuild left it).
    for key in refused:
        kept = model.get_parameter(key).detach()
        assert torch.isfinite(kept).all() and not torch.equal(kept, state[key]), key


def test_negative_offset_from_training_loads():
    """An offset that crossed 0 in training (|offset| + min_bit_width, Brevitas's |.|) loads."""
    model = learned_bit_width_linear()
    model.load_state_dict(with_entry(learned_bit_width_linear(), WEIGHT_OFFSET, -0.3))
    assert float(model.weight_quant.bit_width().detach()) == 2.0  # round(|-0.3| + 2)


def test_quantizer_mismatch_is_reported_under_strict_false():
    four_bit = qnn.QuantConv2d(2, 2, 3, weight_bit_width=4)
    eight_bit = qnn.QuantConv2d(2, 2, 3, weight_bit_width=8)
    result = eight_bit.load_state_dict(four_bit.state_dict(), strict=False)
    assert result.missing_keys == []
    assert [k.split(":")[0] for k in result.unexpected_keys] == [
        "weight_quant.<brevitas_cpp quantizer record"
    ]
    assert torch.equal(eight_bit.weight, four_bit.weight)


def test_quantizer_mismatch_loads_when_ignored(monkeypatch):
    monkeypatch.setattr(config, "IGNORE_QUANTIZER_MISMATCH", True)
    four_bit = qnn.QuantConv2d(2, 2, 3, weight_bit_width=4)
    eight_bit = qnn.QuantConv2d(2, 2, 3, weight_bit_width=8)
    eight_bit.load_state_dict(four_bit.state_dict())
    assert torch.equal(eight_bit.weight, four_bit.weight)
    assert float(eight_bit.weight_quant.bit_width()) == 8.0


def brevitas_format(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """The checkpoint as Brevitas saves it: the same keys and per-module metadata, without
    brevitas_cpp's entries."""
    metadata = {
        path: {k: v for k, v in entry.items() if k != METADATA_KEY}
        for path, entry in state._metadata.items()
    }
    state = type(state)(state)
    state._metadata = type(state._metadata)(metadata) if hasattr(state, "_metadata") else metadata
    return state


def fresh_relu_state(model: Callable[[], nn.Module] = qnn.QuantReLU):
    """A checkpoint saved before the first batch: Brevitas saves no learned scale yet."""
    state = model().state_dict()
    assert ACT_SCALE not in state
    return state


def test_missing_scale_of_fresh_checkpoint_loads_strictly():
    qnn.QuantReLU().load_state_dict(fresh_relu_state())


def test_missing_scale_of_brevitas_checkpoint_is_missing_as_in_brevitas(monkeypatch):
    """Brevitas reports the scale missing unless BREVITAS_IGNORE_MISSING_KEYS."""
    state = brevitas_format(fresh_relu_state())
    with pytest.raises(RuntimeError, match="Missing key.*" + re.escape(ACT_SCALE)):
        qnn.QuantReLU().load_state_dict(state)
    monkeypatch.setattr(config, "IGNORE_MISSING_KEYS", True)
    qnn.QuantReLU().load_state_dict(state)


def test_float_checkpoint_loads_strictly():
    """A float model's checkpoint has no quantizer blocks: their state is worked out anew."""
    float_model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU())
    quant_model = nn.Sequential(qnn.QuantConv2d(1, 2, 3), qnn.QuantReLU())
    quant_model.load_state_dict(float_model.state_dict())
    assert torch.equal(quant_model[0].weight, float_model[0].weight)


def test_brevitas_checkpoint_in_learned_phase_ends_statistics():
    """Without brevitas_cpp's counter, a loaded scale ends the statistics phase (Brevitas)."""
    trained = trained_relu()
    model = qnn.QuantReLU(collect_stats_steps=1)
    model.load_state_dict(brevitas_format(trained.state_dict()))
    scaling = model.act_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl
    assert scaling.counter == scaling.collect_stats_steps + 1
    assert torch.equal(scaling.value, trained.state_dict()[ACT_SCALE])
