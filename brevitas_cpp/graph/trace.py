"""Operation-level tracing of one forward, with NNCF's scope addresses.

``trace(model, *example_inputs)`` runs the model once under a TorchFunctionMode and module
hooks, and records every torch function call that returns tensors (functional calls such as
``F.relu`` and ``torch.cat``, tensor methods and operators such as ``x + y`` and ``x.mean()``)
as a Node. Its scope is the module path it ran in, each module written ``Type[name]`` under the
model's class, then the operator and its call index within that module:
``ResNet/Sequential[layer1]/BasicBlock[0]/Conv2d[conv1]/conv2d_0``. Metadata reads (``x.shape``,
``x.size(0)``) return no tensor and are not recorded. The same model and inputs give the same
graph. Inside ``no_trace()`` nothing is recorded (a data-dependent part of a forward).
"""

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Tuple

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

try:  # private: how torch.export's non-strict tracer calls submodules (torch >= 2.3)
    from torch.fx.experimental.proxy_tensor import _AttrProxy
except ImportError:  # pragma: no cover - an older or newer torch without it
    _AttrProxy = ()

__all__ = [
    "Node",
    "ScopeTracker",
    "TracedGraph",
    "evaluating",
    "module_scopes",
    "no_trace",
    "trace",
]

_state = threading.local()


@dataclass
class Node:
    """One recorded operation. ``inputs`` are the indices of the nodes whose outputs it takes
    (graph inputs are nodes of operator ``input``)."""

    index: int
    scope: str
    op: str
    call_index: int
    module_scope: str
    input_shapes: List[Tuple[int, ...]]
    output_shapes: List[Tuple[int, ...]]
    inputs: List[int] = field(default_factory=list)


@dataclass
class TracedGraph:
    nodes: List[Node]

    def scopes(self) -> List[str]:
        return [node.scope for node in self.nodes]

    def find(self, scope: str) -> Node:
        for node in self.nodes:
            if node.scope == scope:
                return node
        raise KeyError(f"no traced operation at scope {scope!r}")

    def successors(self, node: Node) -> List[Node]:
        return [n for n in self.nodes if node.index in n.inputs]

    def __str__(self) -> str:
        lines = []
        for node in self.nodes:
            inputs = ", ".join(f"%{i}" for i in node.inputs)
            shapes = ", ".join("x".join(map(str, s)) for s in node.output_shapes)
            lines.append(f"%{node.index} = {node.scope}({inputs}) -> [{shapes}]")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """The graph in Graphviz's dot language (``dot -Tsvg``)."""
        lines = ["digraph traced {", '  node [shape=box, fontname="monospace"];']
        for node in self.nodes:
            label = node.scope.replace('"', '\\"')
            lines.append(f'  n{node.index} [label="{label}"];')
        for node in self.nodes:
            for i in node.inputs:
                lines.append(f"  n{i} -> n{node.index};")
        lines.append("}")
        return "\n".join(lines) + "\n"


def tracing_paused() -> bool:
    """Whether the calls now running are inside no_trace()."""
    return bool(getattr(_state, "paused", 0))


def tensors_of(value: Any) -> List[Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, Tensor)]


def op_name(func: Callable) -> str:
    """The operator's name: an operator method without its dunders (``__iadd__``: iadd), an
    in-place method with its underscore (``add_``), anything else as named."""
    name = getattr(func, "__name__", None) or type(func).__name__
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        return name[2:-2]
    return name


def module_scopes(root: nn.Module) -> Dict[int, str]:
    """Every module's scope, ``Root/Type[name]/...``, from its first name in root."""
    root_name = type(root).__name__
    scopes: Dict[int, str] = {}
    for name, module in root.named_modules():
        if id(module) in scopes:
            continue
        scope, current = root_name, root
        for part in name.split(".") if name else []:
            current = getattr(current, part)
            scope += f"/{type(current).__name__}[{part}]"
        scopes[id(module)] = scope
    return scopes


