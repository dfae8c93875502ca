"""Straight-through estimators. Each is one C++ custom op (``torch.ops.brevitas_cpp``) with
a C++ autograd kernel, so these functions script with ``torch.jit.script``, compile with
``torch.compile`` and differentiate without Python autograd functions.

NaN inputs give NaN outputs in every op (Brevitas's Python formulas map NaN to a sign)."""

import torch
from torch import Tensor

import brevitas_cpp._load  # noqa: F401  (registers the ops)
from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.function.ops import tensor_clamp_


def round_ste(x: Tensor) -> Tensor:
    """Round half to even (as torch.round) with a straight-through gradient."""
    return torch.ops.brevitas_cpp.round_ste(x)


def ceil_ste(x: Tensor) -> Tensor:
    """Ceil with a straight-through gradient."""
    return torch.ops.brevitas_cpp.ceil_ste(x)


def floor_ste(x: Tensor) -> Tensor:
    """Floor with a straight-through gradient."""
    return torch.ops.brevitas_cpp.floor_ste(x)


def round_to_zero_ste(x: Tensor) -> Tensor:
    """sign(x) * floor(|x|) with a straight-through gradient."""
    return torch.ops.brevitas_cpp.round_to_zero_ste(x)


def dpu_round_ste(x: Tensor) -> Tensor:
    """Round half to even, except a negative x.5 rounds up; straight-through gradient."""
    return torch.ops.brevitas_cpp.dpu_round_ste(x)


def tensor_clamp_ste(x: Tensor, min_val: Tensor, max_val: Tensor) -> Tensor:
    """Brevitas's tensor_clamp with a straight-through gradient for x, none for the bounds.

    min_val and max_val broadcast to x's shape (without expanding it) and are cast to x's dtype."""
    return torch.ops.brevitas_cpp.tensor_clamp_ste(x, min_val, max_val)


def tensor_clamp_ste_(x: Tensor, min_val: Tensor, max_val: Tensor) -> Tensor:
    """Clamps x in place (its data is clipped for good, as in BinaryConnect) and returns the
    clipped values with a straight-through gradient to x and none to the bounds.

    The clip is a side effect outside autograd (like an optimizer step), so x may be a leaf
    that requires grad, as in Brevitas."""
    with torch.no_grad():
        tensor_clamp_(x, min_val, max_val)
    return tensor_clamp_ste(x, min_val, max_val)


def scalar_clamp_ste(x: Tensor, min_val: float, max_val: float) -> Tensor:
    """torch.clamp(x, min_val, max_val) with a straight-through gradient."""
    return torch.ops.brevitas_cpp.scalar_clamp_ste(x, min_val, max_val)


def scalar_clamp_min_ste(x: Tensor, min_val: float) -> Tensor:
    """torch.clamp_min(x, min_val) with a straight-through gradient."""
    return torch.ops.brevitas_cpp.scalar_clamp_min_ste(x, min_val)


def scalar_signed_clamp_min_ste(x: Tensor, min_val: float) -> Tensor:
    """|x| kept >= min_val (>= 0) with x's sign, zero counting as positive, with a
    straight-through gradient: max(x, min_val) where x >= 0, else min(x, -min_val).

    The values and gradient of Brevitas's ScalarSignedClampMinSte composition, in one op."""
    return torch.ops.brevitas_cpp.scalar_signed_clamp_min_ste(x, min_val)


def binary_sign_ste(x: Tensor) -> Tensor:
    """+1 for x >= 0, -1 otherwise, with a straight-through gradient."""
    return torch.ops.brevitas_cpp.binary_sign_ste(x)


def ternary_sign_ste(x: Tensor) -> Tensor:
    """torch.sign with a straight-through gradient."""
    return torch.ops.brevitas_cpp.ternary_sign_ste(x)


def abs_binary_sign_grad(x: Tensor) -> Tensor:
    """|x| whose gradient is grad * binary_sign(x), so +1 (not 0) at x = 0."""
    return torch.ops.brevitas_cpp.abs_binary_sign_grad(x)


# Brevitas's backend switches (fn_prefix, script_flag): one backend here, the C++ ops.
__getattr__ = unsupported_getattr(__name__)
