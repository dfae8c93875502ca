"""ExtendedInjector: auto-wiring dependency injection on ``dependencies`` 2.0.1.

A quantizer is a class whose attributes are dependency specs: classes (instantiated with
their constructor arguments looked up by name among the attributes), ``@value`` functions
(called with their arguments looked up the same way), ``this.<name>`` references, and plain
values. On top of ``dependencies`` this injector lets a ``@value`` function return a class,
which is then instantiated, or a ``this.<name>`` reference, which is then followed. That is
how solvers choose a core block from enum settings at injection time.
"""

import copyreg
import inspect
import sys
import threading
from typing import Any, Dict, List, Set

from _dependencies.checks.circles import _check_circles
from _dependencies.checks.injector import (
    _check_attrs_redefinition,
    _check_dunder_name,
    _check_inheritance,
)
from _dependencies.checks.loops import _check_loops
from _dependencies.exceptions import DependencyError
from _dependencies.injector import Injector, _InjectorType, let
from _dependencies.markers import nested_injector
from _dependencies.spec import _InjectorTypeType, _make_dependency_spec, _make_init_spec
from _dependencies.this import This, _make_this_spec
from dependencies import this, value

Spec = tuple  # (marker, callable, argument names, number of required arguments)

# Attributes being built, across nested lookups: this.<name> starts a fresh lookup on the
# same quantizer (fresh objects, as in Brevitas), so a cycle through it is caught here.
_building = threading.local()


def _active() -> Set[tuple]:
    if not hasattr(_building, "keys"):
        _building.keys = set()
    return _building.keys


class MissingDependencyError(DependencyError, AttributeError):
    """An attribute the quantizer needs is not defined. It is also an AttributeError, so
    ``hasattr(quantizer, name)`` and ``getattr(quantizer, name, default)`` work."""


class _Resolution:
    """One attribute lookup: resolves the dependency graph depth first, building each
    attribute once. Specs that a ``@value`` replaces (by returning a class or ``this``) are
    replaced in this lookup only, so the quantizer class itself is never modified."""

    def __init__(self, injector: type) -> None:
        self.injector = injector
        self.specs: Dict[str, Spec] = injector.__dependencies__
        self.replaced: Dict[str, Spec] = {}
        self.cache: Dict[str, Any] = {"__self__": injector}
        self.building: List[str] = []

    def spec(self, name: str):
        return self.replaced.get(name, self.specs.get(name))

    def has(self, name: str) -> bool:
        return name in self.cache or self.spec(name) is not None

    def missing(self, name: str) -> MissingDependencyError:
        quantizer = self.injector.__name__
        if self.building:
            chain = " -> ".join(self.building)
            return MissingDependencyError(
                f"{quantizer!r} can not resolve attribute {name!r} while building "
                f"{self.building[-1]!r} ({chain}); define {name!r} on {quantizer} or pass it "
                f"as a keyword argument"
            )
        return MissingDependencyError(f"{quantizer!r} can not resolve attribute {name!r}")

    def get(self, name: str) -> Any:
        while True:
            if name in self.cache:
                return self.cache[name]
            spec = self.spec(name)
            if spec is None:
                raise self.missing(name)
            key = (id(self.injector), name)
            active = _active()
            if key in active:
                cycle = " -> ".join(self.building + [name])
                raise DependencyError(
                    f"{self.injector.__name__!r} has a circular dependency: {cycle} (through "
                    f"a @value that returns a class or a this-reference)"
                )
            marker, factory, args, required = spec
            if inspect.isclass(factory) and required > 0:
                required -= 1  # dependencies counts __init__'s self among the required
            active.add(key)
            self.building.append(name)
            try:
                kwargs = {}
                for position, arg in enumerate(args):
                    if self.has(arg):
                        kwargs[arg] = self.get(arg)
                    elif position < required:
                        raise self.missing(arg)
                result = factory(**kwargs)
            finally:
                self.building.pop()
                active.discard(key)
            # A @value that returns a class means "inject an instance of this class".
            if (
                marker != nested_injector
                and inspect.isclass(result)
                and not isinstance(result, _InjectorTypeType)
                and not name.endswith("_class")
            ):
                self.replaced[name] = _make_init_spec(result)
                continue
            # A @value that returns this.<name> means "use that attribute".
            if isinstance(result, This):
                self.replaced[name] = _make_this_spec(result)
                continue
            self.cache[name] = result
            return result


