"""The Brevitas names issue 32 asked for, against Brevitas's recorded numbers
(golden/brevitas_0_12_compat.pt, golden/record_compat.py) or formulas written out here:
HadamardClassifier, StochasticRoundSte, QuantRestrictValue, utils.quant_utils,
quant_inference_mode and the small modules (compiler, library, python_utils, config)."""

import logging
import os

import pytest
import torch
import torch.nn.functional as F

import brevitas_cpp.nn as qnn
from brevitas_cpp import config
from brevitas_cpp._unsupported import UnsupportedError
from brevitas_cpp.core.function_wrapper import CeilSte, FloorSte, RoundSte, StochasticRoundSte
from brevitas_cpp.core.restrict_val import QuantRestrictValue
from brevitas_cpp.export.inference import quant_inference_mode
from brevitas_cpp.inject.enum import FloatToIntImplType
from brevitas_cpp.nn import HadamardClassifier
from brevitas_cpp.proxy import QuantProxyFromInjector
from brevitas_cpp.quant import Int8WeightPerTensorFloat, Int32Bias
from brevitas_cpp.quant_tensor import IntQuantTensor, QuantTensor
from brevitas_cpp.utils import python_utils, quant_utils

GOLDEN = torch.load(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "brevitas_0_12_compat.pt")
)


@pytest.mark.parametrize("record", GOLDEN["hadamard"], ids=lambda r: f"{r['case']}-{r['training']}")
def test_hadamard_classifier_matches_brevitas(record):
    in_channels, out_channels, fixed_scale, _, bit_width, signed = record["case"]
    layer = HadamardClassifier(in_channels, out_channels, fixed_scale, return_quant_tensor=True)
    layer.train(record["training"])
    value = record["value"].clone().requires_grad_(True)
    inp = IntQuantTensor(
        value,
        record["input_scale"],
        torch.tensor(0.0),
        float(bit_width),
        signed,
        record["training"],
    )
    out = layer(inp)
    assert isinstance(out, IntQuantTensor) and bool(out.signed) is record["out_signed"]
    assert torch.equal(out.value, record["out_value"])
    assert torch.equal(out.scale, record["out_scale"])
    assert torch.equal(out.zero_point, record["out_zero_point"])
    assert torch.equal(out.bit_width, record["out_bit_width"])
    params = [value] + ([] if fixed_scale else [layer.scale])
    loss = (out.value * record["g"]).sum() + (out.scale * record["h"]).sum()
    grads = torch.autograd.grad(loss, params)
    torch.testing.assert_close(grads[0], record["grad_value"], rtol=1e-6, atol=1e-7)
    if not fixed_scale:
        torch.testing.assert_close(grads[1], record["grad_scale"], rtol=1e-6, atol=1e-7)
    assert sorted(layer.state_dict()) == record["state_dict_keys"]


def _sylvester(n: int) -> torch.Tensor:
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.kron(torch.tensor([[1.0, 1.0], [1.0, -1.0]]), h)
    return h


def test_hadamard_classifier_plain_input_is_the_formula():
    """Brevitas 0.12.1 fails on a plain input (no .value); here it gives the formula's tensor."""
    torch.manual_seed(0)
    layer = HadamardClassifier(6, 3)
    assert layer.scale.item() == torch.tensor(1 / 3**0.5).item()  # 1/sqrt(out), float32
    x = torch.randn(4, 6, dtype=torch.float64)
    layer.double()
    norm = x.pow(2).sum().sqrt() + 1e-8  # Frobenius norm of the whole batch
    expected = -layer.scale.detach() * (x / norm) @ _sylvester(8)[:3, :6].double().T
    out = layer(x)
    assert type(out) is torch.Tensor
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    assert torch.equal(torch.jit.script(layer)(x), out)
    # A quantized input without return_quant_tensor (Brevitas fails there too): the plain value.
    qx = IntQuantTensor(x, torch.tensor(1.0, dtype=torch.float64), 0.0, 8.0, True, False)
    assert torch.equal(layer(qx), out)


