"""Module wrappers of the straight-through estimators, each one call to a C++ op."""

from typing import Dict

from torch import Tensor

from brevitas_cpp import jit
from brevitas_cpp.function import ops_ste as _ops_ste
from brevitas_cpp.function.ops_ste import (
    ceil_ste,
    dpu_round_ste,
    floor_ste,
    round_ste,
    round_to_zero_ste,
    scalar_clamp_min_ste,
    scalar_signed_clamp_min_ste,
    tensor_clamp_ste,
    tensor_clamp_ste_,
)

# Brevitas's module star-imports brevitas.function.ops_ste: its other functions are here too.
abs_binary_sign_grad = _ops_ste.abs_binary_sign_grad
binary_sign_ste = _ops_ste.binary_sign_ste
scalar_clamp_ste = _ops_ste.scalar_clamp_ste
ternary_sign_ste = _ops_ste.ternary_sign_ste


class RoundSte(jit.ScriptModule):
    """round_ste: half to even, identity gradient."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return round_ste(x)


class FloorSte(jit.ScriptModule):
    """floor_ste: identity gradient."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return floor_ste(x)


class CeilSte(jit.ScriptModule):
    """ceil_ste: identity gradient."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return ceil_ste(x)


class RoundToZeroSte(jit.ScriptModule):
    """round_to_zero_ste: truncation toward zero, identity gradient."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return round_to_zero_ste(x)


class DPURoundSte(jit.ScriptModule):
    """dpu_round_ste: half to even except negative halves round up, identity gradient."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return dpu_round_ste(x)


# The one rounding-mode table: each rounding block and the rounding_mode of the fused int_quant op
# that computes the same (the op's accepted modes; tests/core/test_rounding_modes.py checks the
# two agree). FloatToIntImplType's members carry the same names, upper-case.
ROUNDING_MODE_OF_IMPL: Dict[type, str] = {
    RoundSte: "round",
    FloorSte: "floor",
    CeilSte: "ceil",
    RoundToZeroSte: "round_to_zero",
    DPURoundSte: "dpu",
}


class ScalarClampMinSte(jit.ScriptModule):
    """clamp_min(x, min_val) with an identity gradient."""

    __constants__ = ["min_val"]

    def __init__(self, min_val: float) -> None:
        super().__init__()
        self.min_val = float(min_val)

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return scalar_clamp_min_ste(x, self.min_val)


class ScalarSignedClampMinSte(jit.ScriptModule):
    """Keeps |x| >= min_val with x's sign (zero counts as positive); identity gradient."""

    __constants__ = ["min_val"]

    def __init__(self, min_val: float) -> None:
        super().__init__()
        # min_val = 0 would make this the identity with a zero gradient at x = 0.
        if not abs(min_val) > 0.0:
            raise ValueError(f"ScalarSignedClampMinSte: min_val must be non-zero, got {min_val}")
        self.min_val = abs(float(min_val))

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        # Brevitas: where(x >= 0, 1, -1) * scalar_clamp_min_ste(abs_binary_sign_grad(x), min_val),
        # whose gradient is grad * sign * binary_sign(x) = grad. One fused op, same values (the
        # scale of every float quantizer with scaling_min_val goes through here on each call).
        return scalar_signed_clamp_min_ste(x, self.min_val)


class TensorClampSte(jit.ScriptModule):
    """tensor_clamp with an identity gradient for x."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor, min_val: Tensor, max_val: Tensor) -> Tensor:
        return tensor_clamp_ste(x, min_val, max_val)


class InplaceTensorClampSte(jit.ScriptModule):
    """Clamps x in place (a weight is clipped for good, as in BinaryConnect) and returns it with
    an identity gradient to x and none to the bounds."""

    def __init__(self) -> None:
        super().__init__()

    @jit.script_method
    def forward(self, x: Tensor, min_val: Tensor, max_val: Tensor) -> Tensor:
        return tensor_clamp_ste_(x, min_val, max_val)
