"""Quantizers at traced operations (NNCF's insertion points): the inputs or the output of any
call a trace names by scope, functional calls and tensor operators included.

``QuantizerInsertion(model, *example_inputs)`` traces the model once; ``quantize_inputs(scope)``
and ``quantize_output(scope)`` add activation quantizers (QuantIdentity layers, registered under
``model.inserted_quantizers`` so that state_dict, ``.to()`` and DDP see them) and ``apply()``
makes every later forward run them: a TorchFunctionMode, entered by a hook on the model for the
length of its forward, names each call with the trace's scope and quantizes where asked. The
tensor inputs of one call share one quantizer (the two operands of a residual add then get one
scale, as Brevitas's QuantEltwiseAdd gives them); parameters (weights) are left alone, they are
the quant layers' business. ``remove()`` undoes apply(); torch.jit.script is refused (the mode
is not compiled), torch.jit.trace records the quantizers.
"""

import difflib
from typing import Any, Dict, List, Optional

from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from brevitas_cpp.graph.trace import ScopeTracker, op_name, trace, tracing_paused
from brevitas_cpp.nn import QuantIdentity
from brevitas_cpp.proxy.script import script_error
from brevitas_cpp.quant import Int8ActPerTensorFloat

__all__ = ["InsertedQuantizers", "QuantizerInsertion"]


def _key(scope: str, where: str) -> str:
    # ModuleDict keys may not contain dots; scopes have none but may have brackets and slashes.
    return f"{where}:{scope}"


class InsertedQuantizers(nn.ModuleDict):
    """The quantizers inserted in a model, keyed ``inputs:<scope>`` / ``output:<scope>``."""

    def __prepare_scriptable__(self) -> "InsertedQuantizers":
        raise script_error(
            self,
            "quantizers inserted at traced operations run through a TorchFunctionMode",
            "Use torch.jit.trace, or replace the operations by quant layers.",
        )


class _Inserter(TorchFunctionMode):
    def __init__(self, scopes: ScopeTracker, quantizers: InsertedQuantizers) -> None:
        super().__init__()
        self.scopes = scopes
        self.quantizers = quantizers

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if tracing_paused():
            return func(*args, **kwargs)
        scope, _, _ = self.scopes.next_scope(op_name(func))
        before = self.quantizers._modules.get(_key(scope, "inputs"))
        if before is not None:
            args, kwargs = _quantize_activations((args, kwargs), before)
        out = func(*args, **kwargs)
        after = self.quantizers._modules.get(_key(scope, "output"))
        if after is not None:
            out = _quantize_activations(out, after)
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
        self._ops = {node.scope: node for node in self.graph.nodes if node.op != "input"}
        self._handles: List[Any] = []
        self._mode: Optional[_Inserter] = None
        if not hasattr(model, "inserted_quantizers"):
            model.inserted_quantizers = InsertedQuantizers()
        self.quantizers: InsertedQuantizers = model.inserted_quantizers

    def _check_scope(self, scope: str) -> None:
        if scope not in self._ops:
            close = difflib.get_close_matches(scope, list(self._ops), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"QuantizerInsertion: no traced operation at scope {scope!r}{hint}")

    def _add(self, scope: str, where: str, act_quant: Any, kwargs: Dict[str, Any]) -> nn.Module:
        self._check_scope(scope)
        key = _key(scope, where)
        if key in self.quantizers:
            raise ValueError(f"QuantizerInsertion: the {where} of {scope!r} are already quantized")
        if self._mode is not None:
            raise RuntimeError("QuantizerInsertion: add quantizers before apply()")
        quantizer = QuantIdentity(act_quant=act_quant, **kwargs)
        weight = next(self.model.parameters(), None)
        if weight is not None:
            quantizer.to(weight.device)
        self.quantizers[key] = quantizer
        return quantizer

    def quantize_inputs(
        self, scope: str, act_quant: Any = Int8ActPerTensorFloat, **kwargs: Any
    ) -> nn.Module:
        """One quantizer for the tensor inputs (not the parameters) of the call at scope."""
        return self._add(scope, "inputs", act_quant, kwargs)

    def quantize_output(
        self, scope: str, act_quant: Any = Int8ActPerTensorFloat, **kwargs: Any
    ) -> nn.Module:
        """A quantizer for the output of the call at scope."""
        return self._add(scope, "output", act_quant, kwargs)

    def apply(self) -> nn.Module:
        """From now on every forward of the model runs the inserted quantizers."""
        if self._mode is not None:
            raise RuntimeError("QuantizerInsertion.apply: already applied")
        inserted = set(id(m) for m in self.quantizers.modules())
        modules = [m for m in self.model.modules() if id(m) not in inserted]
        scopes = ScopeTracker(self.model)
        mode = _Inserter(scopes, self.quantizers)

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
