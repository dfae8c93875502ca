"""Errors raised in a quant layer's forward name the layer: its module path in the model being
run, as ``model.named_modules()`` names it, and its class, e.g.
``RuntimeError: features.3.act (QuantReLU): relu_int_quant: scale must be positive ...``.

Nothing is done while nothing fails: the layers run their eager forward inside a try statement
(free in Python 3.11) and only the except path looks for the path. A layer does not know its
parent (modules are shared, copied and re-parented by graph transforms), so the path is found
then, by walking the Python call stack: the frames above the failing layer whose ``self`` is an
nn.Module are the modules being called, the outermost one the model, in whose
``named_modules()`` the layer is looked up (by identity). Forward hooks would find it too, but
a hook disables the layers' fast paths.

* The innermost quant layer names itself; the quant layers around it (a QuantMultiheadAttention
  around its QuantLinears) see the mark on the error and let it pass unchanged.
* The error keeps its type. RuntimeError, ValueError and TypeError (those exact types) and the
  library's own error classes are raised again, of the same type, with the message led by the
  layer and chained ``from`` the original: ``str(e)``, what logs show, names the layer. Other
  types (torch.OutOfMemoryError, KeyError...) stay the same object, the layer given in a note
  (``add_note``, which tracebacks show).
* A layer called directly, in no model, is named by its class, unless the message already does.
* Only errors (``Exception``) are named: KeyboardInterrupt and the like pass, and so do the
  exceptions that steer control flow (StopIteration, StopFwdException).
* TorchScript compiles no try statement: the layers call their body directly under
  ``torch.jit.is_scripting()``, and errors of scripted layers are not named. torch.compile
  traces the try statement without a graph break; an error met while dynamo traces passes as
  it would without it, and the naming itself is kept out of dynamo (it would graph-break on
  ``sys._getframe``), so an error in the eager fallback is named as in eager mode.
"""

import sys
from types import FrameType
from typing import Any, Callable, Iterator, List, Optional, TypeVar

import torch
from torch import nn

from brevitas_cpp.utils.torch_utils import StopFwdException

__all__ = ["call_naming_layer", "layer_path", "named_error"]

T = TypeVar("T")

# Set on an error once a layer has named itself in it: the enclosing layers leave it as it is.
_MARK = "_brevitas_cpp_layer"

# Raised again with the layer in the message when exactly of these types, or of a class of this
# library whose constructor takes the message alone.
_REBUILT_TYPES = (RuntimeError, ValueError, TypeError)
_PACKAGE = "brevitas_cpp"
# The attribute under which torch.compile's OptimizedModule holds the module it compiled.
_COMPILED = "_orig_mod"


def call_naming_layer(layer: nn.Module, body: Callable[..., T], *args: Any) -> T:
    """``body(*args)``, the eager forward of ``layer``; an error raised in it names the layer
    (see the module docstring). Eager Python only: TorchScript compiles no try statement."""
    try:
        return body(*args)
    except Exception as error:
        if torch.compiler.is_compiling():
            raise  # dynamo tracing the error: it reports it as it would without the try
        named = named_error(layer, error)
        if named is None:
            raise
        raise named from error


@torch.compiler.disable
def named_error(layer: nn.Module, error: Exception) -> Optional[Exception]:
    """The error to raise instead of ``error``, raised in ``layer``'s forward: a new one of the
    same type whose message names the layer, or None to raise ``error`` itself (already named,
    a control-flow exception, or a type that can not be rebuilt: named in a note then). Naming
    never hides the error: should it fail itself, None."""
    try:
        return _named_error(layer, error)
    except Exception:
        return None


def _named_error(layer: nn.Module, error: Exception) -> Optional[Exception]:
    if getattr(error, _MARK, None) is not None or _is_control_flow(error):
        return None
    path = layer_path(layer)
    name = type(layer).__name__
    message = str(error)
    if path:
        where = f"{path} ({name})"
    elif name in message:
        _mark(error, name)  # a layer called directly, which its message already names
        return None
    else:
        where = name
    rebuilt = _rebuilt(error, f"{where}: {message}")
    if rebuilt is None:
        error.add_note(f"raised in quant layer {where}")
        _mark(error, where)
        return None
    _mark(rebuilt, where)
    return rebuilt


def layer_path(layer: nn.Module) -> str:
    """``layer``'s path in the outermost module being called on the Python stack that holds it
    ('' for a layer called directly). Walks the stack: call it only when something failed."""
    callers = _modules_being_called(sys._getframe(1))
    for root in reversed(callers):  # outermost first
        if root is layer:
            continue
        try:
            for path, module in root.named_modules():
                if module is layer:
                    # torch.compile(model) wraps the model: its path is the model's own.
                    return ".".join(part for part in path.split(".") if part != _COMPILED)
        except Exception:  # a stand-in module of a tracer (torch.export) may not list its own
            continue
    return ""


def _modules_being_called(frame: Optional[FrameType]) -> List[nn.Module]:
    """The nn.Modules whose methods run in ``frame`` and its callers, innermost first, each
    once."""
    modules: List[nn.Module] = []
    seen = set()
    for f in _frames(frame):
        candidate = f.f_locals.get("self") if "self" in f.f_code.co_varnames else None
        if isinstance(candidate, nn.Module) and id(candidate) not in seen:
            seen.add(id(candidate))
            modules.append(candidate)
    return modules


def _frames(frame: Optional[FrameType]) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _is_control_flow(error: Exception) -> bool:
    return isinstance(error, (StopIteration, StopAsyncIteration, StopFwdException))


def _rebuilt(error: Exception, message: str) -> Optional[Exception]:
    """An error of ``error``'s type with ``message``, or None where the type is not one that is
    rebuilt (see _REBUILT_TYPES) or its constructor does not take the message alone."""
    error_type = type(error)
    ours = error_type.__module__.partition(".")[0] == _PACKAGE
    if not (error_type in _REBUILT_TYPES or ours) or len(error.args) > 1:
        return None
    try:
        rebuilt = error_type(message)
    except Exception:
        return None
    if str(rebuilt) != message:
        return None
    return rebuilt


def _mark(error: BaseException, where: str) -> None:
    try:
        setattr(error, _MARK, where)
    except (AttributeError, TypeError):  # an exception type without a __dict__
        pass
