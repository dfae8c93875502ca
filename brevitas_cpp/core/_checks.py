"""Construction-time argument checks shared by the core blocks (scaling, zero point, statistics,
restrict-value). Each error names the block (``owner``), the argument, the value received and
what is accepted, so a mistake surfaces where the quantizer is built rather than in a forward.

The quantizer blocks of :mod:`brevitas_cpp.core.quant` word theirs differently (they add the
value's type) and keep their own in ``core/quant/_checks.py``."""

import math
import numbers
from typing import List, Optional, Tuple

import torch
from torch import Tensor
from torch.nn import Module

from brevitas_cpp.config import JIT_ENABLED

__all__ = [
    "check_affine_inits",
    "checked_bool",
    "checked_collect_stats_steps",
    "checked_finite",
    "checked_module",
    "checked_momentum",
    "checked_optional_finite",
    "checked_parameter_list",
    "checked_restrict_impl",
    "checked_shape",
    "is_block",
]


def is_block(impl) -> bool:
    """Whether impl can stand where a core block goes: a torch.nn.Module or, as in Brevitas,
    whose code only calls its blocks, any other callable instance (a function, a
    ``unittest.mock.Mock``). A class is refused: it was meant to be instantiated."""
    return isinstance(impl, Module) or (callable(impl) and not isinstance(impl, type))


def checked_module(owner: str, arg: str, impl) -> Module:
    """impl if it is a block (is_block); with BREVITAS_JIT=1, a torch.nn.Module only."""
    if isinstance(impl, Module):
        return impl
    if is_block(impl):
        if not JIT_ENABLED:
            return impl
        raise TypeError(
            f"{owner}: {arg} must be a torch.nn.Module with BREVITAS_JIT=1, got {impl!r}: the "
            f"blocks are compiled to TorchScript, which can not call a {type(impl).__name__}; "
            f"run with BREVITAS_JIT=0 to use it"
        )
    hint = "; pass an instance" if isinstance(impl, type) else ""
    raise TypeError(
        f"{owner}: {arg} must be a torch.nn.Module, got {impl!r} (a block is a module or "
        f"another callable instance, e.g. a function, which is called{hint})"
    )


def checked_bool(owner: str, arg: str, flag) -> bool:
    # A Python bool only: the flag becomes a TorchScript constant.
    if not isinstance(flag, bool):
        raise TypeError(f"{owner}: {arg} must be a bool, got {flag!r}")
    return flag


def checked_shape(owner: str, arg: str, shape) -> Tuple[int, ...]:
    """shape as a tuple of positive ints; anything else (an int, negative sizes) is rejected
    here, where the message can name the block and the argument."""
    if isinstance(shape, (tuple, list, torch.Size)) and all(
        isinstance(s, numbers.Integral) and not isinstance(s, bool) and s > 0 for s in shape
    ):
        return tuple(int(s) for s in shape)
    raise ValueError(
        f"{owner}: {arg} must be a tuple of positive ints (() for a scalar), got {shape!r}"
    )


def checked_finite(owner: str, arg: str, value) -> None:
    """A float, or every element of a tensor, must be finite (a NaN/inf initial value can
    never be learned away)."""
    if isinstance(value, Tensor):
        if value.is_complex():
            raise TypeError(f"{owner}: {arg} must be a real tensor, got dtype {value.dtype}")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{owner}: {arg} must be finite, got {value}")
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {arg} must be a float or a tensor, got {value!r}")
    if not math.isfinite(float(value)):
        raise ValueError(f"{owner}: {arg} must be finite, got {value!r}")


def checked_optional_finite(owner: str, arg: str, value) -> Optional[float]:
    """None, or a finite real number as a float."""
    if value is None:
        return None
    checked_finite(owner, arg, value)
    return float(value)


def checked_momentum(owner: str, arg: str, momentum) -> Optional[float]:
    """None (cumulative average) or an EMA factor in [0, 1] (NaN fails the range test)."""
    if momentum is None:
        return None
    if (
        isinstance(momentum, bool)
        or not isinstance(momentum, numbers.Real)
        or not (0.0 <= float(momentum) <= 1.0)
    ):
        raise ValueError(
            f"{owner}: {arg} must be None (cumulative average) or a float in [0, 1], "
            f"got {momentum!r}"
        )
    return float(momentum)


def checked_collect_stats_steps(owner: str, collect_stats_steps) -> int:
    if (
        isinstance(collect_stats_steps, bool)
        or not isinstance(collect_stats_steps, numbers.Integral)
        or collect_stats_steps <= 0
    ):
        raise ValueError(
            f"{owner}: collect_stats_steps must be a positive int (training batches to take "
            f"statistics over), got {collect_stats_steps!r}"
        )
    return int(collect_stats_steps)


def checked_parameter_list(owner: str, tracked_parameter_list) -> List[Tensor]:
    if (
        not isinstance(tracked_parameter_list, (list, tuple))
        or len(tracked_parameter_list) == 0
        or not all(isinstance(p, Tensor) for p in tracked_parameter_list)
    ):
        raise ValueError(
            f"{owner}: tracked_parameter_list must be a non-empty list of tensors (the "
            f"parameters the statistics are taken over), got {tracked_parameter_list!r}"
        )
    return list(tracked_parameter_list)


def checked_restrict_impl(owner: str, arg: str, impl) -> Module:
    """A restrict-value block: a module with the restrict_init_* helpers the scaling blocks call."""
    checked_module(owner, arg, impl)
    for helper in (
        "restrict_init_float",
        "restrict_init_tensor",
        "restrict_init_module",
        "restrict_init_inplace_module",
    ):
        if not callable(getattr(impl, helper, None)):
            raise TypeError(
                f"{owner}: {arg} must be a restrict-value block (FloatRestrictValue, "
                f"LogFloatRestrictValue, IntRestrictValue, PowerOfTwoRestrictValue, ...) with "
                f"{helper}(), got {type(impl).__name__}"
            )
    return impl


def check_affine_inits(owner: str, prefix: str, rescaling_init, shifting_init) -> None:
    """prefix is 'scaling' or 'zero_point', as in the arguments' names."""
    what = "scale" if prefix == "scaling" else prefix.replace("_", " ")
    # Same exception type as Brevitas for the missing rescaling (callers may catch it).
    if shifting_init is not None and rescaling_init is None:
        raise RuntimeError(
            f"{owner}: enabling shifting of the {what} ({prefix}_affine_shifting_init="
            f"{shifting_init!r}) requires enabling affine rescaling first "
            f"({prefix}_affine_rescaling_init is None)"
        )


def checked_group(owner: str, group_size, group_dim) -> None:
    """A per-group layout: a positive integer group_size and an integer group_dim."""
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"{owner}: group_size must be a positive int, got {group_size!r}")
    if isinstance(group_dim, bool) or not isinstance(group_dim, int):
        raise ValueError(f"{owner}: group_dim must be an int (a dimension), got {group_dim!r}")
