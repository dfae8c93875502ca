"""Learned rounding against Brevitas 0.12 (tests/golden/brevitas_0_12_modules.pt): every
implementation inside LearnedRoundSte (train outputs, gradients to x and to the learned value,
eval outputs, state_dict keys) and a weight quantizer with learned rounding in a QuantLinear
(Brevitas's LEARNED_ROUND solver path; here the blocks set on the quantizer), plus the formulas
written out."""

import os

import pytest
import torch

from brevitas_cpp import config
from brevitas_cpp.core.function_wrapper import Identity
from brevitas_cpp.core.function_wrapper import learned_round as lr
from brevitas_cpp.nn import QuantLinear
from brevitas_cpp.quant import Int8WeightPerTensorFloat

GOLDEN_FILE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "golden", "brevitas_0_12_modules.pt"
)
GOLDEN = torch.load(GOLDEN_FILE)["learned_round"]
CASES = {
    "hard_sigmoid": (lr.LearnedRoundHardSigmoid, {}),
    "hard_sigmoid_stretched": (
        lr.LearnedRoundHardSigmoid,
        dict(learned_round_zeta=1.2, learned_round_gamma=-0.2),
    ),
    "sigmoid": (lr.LearnedRoundSigmoid, {}),
    "sigmoid_t05": (lr.LearnedRoundSigmoid, dict(learned_round_temperature=0.5)),
    "identity": (lr.LearnedRoundIdentity, {}),
}
IMPLS = {
    "HARD_SIGMOID": lr.LearnedRoundHardSigmoid,
    "SIGMOID": lr.LearnedRoundSigmoid,
    "IDENTITY": lr.LearnedRoundIdentity,
}


@pytest.mark.parametrize("name", list(CASES))
def test_block_matches_brevitas(name):
    rec = GOLDEN["blocks"][name]
    impl, kwargs = CASES[name]
    block = lr.LearnedRoundSte(impl(**kwargs), rec["value"].clone(), Identity())
    assert list(block.state_dict()) == rec["keys"]
    x = rec["x"].clone().requires_grad_(True)
    out = block(x)
    assert torch.equal(out.detach(), rec["out"])
    (out * rec["g"]).sum().backward()
    assert torch.equal(x.grad, rec["x_grad"])  # straight through floor / round
    assert torch.equal(block.value.grad, rec["value_grad"])
    block.eval()
    assert torch.equal(block(rec["x"]), rec["eval_out"])


def _learned_round_quant(impl_name, through_enums):
    if through_enums:  # Brevitas's way: the solver builds the blocks from the enums
        return Int8WeightPerTensorFloat.let(
            float_to_int_impl_type="learned_round", learned_round_impl_type=impl_name.lower()
        )
    return Int8WeightPerTensorFloat.let(
        float_to_int_impl=lr.LearnedRoundSte,
        learned_round_impl=IMPLS[impl_name],
        learned_round_init=torch.zeros(4, 6),
    )


@pytest.mark.parametrize("through_enums", [True, False])
@pytest.mark.parametrize("impl_name", list(IMPLS))
def test_weight_quantizer_matches_brevitas(impl_name, through_enums):
    rec = GOLDEN["quantizers"][impl_name]
    weight_quant = _learned_round_quant(impl_name, through_enums)
    layer = QuantLinear(6, 4, bias=False, weight_quant=weight_quant)
    layer.load_state_dict(rec["state_dict"])
    qw = layer.quant_weight()
    assert torch.equal(qw.value, rec["value"]) and torch.equal(qw.scale, rec["scale"])
    (qw.value * rec["g"]).sum().backward()
    grads = {n: p.grad for n, p in layer.named_parameters() if p.grad is not None}
    assert sorted(grads) == sorted(rec["grads"])
    for n, grad in grads.items():
        # The weight's gradient also flows through the max-abs scale: float32 summation order.
        torch.testing.assert_close(grad, rec["grads"][n], rtol=1e-6, atol=1e-6)
    layer.eval()
    assert torch.equal(layer.quant_weight().value, rec["eval_value"])


def test_formulas():
    v = torch.tensor([-3.0, -0.2, 0.0, 0.4, 5.0])
    x = torch.tensor([0.3, 1.7, -2.5, 2.0, -0.1])
    hard = lr.LearnedRoundHardSigmoid()
    h = torch.clamp(torch.sigmoid(v) * 1.2 - 0.1, 0.0, 1.0)
    assert torch.allclose(hard(v), h) and torch.equal(hard.round_forward(x, h), torch.floor(x) + h)
    assert hard(v)[0] == 0.0 and hard(v)[-1] == 1.0  # the stretch reaches 0 and 1 exactly
    hard.eval()
    assert hard(v).tolist() == [False, False, False, True, True]  # h > 0.5
    soft = lr.LearnedRoundSigmoid(learned_round_temperature=0.5)
    assert torch.allclose(soft(v), torch.sigmoid(2 * v))
    soft.eval()
    assert soft(v).tolist() == [False, False, False, True, True]  # v > 0
    ident = lr.LearnedRoundIdentity()
    p = ident(v)
    assert p.tolist() == pytest.approx([-0.5, -0.2, 0.0, 0.4, 0.5])
    assert torch.equal(ident.round_forward(x, p), torch.round(x + p))
    with pytest.raises(ValueError, match="temperature"):
        lr.LearnedRoundSigmoid(learned_round_temperature=0)


def test_subtensor_slice_of_the_learned_value():
    torch.manual_seed(0)
    layer = QuantLinear(6, 4, bias=False, weight_quant=_learned_round_quant("SIGMOID", False))
    block = layer.weight_quant.tensor_quant.int_quant.float_to_int_impl
    with torch.no_grad():
        block.value.copy_(torch.randn(4, 6))
    layer.eval()
    full = layer.quant_weight()
    part = layer.quant_weight(subtensor_slice_list=[(1, 3), None])
    assert part.value.shape == (2, 6)
    # The slice's own scale (max-abs of the slice), but the slice's own rounding decisions.
    expected = (torch.floor(layer.weight[1:3] / part.scale) + (block.value[1:3] > 0)).clamp(
        -127, 127
    ) * part.scale
    assert torch.equal(part.value, expected.detach())
    assert full.value.shape == (4, 6) and block.tensor_slicer.subtensor_slice_list == [None]


def test_missing_value_ignored_with_the_flag(monkeypatch):
    block = lr.LearnedRoundSte(lr.LearnedRoundIdentity(), torch.zeros(3), Identity())
    assert "value" in block.load_state_dict({}, strict=False).missing_keys
    monkeypatch.setattr(config, "IGNORE_MISSING_KEYS", True)
    assert block.load_state_dict({}, strict=True).missing_keys == []


def test_scripted_and_compiled_layer_equal_eager():
    torch.manual_seed(1)
    init = torch.randn(4, 6)
    layer = QuantLinear(6, 4, bias=False, weight_quant=_learned_round_quant("HARD_SIGMOID", False))
    with torch.no_grad():
        layer.weight_quant.tensor_quant.int_quant.float_to_int_impl.value.copy_(init)
    x = torch.randn(3, 6)
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=not config.JIT_ENABLED)
    for train in (True, False):
        layer.train(train)
        assert torch.equal(compiled(x), layer(x))
        assert torch.equal(torch.jit.script(layer)(x), layer(x))
