"""Quantizers at traced operations (NNCF's insertion points): the inputs or the output of any
call a trace names by scope, functional calls and tensor operators included.

``QuantizerInsertion(model, *example_inputs)`` traces the model once; ``quantize_inputs(scope)``
and ``quantize_output(scope)`` add activation quantizers (QuantIdentity layers, registered under
``model.inserted_quantizers`` so that state_dict, ``.to()`` and DDP see them) at a scope as the
trace names it (NNCF's names: ``Residual/__add___0``), and ``apply()`` makes every later forward
run them: a TorchFunctionMode, entered by a hook on the model for the length of its forward,
addresses each call by its dispatch scope (the trace's other address of the same call, by the
names the mode sees: ``Residual/add_0``, so that no torch.Tensor method is wrapped while the
model runs) and quantizes where asked. The tensor inputs of one call share one quantizer (the
two operands of a residual add then get one scale, as Brevitas's QuantEltwiseAdd gives them);
parameters (weights) are left alone, they are the quant layers' business. ``remove()`` undoes
apply(); torch.jit.script is refused (the mode is not compiled), torch.jit.trace records the
quantizers.
"""

import difflib
from typing import Any, Dict, List, Optional, Tuple

from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from brevitas_cpp.graph.trace import (
    MODEL_INPUT,
    MODEL_OUTPUT,
    ScopeTracker,
    op_name,
    trace,
    tracing_paused,
    untraced,
)
from brevitas_cpp.nn import QuantIdentity
from brevitas_cpp.proxy.script import script_error
from brevitas_cpp.quant import Int8ActPerTensorFloat

__all__ = ["InsertedQuantizers", "QuantizerInsertion"]


def _key(scope: str, where: str, name: str) -> str:
    # ModuleDict keys may not contain dots; scopes have none but may have brackets and slashes.
    return f"{where}:{scope}:{name}"


class InsertedQuantizers(nn.ModuleDict):
    """The modules inserted in a model, keyed ``<inputs|output>:<scope>:<name>``. Called, it is
    the identity: an nn.Sequential model, which calls every child, computes the same with it."""

    def forward(self, x: Any) -> Any:
        return x

    def __prepare_scriptable__(self) -> "InsertedQuantizers":
        raise script_error(
            self,
            "quantizers inserted at traced operations run through a TorchFunctionMode",
            "Use torch.jit.trace, or replace the operations by quant layers.",
        )


class _Inserter(TorchFunctionMode):
    def __init__(self, scopes: ScopeTracker, hooks: Dict[Tuple[str, str], List[nn.Module]]) -> None:
        super().__init__()
        self.scopes = scopes
        self.hooks = hooks  # (dispatch scope, where) -> modules, in priority order

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = op_name(func)
        # The calls trace skips are not counted either, so that both number a call alike.
        if tracing_paused() or untraced(op):
            return func(*args, **kwargs)
        scope = self.scopes.next_dispatch_scope(op)
        for module in self.hooks.get((scope, "inputs"), ()):
            args, kwargs = _quantize_activations((args, kwargs), module)
        out = func(*args, **kwargs)
        for module in self.hooks.get((scope, "output"), ()):
            out = _quantize_activations(out, module)
        return out


def _quantize_activations(value: Any, quantizer: nn.Module) -> Any:
    """value with every tensor that is not a Parameter passed through quantizer."""
    if isinstance(value, nn.Parameter):
        return value
    if isinstance(value, Tensor):
        return quantizer(value)
    if isinstance(value, (list, tuple)):
        items = [_quantize_activations(v, quantizer) for v in value]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        return {k: _quantize_activations(v, quantizer) for k, v in value.items()}
    return value


