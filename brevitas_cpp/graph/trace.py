"""Operation-level tracing of one forward, with the scope addresses NNCF 2.x gives its graph nodes.

``trace(model, *example_inputs)`` runs the model once under a TorchFunctionMode and module hooks,
and records every torch call NNCF traces (functional calls such as ``F.relu`` and ``torch.cat``,
tensor methods and operators such as ``x + y`` and ``x.mean()``) as a Node addressed as NNCF
addresses it (``InputAgnosticOperationExecutionContext``, nncf/torch/dynamic_graph/): the scope
of the module running, then ``/<operator>_<n>``, n counting that operator's calls in that scope.

- Scope: the root module's class, then one ``Type[field]`` per module down to the one running,
  each found from the module that called it (breadth first among its children, NNCF's
  ``_get_scope_relative_to_last_registered_module_call``), or just ``Type`` when the caller does
  not hold it: ``ResNet/Sequential[layer1]/BasicBlock[0]/Conv2d[conv1]/conv2d_0``.
- Operator: the name of the torch function or Tensor method NNCF patches, as it names it:
  ``conv2d``, ``batch_norm``, ``cat``, ``view``. Python operators keep their dunders, as NNCF
  patches them by those names (``MagicFunctionsToPatch``): ``x + y`` is ``__add__`` (address
  ``__add___0``), ``x += y`` ``__iadd__``, ``2 * x`` ``__rmul__``, ``x[0]`` ``__getitem__``,
  ``-x`` ``__neg__``; ``x.add(y)`` and ``torch.add`` stay ``add``. In-place calls keep their
  underscore: ``x.add_(y)`` and ``torch.relu_`` are ``add_`` and ``relu_``, and ``F.relu(x,
  inplace=True)`` (so an ``nn.ReLU(inplace=True)``) is ``relu_``, since NNCF leaves F.relu
  unpatched and records the torch.relu_ it calls (``ReLU[relu]/relu__0``). Every other
  functional call is named by its function whatever its inplace flag: ``nn.ReLU6(inplace=True)``
  and ``F.hardtanh(x, inplace=True)`` are ``hardtanh`` (``ReLU6[2]/hardtanh_0``).
- Model inputs and outputs: each input tensor is a node ``/nncf_model_input_<i>`` and each output
  tensor a node ``/nncf_model_output_<i>`` (empty scope: NNCF marks them outside the model).
- Not recorded, as NNCF does not trace them: metadata reads (``x.shape``, ``x.size(0)``,
  ``x.dim()``: properties, and the functions NNCF patches without tracing, including tensor
  creation such as ``torch.ones_like``), private functions and operator dunders outside NNCF's
  list (``x[0] = y``), and anything inside ``no_trace()`` (a data-dependent part of a forward).
  The calls a recorded call makes are not recorded either; a recorded call is recorded whatever
  it returns (``x.tolist()`` too), as NNCF adds its node. One difference remains:
  ``F.multi_head_attention_forward`` is one node here, where NNCF traces inside it.

Operators reach a TorchFunctionMode under their method's name (``x + y`` and ``x.add(y)`` both as
``Tensor.add``), so trace wraps torch.Tensor's operator dunders while it runs to learn which one
ran. Each node also keeps ``dispatch_scope``, the same call addressed by the names the mode sees
(``add``), which is what QuantizerInsertion matches at run time, without those wrappers. The same
model and inputs give the same graph.
"""

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from brevitas_cpp.proxy.quant_proxy import QuantProxyFromInjector

try:  # private: how torch.export's non-strict tracer calls submodules (torch >= 2.3)
    from torch.fx.experimental.proxy_tensor import _AttrProxy
except ImportError:  # pragma: no cover - an older or newer torch without it
    _AttrProxy = ()

__all__ = [
    "MODEL_INPUT",
    "MODEL_OUTPUT",
    "Node",
    "ScopeTracker",
    "TracedGraph",
    "evaluating",
    "module_scopes",
    "no_trace",
    "trace",
]

# NNCF's operator names for the model's inputs and outputs (nncf/common/graph/definitions.py).
MODEL_INPUT = "nncf_model_input"
MODEL_OUTPUT = "nncf_model_output"

# The Tensor dunders NNCF patches, and so records under these names
# (nncf/torch/dynamic_graph/patch_pytorch.py, MagicFunctionsToPatch.TENSOR_MAGIC_FUNCTIONS).
NNCF_DUNDERS = frozenset(
    """__abs__ __add__ __and__ __div__ __eq__ __floordiv__ __ge__ __getitem__ __gt__ __iadd__
    __iand__ __idiv__ __ifloordiv__ __imul__ __invert__ __ior__ __ipow__ __isub__ __itruediv__
    __ixor__ __le__ __lt__ __matmul__ __mod__ __mul__ __ne__ __neg__ __or__ __pow__ __radd__
    __rand__ __rdiv__ __rfloordiv__ __rmatmul__ __rmul__ __ror__ __rpow__ __rsub__ __rtruediv__
    __rxor__ __sub__ __truediv__ __xor__""".split()
)

