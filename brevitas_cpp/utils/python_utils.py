"""Brevitas's ``brevitas.utils.python_utils``: small Python helpers (the string enum the enums of
``inject.enum`` derive from, a monkey patch for one block, a lambda test, dotted getattr, a
function with a hook run before it)."""

import functools
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from brevitas_cpp.inject.enum import AutoName

__all__ = ["AutoName", "hooked_on_a_function", "islambda", "patch", "recurse_getattr"]


@contextmanager
def patch(module: Any, attr: str, new_value: Any) -> Iterator[Any]:
    """Set ``module.attr`` to ``new_value`` for the length of the block, then restore it."""
    old_value = getattr(module, attr)
    setattr(module, attr, new_value)
    try:
        yield getattr(module, attr)
    finally:
        setattr(module, attr, old_value)


def islambda(v: Any) -> bool:
    """Whether ``v`` is a function defined by a lambda expression."""
    return isinstance(v, type(lambda: 0)) and v.__name__ == "<lambda>"


def recurse_getattr(obj: Any, attr: str) -> Any:
    """``getattr`` along a dotted path: ``recurse_getattr(model, "layer1.conv.weight")``."""
    return functools.reduce(getattr, attr.split("."), obj)


def hooked_on_a_function(function: Callable, prefunction: Callable) -> Callable:
    """``function``, calling ``prefunction`` with the same arguments before each call."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        prefunction(*args, **kwargs)
        return function(*args, **kwargs)

    return run