class ScopeTracker:
    """The scope of each torch call of a forward: the module stack (kept by hooks on every
    module of the root) and a call counter per (module scope, operator). Shared by trace and
    by the quantizers inserted at traced operations, so both name a call alike."""

    def __init__(self, root: nn.Module) -> None:
        self.root_name = type(root).__name__
        self.module_scopes = module_scopes(root)
        self.stack: List[str] = [self.root_name]
        self.calls: Dict[Tuple[str, str], int] = {}

    def reset(self) -> None:
        self.stack = [self.root_name]
        self.calls = {}

    def next_scope(self, op: str) -> Tuple[str, str, int]:
        """(scope, module scope, call index) of the next call of op."""
        module_scope = self.stack[-1]
        call_index = self.calls.get((module_scope, op), 0)
        self.calls[(module_scope, op)] = call_index + 1
        return f"{module_scope}/{op}_{call_index}", module_scope, call_index

    def hook(self, modules: List[nn.Module]) -> List[Any]:
        """Hooks that keep the module stack; returns their handles. Script modules get none:
        they take no hooks, and the calls inside them run compiled, unseen by a mode."""

        def enter(module: nn.Module, _args: Any) -> None:
            # torch.export (non-strict) calls each submodule through a stand-in object that
            # shares its __dict__; get_base() is the module itself, whose scope we know.
            if isinstance(module, _AttrProxy):
                module = module.get_base()
            self.stack.append(self.module_scopes.get(id(module), self.stack[-1]))

        def leave(module: nn.Module, _args: Any, _out: Any) -> None:
            self.stack.pop()

        handles = []
        for module in modules:
            if isinstance(module, torch.jit.ScriptModule):
                continue
            handles.append(module.register_forward_pre_hook(enter))
            handles.append(module.register_forward_hook(leave, always_call=True))
        return handles


class _Recorder(TorchFunctionMode):
    """Records the calls made while the model runs (see the module docstring)."""

    def __init__(self, root: nn.Module) -> None:
        super().__init__()
        self.scopes = ScopeTracker(root)
        self.nodes: List[Node] = []
        self.producer: Dict[int, int] = {}  # id(tensor) -> node index
        self.alive: List[Tensor] = []  # keeps ids unique while tracing

    def add_node(self, op: str, inputs: List[Tensor], outputs: List[Tensor]) -> None:
        scope, module_scope, call_index = self.scopes.next_scope(op)
        index = len(self.nodes)
        sources = []
        for t in inputs:
            source = self.producer.get(id(t))
            if source is not None and source not in sources:
                sources.append(source)
        self.nodes.append(
            Node(
                index=index,
                scope=scope,
                op=op,
                call_index=call_index,
                module_scope=module_scope,
                input_shapes=[tuple(t.shape) for t in inputs],
                output_shapes=[tuple(t.shape) for t in outputs],
                inputs=sources,
            )
        )
        for t in outputs:
            self.producer[id(t)] = index
            self.alive.append(t)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if tracing_paused():
            return out
        outputs = tensors_of(out)
        if outputs:
            self.add_node(op_name(func), tensors_of((args, kwargs)), outputs)
        return out


@contextlib.contextmanager
def evaluating(model: nn.Module, handles: List[Any]) -> Iterator[None]:
    """The model in eval mode and without gradients; on leaving, however it is left, the hook
    handles are removed and every module's mode is restored."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for handle in handles:
            handle.remove()
        for module, training in modes:
            module.training = training


@contextlib.contextmanager
def no_trace() -> Iterator[None]:
    """Operations inside are run but not recorded (e.g. a data-dependent branch)."""
    _state.paused = getattr(_state, "paused", 0) + 1
    try:
        yield
    finally:
        _state.paused -= 1


def trace(model: nn.Module, *example_inputs: Any, **example_kwargs: Any) -> TracedGraph:
    """The operations one forward of model on the example inputs runs (see the module
    docstring). Runs in eval mode and under torch.no_grad, as NNCF builds its graph, so that
    tracing changes nothing (no statistics collected, no BatchNorm running average moved); each
    module's mode is restored after."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"trace: model must be an nn.Module, got {type(model).__name__}")
    recorder = _Recorder(model)
    for i, t in enumerate(tensors_of((example_inputs, example_kwargs))):
        recorder.add_node("input", [], [t])
        recorder.nodes[-1].scope = f"{recorder.scopes.root_name}/input_{i}"
    with evaluating(model, recorder.scopes.hook(list(model.modules()))), recorder:
        model(*example_inputs, **example_kwargs)
    return TracedGraph(recorder.nodes)