# The functions NNCF patches without tracing: neither they nor what they call are in its graph
# (same file, FunctionsToPatchWithoutTracing).
NNCF_UNTRACED = frozenset(
    """arange as_subclass as_tensor copysign copysign_ empty ones ones_like rad2deg rad2deg_ rand
    randn randn_like tensor zeros all allclose any assert_int_or_pair backward broadcast_to cpu
    cuda data_ptr dequantize dim handle_torch_function has_names has_torch_function
    has_torch_function_unary has_torch_function_variadic is_contiguous item names numel numpy
    q_per_channel_axis q_per_channel_scales q_per_channel_zero_points q_scale q_zero_point qr
    qscheme random_ record_stream refine_names register_hook rename rename_ shape size sort
    storage storage_offset stride get_device is_floating_point""".split()
)

_state = threading.local()


@dataclass
class Node:
    """One recorded operation. ``inputs`` are the indices of the nodes whose outputs it takes
    (graph inputs are nodes of operator ``nncf_model_input``); ``dispatch_scope`` addresses the
    same call by the operator names a TorchFunctionMode sees (see the module docstring)."""

    index: int
    scope: str
    op: str
    call_index: int
    module_scope: str
    input_shapes: List[Tuple[int, ...]]
    output_shapes: List[Tuple[int, ...]]
    inputs: List[int] = field(default_factory=list)
    dispatch_scope: str = ""


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
    """The name a TorchFunctionMode sees the call under: the function's or method's own
    (``x + y`` arrives as Tensor.add: ``add``)."""
    return getattr(func, "__name__", None) or type(func).__name__


def untraced(name: str) -> bool:
    """Whether NNCF leaves calls of this name out of its graph (see the module docstring):
    functions it patches without tracing, and private names other than its operator dunders."""
    return name in NNCF_UNTRACED or (name.startswith("_") and name not in NNCF_DUNDERS)


