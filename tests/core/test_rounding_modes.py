"""The rounding-mode table (core.function_wrapper.ROUNDING_MODE_OF_IMPL) against the C++ op and
the enum: the modes are exactly those int_quant accepts (read from its error message), each
block rounds as the op does in that mode (a formula per mode, written out here), and the
solver and the proxies derive their tables from it."""

import re

import pytest
import torch

from brevitas_cpp.core.function_wrapper import ROUNDING_MODE_OF_IMPL
from brevitas_cpp.inject.enum import FloatToIntImplType
from brevitas_cpp.quant.solver.common import solve_float_to_int_impl_from_enum

# What each mode computes, written out (round: half to even; round_to_zero: truncation; dpu:
# half to even, but a negative tie goes up, as Brevitas's dpu_round).
REFERENCE = {
    "round": torch.round,
    "floor": torch.floor,
    "ceil": torch.ceil,
    "round_to_zero": torch.trunc,
    "dpu": lambda x: torch.where(
        (x < 0) & (x - torch.floor(x) == 0.5), torch.ceil(x), torch.round(x)
    ),
}
X = torch.tensor([-2.5, -1.5, -0.5, -0.25, 0.0, 0.25, 0.5, 1.5, 2.5, 3.7, -3.7])


def _op_modes():
    with pytest.raises(RuntimeError) as info:
        torch.ops.brevitas_cpp.int_quant(
            X, torch.tensor(1.0), torch.tensor(0.0), torch.tensor(8.0), True, False, "no-such-mode"
        )
    accepted = re.search(r"accepted \(case-insensitive\): (.*)", str(info.value)).group(1)
    return {m.strip() for m in accepted.split(",")}


def test_table_has_exactly_the_modes_of_the_op():
    assert set(ROUNDING_MODE_OF_IMPL.values()) == _op_modes()
    # Every rounding enum but LEARNED_ROUND (a block with a learned offset, LearnedRoundSte) and
    # STOCHASTIC_ROUND (a block with a random generator, StochasticRoundSte).
    rounding = {m.name.lower() for m in FloatToIntImplType} - {"learned_round", "stochastic_round"}
    assert rounding == _op_modes()


@pytest.mark.parametrize("impl, mode", list(ROUNDING_MODE_OF_IMPL.items()))
def test_block_and_op_round_as_the_mode_says(impl, mode):
    expected = REFERENCE[mode](X)
    assert torch.equal(impl()(X), expected)
    op = torch.ops.brevitas_cpp.int_quant(
        X, torch.tensor(1.0), torch.tensor(0.0), torch.tensor(8.0), True, False, mode
    )
    assert torch.equal(op, expected)
    assert solve_float_to_int_impl_from_enum(FloatToIntImplType[mode.upper()]) is impl
