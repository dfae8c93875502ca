"""Base mixins of the quant layers.

QuantProxyMixin attaches one quant proxy to a layer (``weight_quant``, ``input_quant``, ...)
from a quantizer class, a shared proxy instance or None, and routes the layer's prefixed keyword
arguments to that quantizer. QuantLayerMixin gives a layer the QuantTensor input/output
conventions (``return_quant_tensor``).

A keyword argument no quantizer of the layer can consume is accepted, unused, when Brevitas
knows it (as Brevitas ignores it; with a warning where its quantizer is a shared proxy, as
Brevitas warns), and is otherwise an error naming the close matches, unlike Brevitas, which
ignores typos too (see brevitas_cpp.nn.mixin.utils). It can only be judged once every mixin of
the layer has claimed its prefix, so the check runs when the layer's construction returns: the
metaclass's ``__call__`` (``type(layer)(...)`` runs it after ``__init__``, however deeply the
subclass constructors nest).
Shared proxies start tracking the layer only after that check has passed, so a rejected layer
leaves no trace in a proxy it was given.
"""

import difflib
import inspect
import warnings
from dataclasses import dataclass, field
from functools import partial
from inspect import isclass
from typing import Any, Dict, FrozenSet, List, Optional, Set, Union

import torch
from torch import Tensor, nn

from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.inject import ExtendedInjector, Injector
from brevitas_cpp.proxy.materialize import apply_keeping_ties, reset_quantizers
from brevitas_cpp.proxy.script import QuantTuple, ScriptableQuantModule, script_error
from brevitas_cpp.quant_tensor import QuantTensor, _unpack_quant_tensor

from ._brevitas_keywords import QUANTIZER_NAMES as BREVITAS_QUANTIZER_NAMES
from .utils import filter_kwargs, is_brevitas_keyword, quantizer_vocabulary

__all__ = ["QuantProxyMixin", "QuantLayerMixin"]

_BOOK = "_quant_kwargs_book"


@dataclass
class _Claim:
    """One QuantProxyMixin's claim on the layer's keyword arguments."""

    prefix: str  # kwargs_prefix
    argument: str  # the layer argument the quantizer came from, e.g. "weight_quant"
    quantizer: str  # what errors call it: the injector's name or the shared proxy's type
    vocabulary: Optional[FrozenSet[str]]  # None for a shared proxy: it takes no keywords


@dataclass
class _KwargsBook:
    """Bookkeeping of one layer construction, dropped when the outermost __init__ returns."""

    kwargs: Dict[str, Any] = field(default_factory=dict)  # as the user passed them
    internal: Set[str] = field(default_factory=set)  # names the mixins add themselves
    claims: List[_Claim] = field(default_factory=list)
    shared: List[nn.Module] = field(default_factory=list)  # proxies to start tracking the layer


def _layer_name(layer: Any) -> str:
    return type(layer).__name__


def _book(layer: Any) -> _KwargsBook:
    book = layer.__dict__.get(_BOOK)
    if book is None:
        book = _KwargsBook()
        layer.__dict__[_BOOK] = book
    return book


def mark_internal_kwargs(layer: Any, *names: str) -> None:
    """Declare keyword names a mixin passes on its own (e.g. ``input_act_impl``), so the
    check does not hold them against the user."""
    _book(layer).internal.update(names)


def _finish_construction(layer: Any, book: _KwargsBook) -> None:
    for name in book.kwargs:
        if name not in book.internal:
            _check_kwarg(layer, book, name)
    for proxy in book.shared:
        proxy.add_tracked_module(layer)


def _close_matches(name: str, claims: List[_Claim]) -> str:
    """' Did you mean ...?' among the keywords the claims' quantizers consume or Brevitas knows
    under their prefixes, or ''."""
    known = sorted(
        {c.prefix + v for c in claims if c.vocabulary is not None for v in c.vocabulary}
        | {c.prefix + v for c in claims for v in BREVITAS_QUANTIZER_NAMES}
    )
    close = difflib.get_close_matches(name, known, n=3)
    return f" Did you mean {', '.join(close)}?" if close else ""