def test_hadamard_classifier_state_and_bad_input():
    layer = HadamardClassifier(5, 3, fixed_scale=True)
    assert "proj" not in layer.state_dict() and "scale" in layer.state_dict()
    assert not any(p.requires_grad for p in layer.parameters())
    # A checkpoint holding the matrix loads (as in Brevitas), one without it too.
    state = {"scale": torch.tensor(0.5), "proj": -layer.proj}
    result = layer.load_state_dict(state)
    assert not result.missing_keys and not result.unexpected_keys
    assert torch.equal(layer.proj, -_sylvester(8))
    with pytest.raises(RuntimeError, match="zero point"):
        HadamardClassifier(5, 3, return_quant_tensor=True)(
            IntQuantTensor(torch.ones(1, 5), 1.0, 1.0, 8.0, False, False)
        )
    with pytest.raises(RuntimeError, match="return_quant_tensor=True, but the output is not"):
        HadamardClassifier(5, 3, return_quant_tensor=True)(torch.ones(1, 5))
    with pytest.raises(ValueError, match="in_channels must be a positive integer"):
        HadamardClassifier(0, 3)
    from brevitas_cpp.nn.hadamard_classifier import hadamard

    assert (hadamard(4) == _sylvester(4).numpy()).all()
    with pytest.raises(ValueError, match="power of 2"):
        hadamard(6)


def test_stochastic_round_draws_brevitas_numbers():
    record = GOLDEN["stochastic_round"]
    block = StochasticRoundSte(seed=record["seed"])
    for expected in record["train_draws"]:
        assert torch.equal(block(record["x"]), expected)
    block.eval()
    assert torch.equal(block(record["x"]), record["eval"])
    x = record["x"].clone().requires_grad_(True)
    StochasticRoundSte(seed=1)(x).sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))  # straight through
    layer = qnn.QuantLinear(4, 3, weight_float_to_int_impl_type="stochastic_round")
    assert isinstance(
        layer.weight_quant.tensor_quant.int_quant.float_to_int_impl, StochasticRoundSte
    )


def test_quant_restrict_value_keeps_the_quantizer_value():
    linear = torch.nn.Linear(4, 3)
    quantizer = Int8WeightPerTensorFloat.let(
        module=linear, tracked_parameter_list=[linear.weight]
    ).tensor_quant
    x = torch.rand(3, 4) + 0.1
    block = QuantRestrictValue(quantizer, (1,), None)
    assert torch.equal(block(x), quantizer(x)[0])
    assert torch.equal(QuantRestrictValue(quantizer, (1,), (12,))(x), quantizer(x)[0].view(12))
    assert block.restrict_init_float(0.25) == 0.25  # linear domain
    assert torch.equal(block.restrict_init_tensor(x), x)
    assert torch.equal(block.restrict_init_module()(x), x)


def test_quant_utils():
    learned = qnn.QuantLinear(4, 3, weight_bit_width_impl_type="parameter")
    assert quant_utils.has_learned_weight_bit_width(learned.weight_quant)
    assert not quant_utils.has_learned_weight_bit_width(qnn.QuantLinear(4, 3).weight_quant)
    assert not quant_utils.has_learned_activation_bit_width(qnn.QuantReLU().act_quant)
    enum = quant_utils.float_to_int_impl_to_enum
    assert enum(RoundSte()) == FloatToIntImplType.ROUND and enum(CeilSte()) == "ceil"
    assert enum(FloorSte()) == FloatToIntImplType.FLOOR and enum(torch.nn.ReLU()) is None
    assert enum(StochasticRoundSte(deterministic_inference=False)) == "stochastic_round"
    assert enum(StochasticRoundSte()) == FloatToIntImplType.ROUND


def test_groupwise_dequant_expand_is_brevitas_algorithm():
    """Brevitas's steps written out: flatten the (groups, size) dims, expand the metadata, drop
    the padded columns."""
    torch.manual_seed(0)
    value = torch.randn(3, 2, 4)  # 3 rows, 2 groups of 4 along dim 1 (7 real columns)
    scale = torch.rand(3, 2, 1)
    zero_point = torch.tensor(0.0)
    got = quant_utils.groupwise_dequant_expand(value, scale, zero_point, 1, (3, 7))
    assert torch.equal(got[0], value.flatten(1, 2)[:, :7])
    assert torch.equal(got[1], scale.expand(3, 2, 4).flatten(1, 2)[:, :7])
    assert got[2] is zero_point
    got = quant_utils.groupwise_dequant_expand(value, scale, scale, -1, (3, 8))
    assert torch.equal(got[2], scale.expand(3, 2, 4).flatten(1, 2))