def nncf_op_name(func: Callable, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> str:
    """The operator's name as NNCF writes it, for a call that is not an operator dunder:
    ``F.relu(x, inplace=True)`` is NNCF's ``relu_`` (see the module docstring)."""
    if func is F.relu and (kwargs.get("inplace") or (len(args) > 1 and args[1])):
        return "relu_"
    return op_name(func)


def _dunder_wrapper(name: str, original: Callable) -> Callable:
    """original, telling the recorder of this thread which operator dunder is running (the
    mode then sees its method, e.g. Tensor.add for __add__)."""

    def dunder(*args: Any, **kwargs: Any) -> Any:
        if not getattr(_state, "naming", 0):
            return original(*args, **kwargs)
        previous = getattr(_state, "dunder", None)
        _state.dunder = name
        try:
            return original(*args, **kwargs)
        finally:
            _state.dunder = previous

    dunder.__name__ = dunder.__qualname__ = name
    return dunder


_patch_lock = threading.Lock()
_patch_users = 0
_patched: Dict[str, Optional[Callable]] = {}  # dunder -> torch.Tensor's own attribute, if any


@contextlib.contextmanager
def _dunders_named() -> Iterator[None]:
    """torch.Tensor's NNCF dunders wrapped while any trace runs (counted, so that traces in
    several threads share the wrappers; other threads' calls pass straight through them), and
    this thread's recorder told of each one."""
    global _patch_users
    with _patch_lock:
        if _patch_users == 0:
            for name in sorted(NNCF_DUNDERS):
                if hasattr(torch.Tensor, name):
                    _patched[name] = torch.Tensor.__dict__.get(name)
                    setattr(torch.Tensor, name, _dunder_wrapper(name, getattr(torch.Tensor, name)))
        _patch_users += 1
    _state.naming = getattr(_state, "naming", 0) + 1
    try:
        yield
    finally:
        _state.naming -= 1
        with _patch_lock:
            _patch_users -= 1
            if _patch_users == 0:
                for name, own in _patched.items():
                    if own is None:
                        delattr(torch.Tensor, name)
                    else:
                        setattr(torch.Tensor, name, own)
                _patched.clear()


def take_dunder() -> Optional[str]:
    """The operator dunder whose call the recorder now sees, if any (consumed: the calls made
    inside it are not its own)."""
    name = getattr(_state, "dunder", None)
    _state.dunder = None
    return name


def module_scopes(root: nn.Module) -> Dict[int, str]:
    """Every module's scope, ``Root/Type[name]/...``, from its first name in root (the scope
    a forward gives it when each module is called by its parent)."""
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


def _relative_scope(caller: nn.Module, module: nn.Module) -> str:
    """module's path from the module that called it, ``Type[field]/...`` (breadth first, as
    NNCF looks it up), or ``Type`` when caller does not hold it; empty for caller itself."""
    queue: List[Tuple[str, nn.Module]] = [("", caller)]
    for path, current in queue:  # grows while iterated: breadth first
        if current is module:
            return path
        for name, child in current.named_children():
            element = f"{type(child).__name__}[{name}]"
            queue.append((f"{path}/{element}" if path else element, child))
    return type(module).__name__


class ScopeTracker:
    """The scope of each torch call of a forward: the stack of the modules running (kept by
    hooks on every module of the root) and call counters per (module scope, operator), one set
    for NNCF's operator names and one for the names the mode sees (dispatch scopes). Shared by
    trace and by the quantizers inserted at traced operations, so both name a call alike."""

    def __init__(self, root: nn.Module) -> None:
        self.root = root
        self.stack: List[Tuple[nn.Module, str]] = []
        self.calls: Dict[Tuple[str, str], int] = {}
        self.dispatch_calls: Dict[Tuple[str, str], int] = {}
        self._relative: Dict[Tuple[int, int], str] = {}  # per forward: ids are not reused then

    def reset(self) -> None:
        self.stack, self.calls, self.dispatch_calls, self._relative = [], {}, {}, {}

    @property
    def module_scope(self) -> str:
        """The scope of the module running ("" outside the model)."""
        return self.stack[-1][1] if self.stack else ""

    def next_scope(self, op: str) -> Tuple[str, str, int]:
        """(scope, module scope, call index) of the next call of op (NNCF's name)."""
        return self._next(self.calls, op)

    def next_dispatch_scope(self, op: str) -> str:
        """The dispatch scope of the next call of op (the name the mode sees)."""
        return self._next(self.dispatch_calls, op)[0]

    def _next(self, calls: Dict[Tuple[str, str], int], op: str) -> Tuple[str, str, int]:
        module_scope = self.module_scope
        call_index = calls.get((module_scope, op), 0)
        calls[(module_scope, op)] = call_index + 1
        return f"{module_scope}/{op}_{call_index}", module_scope, call_index

    def enter(self, module: nn.Module) -> None:
        if not self.stack:
            self.stack.append((module, type(module).__name__))
            return
        caller, caller_scope = self.stack[-1]
        key = (id(caller), id(module))
        if key not in self._relative:
            self._relative[key] = _relative_scope(caller, module)
        relative = self._relative[key]
        self.stack.append((module, f"{caller_scope}/{relative}" if relative else caller_scope))

    def hook(self, modules: List[nn.Module]) -> List[Any]:
        """Hooks that keep the module stack; returns their handles. Script modules get none:
        they take no hooks, and the calls inside them run compiled, unseen by a mode. Nor do
        the blocks inside a quant proxy: their calls count in the proxy's scope."""

        def enter(module: nn.Module, _args: Any) -> None:
            # torch.export (non-strict) calls each submodule through a stand-in object that
            # shares its __dict__; get_base() is the module itself.
            if isinstance(module, _AttrProxy):
                module = module.get_base()
            self.enter(module)

        def leave(module: nn.Module, _args: Any, _out: Any) -> None:
            self.stack.pop()

        # A quant proxy's call is followed, not the blocks inside it: its quantizer is one step
        # of the model, and a hook on its blocks would keep it off its plan (core/quant/plan).
        inside_proxies = {
            id(block)
            for module in modules
            if isinstance(module, QuantProxyFromInjector)
            for block in tuple(module.modules())[1:]
        }
        handles = []
        for module in modules:
            if isinstance(module, torch.jit.ScriptModule) or id(module) in inside_proxies:
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

    def add_node(
        self, op: str, inputs: List[Tensor], outputs: List[Tensor], dispatch_op: str = ""
    ) -> Node:
        dispatch_scope = self.scopes.next_dispatch_scope(dispatch_op) if dispatch_op else ""
        scope, module_scope, call_index = self.scopes.next_scope(op)
        sources = []
        for t in inputs:
            source = self.producer.get(id(t))
            if source is not None and source not in sources:
                sources.append(source)
        node = Node(
            index=len(self.nodes),
            scope=scope,
            op=op,
            call_index=call_index,
            module_scope=module_scope,
            input_shapes=[tuple(t.shape) for t in inputs],
            output_shapes=[tuple(t.shape) for t in outputs],
            inputs=sources,
            dispatch_scope=dispatch_scope,
        )
        self.nodes.append(node)
        for t in outputs:
            self.producer[id(t)] = node.index
            self.alive.append(t)
        return node

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        dunder = take_dunder()
        out = func(*args, **kwargs)
        dispatch_op = op_name(func)
        if tracing_paused() or untraced(dispatch_op):
            return out
        op = dunder or nncf_op_name(func, args, kwargs)
        self.add_node(op, tensors_of((args, kwargs)), tensors_of(out), dispatch_op)
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
    for t in tensors_of((example_inputs, example_kwargs)):
        recorder.add_node(MODEL_INPUT, [], [t])
    with evaluating(model, recorder.scopes.hook(list(model.modules()))):
        with _dunders_named(), recorder:
            out = model(*example_inputs, **example_kwargs)
    for t in tensors_of(out):
        if id(t) in recorder.producer:  # NNCF marks the outputs it traced
            recorder.add_node(MODEL_OUTPUT, [t], [t])
    return TracedGraph(recorder.nodes)