class QuantizerInsertion:
    """Inserts activation quantizers at the operations of a trace (see the module docstring)."""

    def __init__(self, model: nn.Module, *example_inputs: Any, **example_kwargs: Any) -> None:
        self.model = model
        self.graph = trace(model, *example_inputs, **example_kwargs)
        self._ops = {
            node.scope: node
            for node in self.graph.nodes
            if node.op not in (MODEL_INPUT, MODEL_OUTPUT)
        }
        self._handles: List[Any] = []
        self._mode: Optional[_Inserter] = None
        if not hasattr(model, "inserted_quantizers"):
            model.inserted_quantizers = InsertedQuantizers()
        self.quantizers: InsertedQuantizers = model.inserted_quantizers
        # key -> (priority, insertion order, scope, where): apply() orders and groups by these.
        self._placements: Dict[str, Tuple[int, int, str, str]] = {}

    def _check_scope(self, scope: str) -> None:
        if scope not in self._ops:
            close = difflib.get_close_matches(scope, list(self._ops), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"QuantizerInsertion: no traced operation at scope {scope!r}{hint}")

    def insert(
        self, scope: str, where: str, module: nn.Module, priority: int = 0, name: str = "quant"
    ) -> nn.Module:
        """Run module on the tensor inputs (where="inputs", parameters excepted) or the output
        (where="output") of the call at scope. Several algorithms may share a location: their
        modules run in ascending priority, then in the order inserted."""
        self._check_scope(scope)
        if where not in ("inputs", "output"):
            raise ValueError(
                f"QuantizerInsertion: where must be 'inputs' or 'output', got {where!r}"
            )
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"QuantizerInsertion: module must be an nn.Module, got {type(module).__name__}"
            )
        if not name or "." in name or ":" in name:
            raise ValueError(
                f"QuantizerInsertion: name must be non-empty, without '.' or ':', got {name!r}"
            )
        key = _key(scope, where, name)
        if key in self.quantizers:
            raise ValueError(
                f"QuantizerInsertion: the {where} of {scope!r} already have a module named {name!r}"
            )
        if self._mode is not None:
            raise RuntimeError("QuantizerInsertion: add quantizers before apply()")
        weight = next(self.model.parameters(), None)
        if weight is not None:
            module.to(weight.device)
        self.quantizers[key] = module
        self._placements[key] = (priority, len(self._placements), scope, where)
        return module

    def quantize_inputs(
        self, scope: str, act_quant: Any = Int8ActPerTensorFloat, **kwargs: Any
    ) -> nn.Module:
        """One quantizer (a QuantIdentity of act_quant and Brevitas keywords) for the tensor
        inputs of the call at scope; priority= and name= as for insert."""
        return self._quantize(scope, "inputs", act_quant, kwargs)

    def quantize_output(
        self, scope: str, act_quant: Any = Int8ActPerTensorFloat, **kwargs: Any
    ) -> nn.Module:
        """A quantizer for the output of the call at scope (quantize_inputs's arguments)."""
        return self._quantize(scope, "output", act_quant, kwargs)

    def _quantize(
        self, scope: str, where: str, act_quant: Any, kwargs: Dict[str, Any]
    ) -> nn.Module:
        placement = {k: kwargs.pop(k) for k in ("priority", "name") if k in kwargs}
        return self.insert(scope, where, QuantIdentity(act_quant=act_quant, **kwargs), **placement)

    def apply(self) -> nn.Module:
        """From now on every forward of the model runs the inserted quantizers."""
        if self._mode is not None:
            raise RuntimeError("QuantizerInsertion.apply: already applied")
        inserted = set(id(m) for m in self.quantizers.modules())
        modules = [m for m in self.model.modules() if id(m) not in inserted]
        scopes = ScopeTracker(self.model)
        hooks: Dict[Tuple[str, str], List[nn.Module]] = {}
        for key, (_, _, scope, where) in sorted(self._placements.items(), key=lambda kv: kv[1]):
            dispatch_scope = self._ops[scope].dispatch_scope
            hooks.setdefault((dispatch_scope, where), []).append(self.quantizers[key])
        mode = _Inserter(scopes, hooks)

        def enter(module: nn.Module, _args: Any) -> None:
            scopes.reset()
            mode.__enter__()

        def leave(module: nn.Module, _args: Any, _out: Any) -> None:
            mode.__exit__(None, None, None)

        # The mode first, so that the scope hooks (registered after) run inside it.
        self._handles = [self.model.register_forward_pre_hook(enter)]
        self._handles += scopes.hook(modules)
        self._handles.append(self.model.register_forward_hook(leave, always_call=True))
        self._mode = mode
        return self.model

    def remove(self) -> None:
        """Stop running the quantizers (they stay in model.inserted_quantizers)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._mode = None