def _check_kwarg(layer: Any, book: _KwargsBook, name: str) -> None:
    layer_name = _layer_name(layer)
    value = book.kwargs[name]
    prefixes = ", ".join(
        f"{c.prefix!r} ({c.argument})" if c.prefix else f"none ({c.argument})" for c in book.claims
    )
    candidates = [c for c in book.claims if name.startswith(c.prefix)]
    if any(c.vocabulary is not None and name[len(c.prefix) :] in c.vocabulary for c in candidates):
        return
    shared = [c for c in candidates if c.vocabulary is None]
    if is_brevitas_keyword(name):
        # Brevitas ignores a keyword no quantizer of the layer uses; it warns only where the
        # keyword's quantizer is a shared proxy, which takes no keywords.
        if shared:
            c = shared[0]
            warnings.warn(
                f"{layer_name}: keyword argument {name}={value!r} is not used: {c.argument} is a "
                f"shared proxy instance ({c.quantizer}), whose quantizer is already built; "
                f"configure that quantizer instead, or pass a quantizer class as {c.argument}",
                UserWarning,
                stacklevel=4,
            )
        return
    if not candidates:
        raise TypeError(
            f"{layer_name}: unexpected keyword argument {name}={value!r}. Keywords beyond the "
            f"layer's own arguments set quantizer attributes and must start with a quantizer "
            f"prefix; accepted prefixes: {prefixes}.{_close_matches(name, book.claims)}"
        )
    if len(shared) == len(candidates):
        c = shared[0]
        raise TypeError(
            f"{layer_name}: keyword argument {name}={value!r} can not be applied: {c.argument} "
            f"is a shared proxy instance ({c.quantizer}), whose quantizer is already built, and "
            f"no Brevitas quantizer knows it either; configure that quantizer instead, or pass a "
            f"quantizer class as {c.argument}"
        )
    reasons = "; ".join(
        f"{c.argument}={c.quantizer} has no attribute or core-block argument "
        f"{name[len(c.prefix) :]!r}"
        for c in candidates
        if c.vocabulary is not None
    )
    raise TypeError(
        f"{layer_name}: unknown keyword argument {name}={value!r}: {reasons}, and no Brevitas "
        f"layer or quantizer knows it. A keyword <prefix><name> sets attribute <name> of the "
        f"quantizer the prefix selects; accepted prefixes: {prefixes}."
        f"{_close_matches(name, candidates)}"
    )


class _FinishesConstruction(type):
    """Metaclass of the quant layers: finishes a layer once its whole __init__ has run."""

    @property
    def __signature__(cls) -> inspect.Signature:
        # What inspect.signature(cls) shows: __init__'s, not this __call__'s (*args, **kwargs).
        init = inspect.signature(cls.__init__)
        return init.replace(parameters=list(init.parameters.values())[1:])

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        layer = super().__call__(*args, **kwargs)
        book = layer.__dict__.pop(_BOOK, None)
        if book is not None:
            _finish_construction(layer, book)
        return layer


# Brevitas's words for a layer set-up that can not give what forward was asked for (its
# QuantWBIOL.forward_impl raises the first, its pack_output asserts the second): they lead ours.
NOT_CONFIGURED = "QuantLayer is not correctly configured"
NOT_CONFIGURED_CHECK_WARNINGS = NOT_CONFIGURED + ", check if warnings were raised"


class QuantLayerConfigError(RuntimeError, AssertionError):
    """return_quant_tensor=True (or the like) with nothing quantized to return, found in forward
    where Brevitas finds it. Brevitas raises a RuntimeError for some of these set-ups and an
    AssertionError for others: this is both, so code catching either keeps working."""


class QuantProxyMixin(ScriptableQuantModule, metaclass=_FinishesConstruction):
    """Builds the proxy ``<proxy_prefix>quant`` of a layer.

    ``quant`` is a quantizer class (an injector: specialised with the layer's keywords that
    start with ``kwargs_prefix``, then turned into a proxy by its ``proxy_class``), a proxy
    instance (shared between layers) or None (the ``none_quant_injector``: quantization off).
    """

    def __init__(
        self,
        quant,
        proxy_protocol,
        none_quant_injector,
        proxy_prefix: str,
        kwargs_prefix: str,
        **kwargs,
    ):
        proxy_name = proxy_prefix + "quant"
        book = _book(self)
        book.kwargs.update(kwargs)
        prefixed = filter_kwargs(kwargs_prefix, kwargs)
        if quant is None:
            quant = none_quant_injector
        if isclass(quant) and issubclass(quant, (Injector, ExtendedInjector)):
            book.claims.append(
                _Claim(kwargs_prefix, proxy_name, quant.__name__, quantizer_vocabulary(quant))
            )
            injector = quant.let(**prefixed)
            proxy_class = self._proxy_class(injector, proxy_name)
            quant = proxy_class(self, injector)
        elif isinstance(quant, proxy_protocol) and isinstance(quant, nn.Module):
            book.claims.append(_Claim(kwargs_prefix, proxy_name, type(quant).__name__, None))
            book.shared.append(quant)
        else:
            raise TypeError(
                f"{_layer_name(self)}: {proxy_name} must be a quantizer class (an "
                f"ExtendedInjector subclass such as Int8WeightPerTensorFloat or "
                f"Int8ActPerTensorFloat), a quant proxy instance of type "
                f"{proxy_protocol.__name__} to share, or None; got {quant!r} "
                f"({type(quant).__name__})"
            )
        setattr(self, proxy_name, quant)

    def _apply(self, fn, recurse=True):
        # A quantizer reads the layer's weight as a parameter of its own (the same object):
        # moving to or from 'meta' must leave it so (brevitas_cpp.proxy.materialize).
        return apply_keeping_ties(self, partial(super()._apply, fn, recurse))

    def reset_parameters(self) -> None:
        """The torch layer's reset_parameters (the float weights, e.g. nn.Linear's), then every
        quantizer of the layer rebuilt as when it was built (brevitas_cpp.proxy.materialize).
        After to_empty() (a model built on the meta device) this, or load_state_dict(), gives
        the layer's tensors their values."""
        torch_reset = getattr(super(), "reset_parameters", None)
        if torch_reset is not None:
            torch_reset()
        # Called by the torch layer's __init__ too, before any proxy exists: then a no-op.
        reset_quantizers(self)

    def _proxy_class(self, injector: Any, proxy_name: str) -> type:
        try:
            return injector.proxy_class
        except AttributeError:
            raise TypeError(
                f"{_layer_name(self)}: {proxy_name}={injector.__name__} defines no proxy_class; a "
                f"quantizer given to a layer must derive from a solver (WeightQuantSolver, "
                f"BiasQuantSolver, ActQuantSolver, TruncQuantSolver) or set proxy_class"
            ) from None


