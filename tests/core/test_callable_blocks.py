"""Core blocks take what Brevitas takes: any callable where a block goes (a function, a
``unittest.mock.Mock``: Brevitas only calls its blocks), a Python float from a scale block, and
``None`` as the concatenation dim of a single tracked parameter. The fused ops keep their
exact-type checks, so such blocks run Brevitas's composition, written out here as the reference."""

from unittest import mock

import pytest
import torch

import brevitas_cpp.core._checks as checks
from brevitas_cpp import config
from brevitas_cpp.core.function_wrapper import FloatClamp, Identity, TensorClamp
from brevitas_cpp.core.quant import BinaryQuant, FloatQuant, IntQuant, TernaryQuant
from brevitas_cpp.core.stats import AbsMax
from brevitas_cpp.core.stats.stats_wrapper import _ParameterListStats

X = torch.tensor([-1.3, -0.26, -0.04, 0.0, 0.11, 0.49, 0.95, 2.2])


@pytest.mark.skipif(config.JIT_ENABLED, reason="compiled blocks take modules only")
def test_int_quant_calls_function_blocks():
    float_to_int = mock.Mock(side_effect=torch.round)
    clamps = []

    def clamp(x, min_val, max_val):
        clamps.append((float(min_val), float(max_val)))
        return torch.clamp(x, min_val, max_val)

    quant = IntQuant(
        False, True, Identity(), float_to_int_impl=float_to_int, tensor_clamp_impl=clamp
    )
    scale, zero_point, bit_width = torch.tensor(0.1), torch.tensor(0.0), torch.tensor(4.0)
    y = quant(scale, zero_point, bit_width, X)
    # Signed 4 bits, not narrow: [-8, 7].
    assert torch.equal(y, torch.clamp(torch.round(X / scale), -8.0, 7.0) * scale)
    float_to_int.assert_called_once()
    assert torch.equal(float_to_int.call_args.args[0], X / scale)
    assert clamps == [(-8.0, 7.0)]


@pytest.mark.skipif(config.JIT_ENABLED, reason="compiled blocks take modules only")
def test_scale_blocks_may_return_python_floats():
    # BinaryQuant: +scale for x >= 0, -scale otherwise.
    y, scale, *_ = BinaryQuant(lambda x: 0.5)(X)
    assert scale == 0.5
    assert torch.equal(y, torch.where(X >= 0, 0.5, -0.5))
    # TernaryQuant: sign(x) * scale where |x| > threshold * scale.
    y, *_ = TernaryQuant(mock.Mock(return_value=0.5), 0.5)(X)
    assert torch.equal(y, torch.where(X.abs() > 0.25, torch.sign(X) * 0.5, 0.0))


@pytest.mark.skipif(config.JIT_ENABLED, reason="compiled blocks take modules only")
def test_float_quant_with_mock_scale_blocks():
    scaling_impl = mock.Mock(side_effect=lambda x, threshold: 0.25)
    float_scaling_impl = mock.Mock(side_effect=lambda e, m, bias: 1.0)
    quant = FloatQuant(
        bit_width=4,
        signed=True,
        exponent_bit_width=2,
        mantissa_bit_width=1,
        exponent_bias=1,
        float_clamp_impl=FloatClamp(TensorClamp(), True),
        input_view_impl=Identity(),
        scaling_impl=scaling_impl,
        float_scaling_impl=float_scaling_impl,
    )
    y, scale, *_ = quant(X)
    assert scale == 0.25
    scaling_impl.assert_called_once_with(X, 1.0)
    # FP4 E2M1 (bias 1): 0, 0.5, 1, 1.5, 2, 3, 4, 6; ties to the even mantissa.
    e2m1 = torch.tensor([-6.0, -1.0, 0.0, 0.0, 0.5, 2.0, 4.0, 6.0])
    assert torch.equal(y, e2m1 * 0.25)


def test_single_parameter_stats_take_a_none_concat_dim():
    w = torch.nn.Parameter(torch.tensor([[0.5, -2.0], [1.5, 0.25]]))
    stats = _ParameterListStats(AbsMax(), (), Identity(), None, [w])
    assert stats(w).item() == 2.0
    with pytest.raises(
        ValueError, match=r"stats_input_concat_dim must be an int .* with 2 tracked parameters"
    ):
        _ParameterListStats(AbsMax(), (), Identity(), None, [w, w])


def test_non_callables_and_classes_are_refused():
    with pytest.raises(TypeError, match=r"BinaryQuant: scaling_impl must be a torch.nn.Module"):
        BinaryQuant(0.5)
    with pytest.raises(TypeError, match=r"float_to_int_impl must be .*; pass an instance"):
        IntQuant(False, True, Identity(), float_to_int_impl=torch.nn.Identity)


def test_blocks_compiled_with_brevitas_jit_must_be_modules(monkeypatch):
    # BREVITAS_JIT=1 is read at import; the check reads the flag it imported.
    monkeypatch.setattr(checks, "JIT_ENABLED", True)
    with pytest.raises(
        TypeError, match=r"scaling_impl must be a torch.nn.Module with BREVITAS_JIT"
    ):
        BinaryQuant(lambda x: 0.5)
