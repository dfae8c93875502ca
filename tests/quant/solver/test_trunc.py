"""Truncation solver: TruncIntQuant for INT, MSB or wrapped scaling, power-of-two integer
scaling for the wrapper."""

import pytest
import torch

from brevitas_cpp.core.function_wrapper import FloorSte, RoundSte
from brevitas_cpp.core.quant import TruncIntQuant
from brevitas_cpp.core.scaling import PowerOfTwoIntScaling, TruncMsbScaling, TruncScalingWrapper
from brevitas_cpp.quant.base import ParamFromRuntimePercentileScaling, PerTensorPoTScaling8bit
from brevitas_cpp.quant.solver import QuantizerSolveError, TruncQuantSolver


class T(TruncQuantSolver):
    bit_width = 4
    quant_type = "int"
    bit_width_impl_type = "const"
    float_to_int_impl_type = "floor"


def test_msb_truncation_is_the_default():
    tq = T.tensor_quant
    assert type(tq) is TruncIntQuant
    assert type(tq.trunc_scaling_impl) is TruncMsbScaling
    assert type(tq.float_to_int_impl) is FloorSte
    # 8-bit integers 0.01 * k truncated to 4 bits: drop 4 LSBs (floor), scale times 16.
    k = torch.tensor([-128.0, -17.0, -1.0, 0.0, 15.0, 16.0, 127.0])
    scale = torch.tensor(0.01)
    y, out_scale, out_zp, out_bw = tq(k * scale, scale, torch.tensor(0.0), torch.tensor(8.0), True)
    ts = torch.tensor(16.0)
    y_int = torch.clamp(torch.floor(torch.round(k * scale / scale) / ts), -8.0, 7.0)
    expected = y_int * (scale * ts)
    assert torch.equal(y, expected)
    assert torch.equal(out_scale, scale * ts) and float(out_bw) == 4.0 and float(out_zp) == 0.0


def test_wrapper_scaling_uses_power_of_two_integer_scaling():
    class Wrapped(T, ParamFromRuntimePercentileScaling, PerTensorPoTScaling8bit):
        trunc_scaling_impl_type = "wrapper"
        float_to_int_impl_type = "round"

    tq = Wrapped.tensor_quant
    assert type(tq.trunc_scaling_impl) is TruncScalingWrapper
    assert type(tq.trunc_scaling_impl.trunc_int_scaling_impl) is PowerOfTwoIntScaling
    assert type(tq.float_to_int_impl) is RoundSte


def test_wrapper_needs_power_of_two_scaling():
    message = (
        r"T: restrict_scaling_type=FP is not supported for truncation scaling; "
        r"accepted: POWER_OF_TWO"
    )
    with pytest.raises(QuantizerSolveError, match=message):
        T.let(restrict_scaling_type="fp").trunc_int_scaling_impl


@pytest.mark.parametrize("quant_type", ["binary", "ternary"])
def test_only_int_truncation(quant_type):
    with pytest.raises(
        QuantizerSolveError,
        match=rf"T: quant_type={quant_type.upper()} is not "
        r"supported for truncation",
    ):
        T.let(quant_type=quant_type).tensor_quant


def test_unknown_trunc_scaling_type():
    with pytest.raises(
        QuantizerSolveError,
        match=r"T: trunc_scaling_impl_type='lsb' is not a "
        r"valid TruncScalingImplType; accepted "
        r"\(case-insensitive\): MSB, WRAPPER",
    ):
        T.let(trunc_scaling_impl_type="lsb").trunc_scaling_impl


def test_fp_means_no_truncation():
    assert T.let(quant_type="fp").tensor_quant is None