class QuantLayerMixin(ScriptableQuantModule):
    """QuantTensor conventions of a quant layer: accepts QuantTensor or Tensor inputs, and
    returns a QuantTensor only when ``return_quant_tensor`` is set.

    Under torch.jit.script a layer takes and returns plain Tensors (its one forward compiles,
    see brevitas_cpp.proxy.script), and ``__prepare_scriptable__`` refuses the settings that
    need QuantTensors."""

    def __init__(self, return_quant_tensor: bool):
        if not isinstance(return_quant_tensor, bool):
            raise TypeError(
                f"{_layer_name(self)}: return_quant_tensor must be a bool, got "
                f"{return_quant_tensor!r} ({type(return_quant_tensor).__name__})"
            )
        self.accept_quant_tensor = True
        self.return_quant_tensor = return_quant_tensor

    @property
    def channelwise_separable(self) -> bool:
        raise NotImplementedError(f"{_layer_name(self)} does not define channelwise_separable")

    def __prepare_scriptable__(self) -> "QuantLayerMixin":
        """Called by torch.jit.script on every module before compiling: raises for what the
        scripted forward can not do with plain Tensors, and returns the layer itself (returning another
        module would silently replace the user's layer in its parent)."""
        if self.return_quant_tensor:
            raise script_error(
                self,
                "return_quant_tensor=True",
                "Build the layer with "
                "return_quant_tensor=False (the default of most layers), or trace the model.",
            )
        return self

    @property
    def export_mode(self) -> bool:
        # Layers have no export mode: brevitas_cpp.export puts their proxies in export mode.
        return False

    def _wants_quant_tensor(self, inp: Tensor) -> bool:
        """Whether forward works on QuantTensors (eager mode only): one is returned
        (return_quant_tensor) or given. Checks the input first."""
        if torch.jit.is_scripting():
            return False
        return isinstance(self.unpack_input(inp), QuantTensor) or self.return_quant_tensor

    def _layer_output(self, quant_output: QuantTuple) -> Tensor:
        """What forward returns of its output quantizer's tuple (pack_output in eager mode)."""
        if torch.jit.is_scripting():
            return quant_output[0]
        if isinstance(quant_output, QuantTensor):
            return self.pack_output(quant_output)
        return self.pack_output(quant_output[0])

    def unpack_input(self, inp: Union[Tensor, QuantTensor]) -> Union[Tensor, QuantTensor]:
        # Brevitas strips tensor names here; torch 2.13 has no named tensors left to strip.
        if not isinstance(inp, (Tensor, QuantTensor)):
            raise TypeError(
                f"{_layer_name(self)}: input must be a Tensor or a QuantTensor, got "
                f"{type(inp).__name__}"
            )
        return inp

    def pack_output(self, quant_output: Union[Tensor, QuantTensor]) -> Union[Tensor, QuantTensor]:
        if not self.return_quant_tensor:
            return _unpack_quant_tensor(quant_output)
        if not isinstance(quant_output, QuantTensor):
            raise QuantLayerConfigError(
                f"{NOT_CONFIGURED_CHECK_WARNINGS}: {_layer_name(self)}: return_quant_tensor=True, "
                f"but the output is not quantized: enable output quantization "
                f"(output_quant=...) or feed a quantized input to a layer whose weights are "
                f"quantized"
            )
        return quant_output


# Brevitas names brevitas_cpp does not support raise on use (brevitas_cpp._unsupported).
__getattr__ = unsupported_getattr(__name__)
