"""Brevitas 0.12.1's public names that brevitas_cpp does not support: they import, and raise on
use (a call, an instantiation, an attribute of a class or value) with an error that names them
and what to use instead, so that a program written for Brevitas fails where it uses one, never at
import and never silently.

``_unsupported_table`` lists them by Brevitas module. A module brevitas_cpp has (a file) answers
its listed names through a module-level ``__getattr__ = unsupported_getattr(__name__)``; a module
it has no file for is made here when imported (``install_stub_finder``, called by the package),
holding only its listed names. A leaf: the standard library and the table only."""

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any, Callable, Dict, Optional, Tuple

from brevitas_cpp._unsupported_table import HINTS, UNSUPPORTED

__all__ = [
    "UnsupportedError",
    "install_stub_finder",
    "stub_for",
    "unsupported_getattr",
    "unsupported_message",
]

_PACKAGE = "brevitas_cpp"


class UnsupportedError(NotImplementedError):
    """A Brevitas name brevitas_cpp does not support was used."""


def unsupported_message(module: str, name: Optional[str] = None) -> str:
    """The error for ``brevitas.<module>.<name>`` (module relative to the package, '' for the
    root; no name: the module itself)."""
    qualname = ".".join(part for part in ("brevitas", module, name) if part)
    hint = HINTS.get((module, name or ""), UNSUPPORTED[module][0])
    return f"brevitas_cpp does not support {qualname}; {hint}"


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


class _UnsupportedClassMeta(type):
    """Instantiating a stub class (or a subclass of one) or reading one of its attributes
    raises; isinstance and issubclass answer False, as for any unrelated class."""

    _unsupported_text: str

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise UnsupportedError(cls._unsupported_text)

    def __getattr__(cls, name: str) -> Any:
        if _dunder(name):  # tools probe __wrapped__, __signature__, ...: plainly absent
            raise AttributeError(name)
        raise UnsupportedError(cls._unsupported_text)


def _stub_class(module: str, name: str, text: str) -> type:
    return _UnsupportedClassMeta(
        name,
        (),
        {
            "__module__": f"{_PACKAGE}.{module}".rstrip("."),
            "__doc__": text,
            "_unsupported_text": text,
        },
    )


def _stub_function(module: str, name: str, text: str) -> Callable[..., Any]:
    def stub(*args: Any, **kwargs: Any) -> Any:
        raise UnsupportedError(text)

    stub.__name__ = stub.__qualname__ = name
    stub.__module__ = f"{_PACKAGE}.{module}".rstrip(".")
    stub.__doc__ = text
    return stub


class _UnsupportedValue:
    """A module constant (a dict, a string, a number) that is not supported: any use raises;
    only repr works, for debugging."""

    __slots__ = ("_text", "_qualname")

    def __init__(self, qualname: str, text: str) -> None:
        object.__setattr__(self, "_qualname", qualname)
        object.__setattr__(self, "_text", text)

    def __repr__(self) -> str:
        return f"<unsupported {self._qualname}>"

    def __getattr__(self, name: str) -> Any:
        if _dunder(name):
            raise AttributeError(name)
        raise UnsupportedError(self._text)

    __hash__ = object.__hash__


def _raise_on_use(self: _UnsupportedValue, *args: Any, **kwargs: Any) -> Any:
    raise UnsupportedError(object.__getattribute__(self, "_text"))


# The operations a constant is used through: call, index, iterate, compare, convert, compute.
for _op in (
    "__call__ __getitem__ __setitem__ __iter__ __len__ __contains__ __bool__ __eq__ __ne__ "
    "__lt__ __le__ __gt__ __ge__ __str__ __format__ __int__ __float__ __index__ __add__ "
    "__radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __or__ __ror__ __setattr__"
).split():
    setattr(_UnsupportedValue, _op, _raise_on_use)
del _op

_STUBS: Dict[Tuple[str, str], Any] = {}
_MAKERS = {"class": _stub_class, "function": _stub_function}


def stub_for(module: str, name: str) -> Any:
    """The stub of ``brevitas.<module>.<name>``, made once (so that two imports are the same
    object); None if the table does not list it."""
    kind = UNSUPPORTED.get(module, ("", {}))[1].get(name)
    if kind is None:
        return None
    key = (module, name)
    if key not in _STUBS:
        text = unsupported_message(module, name)
        if kind in _MAKERS:
            _STUBS[key] = _MAKERS[kind](module, name, text)
        else:
            _STUBS[key] = _UnsupportedValue(".".join(("brevitas", module, name)), text)
    return _STUBS[key]


def _relative(module_name: str) -> str:
    return module_name[len(_PACKAGE) + 1 :] if module_name != _PACKAGE else ""


def unsupported_getattr(module_name: str) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``brevitas_cpp.<module>`` answering the names the
    table lists for it, and raising AttributeError, as Python does, for any other."""
    module = _relative(module_name)

    def __getattr__(name: str) -> Any:
        stub = stub_for(module, name)
        if stub is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        return stub

    return __getattr__


def _is_package(module: str) -> bool:
    return any(other.startswith(module + ".") for other in UNSUPPORTED)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``brevitas_cpp.<module>`` for a table module that has no file (it runs after the
    ordinary finders, so a file always wins)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if not fullname.startswith(_PACKAGE + ".") or _relative(fullname) not in UNSUPPORTED:
            return None
        package = _is_package(_relative(fullname))
        return importlib.util.spec_from_loader(fullname, self, is_package=package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[types.ModuleType]:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        relative = _relative(module.__name__)
        module.__doc__ = unsupported_message(relative)
        module.__getattr__ = unsupported_getattr(module.__name__)  # type: ignore[attr-defined]
        module.__all__ = sorted(UNSUPPORTED[relative][1])  # type: ignore[attr-defined]


_FINDER = _StubFinder()


def install_stub_finder() -> None:
    """Put the finder last on sys.meta_path (once)."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
