"""What the quant layers and proxies share to compile under ``torch.jit.script``.

Each layer and proxy keeps its eager forward and adds a TorchScript path inside it, behind
``if torch.jit.is_scripting():``, which TorchScript resolves statically (the eager code after it
is parsed but never compiled). On that path inputs and outputs are plain Tensors, and proxies
return the core blocks' tuple ``(value, scale, zero_point, bit_width)`` (``QuantTuple``) instead
of an IntQuantTensor.

Two things TorchScript would otherwise trip on are handled here:

* it compiles every property of a module class unless the property is listed in
  ``__jit_unused_properties__``, and reads every property while looking for overloads unless
  it is listed in ``__jit_ignored_attributes__`` *and* defined in the class itself (an
  inherited property that raises, such as per_elem_ops of transposed convolutions, would stop
  torch.jit.script). The properties of the layers and proxies read Python state (injectors,
  QuantTensors) and the TorchScript paths read attributes instead, so
  ``ScriptableQuantModule.__init_subclass__`` lists every property of each subclass in both, and
  copies the inherited ones into the subclass (the same property objects: nothing changes in
  eager mode);
* settings that are Python state (a shared proxy's flags, ``export_mode``, ...) are validated when
  ``torch.jit.script`` calls ``__prepare_scriptable__``, which returns the module itself: returning
  another module would silently replace the user's layer in its parent.
"""

import inspect
from typing import Any, List, Optional, Tuple

from torch import Tensor

__all__ = [
    "QuantTuple", "ScriptableQuantModule", "jit_unused_properties",
    "mark_properties_unused_by_jit", "script_error"]

# (value, scale, zero_point, bit_width), what the core blocks' tensor_quant return; the metadata
# is None when nothing was quantized.
QuantTuple = Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]]


def jit_unused_properties(cls: type) -> List[str]:
    """Names of every property of cls, inherited ones included."""
    return sorted(name for name, member in inspect.getmembers(cls)
                  if isinstance(member, property))


def script_error(module: Any, what: str, fix: str) -> RuntimeError:
    """The error of a layer or proxy that can not be scripted as configured."""
    return RuntimeError(
        f"torch.jit.script of {type(module).__name__}: {what}, which scripted quant layers do not "
        f"support (between scripted layers values are plain Tensors). {fix}")


class ScriptableQuantModule:
    """Mixin of the layers and proxies: lists every property of each subclass as unused by
    TorchScript, since the TorchScript paths read attributes only."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        mark_properties_unused_by_jit(cls)


def mark_properties_unused_by_jit(cls: type) -> None:
    """Keep torch.jit.script away from every property of cls (see the module docstring)."""
    names = jit_unused_properties(cls)
    for name in names:
        if name not in cls.__dict__:
            setattr(cls, name, inspect.getattr_static(cls, name))
    cls.__jit_unused_properties__ = names
    cls.__jit_ignored_attributes__ = names