class _ExtendedInjectorType(_InjectorType):
    def __new__(mcs, class_name, bases, namespace):
        if not bases:
            namespace["__dependencies__"] = {}
            namespace["__wrapped__"] = None  # doctest
            namespace["_subs_tree"] = None  # typing
            namespace["__signature__"] = None  # sphinx, inspect
            namespace["__func__"] = None  # torch.jit tracing probes this
            return type.__new__(mcs, class_name, bases, namespace)
        _check_inheritance(bases, (Injector, ExtendedInjector))
        # What the class was made from, so that pickle can make it again (_reduce_injector).
        given = dict(namespace)
        ns = {}
        for attr in ("__module__", "__doc__", "__weakref__", "__qualname__"):
            if attr in namespace:
                ns[attr] = namespace.pop(attr)
        for name in namespace:
            _check_dunder_name(name)
            _check_attrs_redefinition(name)
        dependencies = {}
        for base in reversed(bases):
            dependencies.update(base.__dependencies__)
        for name, dep in namespace.items():
            dependencies[name] = _make_dependency_spec(name, dep)
        _check_loops(class_name, dependencies)
        _check_circles(dependencies)
        ns["__dependencies__"] = dependencies
        ns["__injector_namespace__"] = given
        return type.__new__(mcs, class_name, bases, ns)

    # Debuggers call len() on whatever they inspect.
    def __len__(cls) -> int:
        return 0

    def __getattr__(cls, attrname: str) -> Any:
        __tracebackhide__ = True
        if (
            attrname.startswith("__")
            and attrname.endswith("__")
            and attrname not in cls.__dependencies__
        ):
            # Protocol probes (copy, pickle, typing) must not trigger injection.
            raise AttributeError(attrname)
        return _Resolution(cls).get(attrname)


def _importable(cls: type) -> bool:
    """Whether pickle finds cls itself under its module and qualified name."""
    found: Any = sys.modules.get(cls.__module__)
    for part in cls.__qualname__.split("."):
        found = getattr(found, part, None)
    return found is cls


def _rebuild_injector(name: str, bases: tuple, namespace: Dict[str, Any]) -> type:
    """A quantizer class made again from what made it (its bases and attributes)."""
    return type(name, bases, dict(namespace))


def _reduce_injector(cls: type):
    """How pickle saves a quantizer class: by name when importable, as any class; else (the
    classes .let() makes, e.g. every proxy's quant_injector) as its bases and attributes, so
    that torch.save of a whole model works."""
    if _importable(cls) or "__injector_namespace__" not in cls.__dict__:
        return cls.__qualname__
    return _rebuild_injector, (cls.__name__, cls.__bases__, cls.__injector_namespace__)


def _no_instances(self, *args, **kwargs):
    raise DependencyError("Do not instantiate an injector: read its attributes instead")


ExtendedInjector = _ExtendedInjectorType(
    "ExtendedInjector",
    (),
    {
        "__init__": _no_instances,
        "__doc__": __doc__,
        "let": classmethod(let),
    },
)
BaseInjector = ExtendedInjector  # Brevitas's older name
# Consulted before pickle's own rule for classes (by name), which fails for made classes.
copyreg.pickle(_ExtendedInjectorType, _reduce_injector)

__all__ = [
    "BaseInjector",
    "DependencyError",
    "ExtendedInjector",
    "Injector",
    "MissingDependencyError",
    "this",
    "value",
]