def test_cached_io_records():
    qt = IntQuantTensor(torch.randn(2, 3), torch.tensor(0.1), 0.0, 8.0, True, False)
    full, meta = quant_utils._CachedIO(qt, False), quant_utils._CachedIO(qt, True)
    assert torch.equal(full.value, qt.value) and meta.value is None
    assert meta.quant_tensor.value is None and meta.shape == qt.value.shape
    assert torch.equal(meta.scale, qt.scale) and torch.equal(meta.bit_width, qt.bit_width)
    assert meta.signed == qt.signed


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        qnn.QuantIdentity(return_quant_tensor=True),
        qnn.QuantLinear(6, 4, bias=True, bias_quant=Int32Bias, return_quant_tensor=True),
    ).eval()


def test_quant_inference_mode_returns_brevitas_outputs():
    model, x = _model(), torch.randn(5, 6)
    with torch.no_grad():
        reference = model(x)
        with quant_inference_mode(model):
            first, second = model(x), model(x)  # Brevitas drops QuantTensors after the first
        after = model(x)
    assert isinstance(first, QuantTensor) and type(second) is torch.Tensor
    assert torch.equal(first.value, reference.value) and torch.equal(second, reference.value)
    assert isinstance(after, QuantTensor)  # restored on exit
    with quant_inference_mode(model, enabled=False):
        assert isinstance(model(x), QuantTensor) and isinstance(model(x), QuantTensor)


def test_quant_inference_mode_refusals():
    model = _model().train()
    with pytest.raises(RuntimeError, match="model.eval"):
        with quant_inference_mode(model):
            pass
    with pytest.raises(UnsupportedError, match="torch.compile"):
        with quant_inference_mode(model.eval(), compile=True):
            pass
    with pytest.raises(TypeError, match="enabled must be a bool"):
        quant_inference_mode(model, enabled=1)
    proxies = [m for m in model.modules() if isinstance(m, QuantProxyFromInjector)]
    for proxy in proxies:
        with pytest.raises(UnsupportedError, match=r"compile_quant .*torch.compile\(model\)"):
            proxy.compile_quant()
    assert proxies


def test_small_modules():
    from brevitas_cpp import compiler, pkg_dir, torch_version
    from brevitas_cpp.function import tensor_clamp_ste_
    from brevitas_cpp.library import custom_op
    from brevitas_cpp.utils.logging import setup_logger

    assert compiler.disable is torch._dynamo.disable and compiler.torch_version is torch_version
    assert custom_op is torch.library.custom_op
    assert os.path.isfile(os.path.join(pkg_dir, "__init__.py"))
    assert config.NATIVE_STE_BACKEND_ENABLED and config.LOGGING_LEVEL == os.environ.get(
        "BREVITAS_LOGGING", "CRITICAL"
    )
    logger = setup_logger("brevitas_cpp.test_compat")
    assert logger.level == logging.getLevelName(config.LOGGING_LEVEL) and not logger.propagate
    assert python_utils.recurse_getattr(torch.nn.Linear(2, 3), "weight.shape") == (3, 2)
    assert python_utils.islambda(lambda: 0) and not python_utils.islambda(print)
    calls = []
    hooked = python_utils.hooked_on_a_function(F.relu, lambda *a: calls.append(a))
    assert torch.equal(hooked(torch.tensor([-1.0])), torch.tensor([0.0])) and len(calls) == 1
    with python_utils.patch(torch, "relu", None):
        assert torch.relu is None
    assert torch.relu is not None
    x = torch.tensor([1.5, 0.4, -1.5], requires_grad=True)
    y = tensor_clamp_ste_(x, torch.tensor([-1.0, -0.5, -0.5]), torch.tensor([1.0, 0.5, 0.5]))
    assert torch.equal(x.detach(), torch.tensor([1.0, 0.4, -0.5])) and torch.equal(y, x)
    y.backward(torch.tensor([0.1, -0.1, 0.1]))
    assert torch.equal(x.grad, torch.tensor([0.1, -0.1, 0.1]))  # straight through
