"""How a tracked parameter (e.g. a layer's weight) is laid out before statistics are taken.

The wrappers hold a reference to a parameter owned by another module, so they keep it out of
their own state_dict (the owner saves it) and do not report it missing when loading."""

from typing import Optional

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from brevitas_cpp import config, jit
from brevitas_cpp.core._checks import checked_module
from brevitas_cpp.core._state_dict import KeyPolicy

# Re-exported here, as Brevitas does, for code that imports it from this module.
from brevitas_cpp.core.function_wrapper import StatsInputViewShapeImpl  # noqa: F401

_PARAMETER_NAME = "parameter"


def _checked_parameter(owner: str, parameter) -> Parameter:
    if not isinstance(parameter, Parameter):
        raise TypeError(
            f"{owner}: parameter must be a torch.nn.Parameter, got {type(parameter).__name__}"
        )
    return parameter


class _TrackedParameterStateMixin(KeyPolicy):
    """state_dict handling shared by the wrappers that register a borrowed parameter."""

    NEVER_SAVED_KEYS = (_PARAMETER_NAME,)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if not config._FULL_STATE_DICT:
            destination.pop(prefix + _PARAMETER_NAME, None)


class _ViewParameterWrapper(_TrackedParameterStateMixin, jit.ScriptModule):
    """view_shape_impl(x) when x is given, else view_shape_impl of the tracked parameter."""

    def __init__(self, parameter: Parameter, view_shape_impl: Module) -> None:
        super().__init__()
        self.parameter = _checked_parameter(type(self).__name__, parameter)
        self.view_shape_impl = checked_module(
            type(self).__name__, "view_shape_impl", view_shape_impl
        )

    @jit.script_method
    def forward(self, x: Optional[Tensor]) -> Tensor:
        if x is not None:
            parameter = x
        else:
            parameter = self.parameter
        return self.view_shape_impl(parameter)


class _ViewParameter(jit.ScriptModule):
    """view_shape_impl(x); x is required (the caller passes the parameter in)."""

    def __init__(self, view_shape_impl: Module) -> None:
        super().__init__()
        self.view_shape_impl = checked_module(
            type(self).__name__, "view_shape_impl", view_shape_impl
        )

    @jit.script_method
    def forward(self, x: Optional[Tensor]) -> Tensor:
        if x is None:
            raise RuntimeError("_ViewParameter: the input cannot be None (no parameter is tracked)")
        return self.view_shape_impl(x)


class _ViewCatParameterWrapper(_TrackedParameterStateMixin, jit.ScriptModule):
    """cat([view_shape_impl(tracked parameter), x], cat_dim): adds one more tracked parameter in
    front of the statistics input gathered so far."""

    __constants__ = ["cat_dim"]

    def __init__(self, parameter: Parameter, view_shape_impl: Module, cat_dim: int) -> None:
        super().__init__()
        self.parameter = _checked_parameter(type(self).__name__, parameter)
        self.view_shape_impl = checked_module(
            type(self).__name__, "view_shape_impl", view_shape_impl
        )
        if isinstance(cat_dim, bool) or not isinstance(cat_dim, int):
            raise TypeError(f"{type(self).__name__}: cat_dim must be an int, got {cat_dim!r}")
        self.cat_dim = cat_dim

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.view_shape_impl(self.parameter), x], dim=self.cat_dim)
