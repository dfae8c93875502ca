"""What the quant layers and proxies share to compile under ``torch.jit.script``.

Each layer and proxy has one forward, which eager mode, TorchScript and torch.compile all run.
The proxies quantize in ``quant_tuple``, which returns the core blocks' tuple ``(value, scale,
zero_point, bit_width)`` (``QuantTuple``), and layers call them through ``quantize``. In eager
mode an IntQuantTensor is built only where it is asked for (``return_quant_tensor=True``, a
QuantTensor input, a cache, a hook, a proxy subclass with its own forward): it is also a
QuantTuple, so the layer code that reads the tuple is the same. The few eager-only steps sit
behind ``if torch.jit.is_scripting():``, which TorchScript resolves statically (the eager code
after it is parsed but never compiled).

Two things TorchScript would otherwise trip on are handled here:

* it compiles every property of a module class unless the property is listed in
  ``__jit_unused_properties__``, and reads every property while looking for overloads unless
  it is listed in ``__jit_ignored_attributes__`` *and* defined in the class itself (an
  inherited property that raises, such as per_elem_ops of transposed convolutions, would stop
  torch.jit.script). The properties of the layers and proxies read Python state (injectors,
  QuantTensors) and the compiled code reads attributes instead, so
  ``ScriptableQuantModule.__init_subclass__`` lists every property of each subclass in both, and
  copies the inherited ones into the subclass (the same property objects: nothing changes in
  eager mode);
* settings that are Python state (a shared proxy's flags, ``export_mode``, ...) are validated when
  ``torch.jit.script`` calls ``__prepare_scriptable__``, which returns the module itself: returning
  another module would silently replace the user's layer in its parent.
"""

import inspect
from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

from brevitas_cpp.quant_tensor import GroupwiseQuantTensor, QuantTensor

__all__ = [
    "QuantTuple",
    "ScriptableQuantModule",
    "as_quant_tuple",
    "eager_only_attributes",
    "jit_unused_properties",
    "mark_properties_unused_by_jit",
    "quant_operand",
    "script_error",
]

# (value, scale, zero_point, bit_width), what the core blocks' tensor_quant return; the metadata
# is None when nothing was quantized. An IntQuantTensor is also one: its first four fields.
QuantTuple = Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]]


def as_quant_tuple(out: Any) -> QuantTuple:
    """A proxy's output as a QuantTuple: a QuantTensor as it is (a per-group one ungrouped), a
    plain Tensor (nothing quantized) with None metadata."""
    if isinstance(out, GroupwiseQuantTensor):
        return out.as_quant_tuple()
    if isinstance(out, QuantTensor):
        return out
    return out, None, None, None


def quant_operand(quant: QuantTuple, as_quant_tensor: bool) -> Tensor:
    """What a layer's float op runs on: the value, or in eager mode the QuantTensor itself when
    the layer wants QuantTensor metadata (the torch handlers then derive the output's)."""
    if torch.jit.is_scripting():
        return quant[0]
    if as_quant_tensor and isinstance(quant, QuantTensor):
        return quant
    return quant[0]


def jit_unused_properties(cls: type) -> List[str]:
    """Names of every property of cls, inherited ones included."""
    return sorted(name for name, member in inspect.getmembers(cls) if isinstance(member, property))


def script_error(module: Any, what: str, fix: str) -> RuntimeError:
    """The error of a layer or proxy that can not be scripted as configured."""
    return RuntimeError(
        f"torch.jit.script of {type(module).__name__}: {what}, which scripted quant layers do not "
        f"support (between scripted layers values are plain Tensors). {fix}"
    )


class ScriptableQuantModule:
    """Mixin of the layers and proxies: lists every property of each subclass as unused by
    TorchScript, since the compiled code reads attributes only."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        mark_properties_unused_by_jit(cls)


def mark_properties_unused_by_jit(cls: type) -> None:
    """Keep torch.jit.script away from every property of cls (see the module docstring), and
    from the instance attributes its classes name in ``eager_only_attributes``."""
    names = jit_unused_properties(cls)
    for name in names:
        if name not in cls.__dict__:
            setattr(cls, name, inspect.getattr_static(cls, name))
    cls.__jit_unused_properties__ = names
    cls.__jit_ignored_attributes__ = names + sorted(eager_only_attributes(cls))


def eager_only_attributes(cls: type) -> List[str]:
    """The ``eager_only_attributes`` of cls and its bases: instance attributes holding Python
    state (an injector, a class) that compiled code never reads. TorchScript would otherwise try
    to compile each one's type for every module instance, and fail (about 5 ms each)."""
    found = set()
    for base in cls.__mro__:
        found.update(base.__dict__.get("eager_only_attributes", ()))
    return sorted(found)
