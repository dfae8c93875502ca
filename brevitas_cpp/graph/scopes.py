"""NNCF's ignored_scopes / target_scopes, read as NNCF 2.x reads them (nncf/common/scopes.py), for
the modules the Quantizer replaces.

- An entry containing ``{re}`` is a regular expression (the marker removed) searched for in an
  address (``re.search``, as NNCF does); any other entry must equal an address.
- A module's addresses: its name (``layer1.0.conv1``), its scope
  (``ResNet/Sequential[layer1]/BasicBlock[0]/Conv2d[conv1]``), the addresses of the operation
  that computes it, as graph.trace and NNCF name it (``.../Conv2d[conv1]/conv2d_0``; a module
  called twice, as torchvision's BasicBlock calls its ReLU, is also ``.../relu__1``; an exact
  entry may name any call, a ``{re}`` pattern is searched in the first), and, for an exact
  entry, those of the modules it is inside: an entry naming a container selects what it holds.
- ``NNCF<Type>[name]``, as NNCF writes the modules it wraps (``NNCFConv2d[conv1]``), reads as
  ``<Type>[name]``.
- An entry that selects no module of the model is an error naming the closest addresses, as
  NNCF's validate_scopes makes it; ``validate_scopes=False`` turns it into a warning.
"""

import difflib
import re
import warnings
from typing import Dict, Iterable, List, Optional, Pattern, Set, Tuple

from torch import nn

__all__ = ["ModuleAddresses", "ScopeSelection", "module_addresses", "operation_name"]

# The prefix of a class name as NNCF writes the modules it wraps (NNCFConv2d, NNCFLinear).
_NNCF_WRAPPED = re.compile(r"NNCF(?=[A-Z])")
# The operation NNCF records for a module: the torch function its forward calls, by NNCF's name
# (graph.trace; tests/graph/test_nncf_scopes.py traces each). The replaceable modules, and the
# others a scope entry commonly names (NNCF validates entries against every node of its graph).
_OPERATIONS: Dict[type, str] = {
    nn.Conv1d: "conv1d",
    nn.Conv2d: "conv2d",
    nn.Conv3d: "conv3d",
    nn.ConvTranspose1d: "conv_transpose1d",
    nn.ConvTranspose2d: "conv_transpose2d",
    nn.ConvTranspose3d: "conv_transpose3d",
    nn.Linear: "linear",
    nn.Embedding: "embedding",
    nn.ReLU: "relu",  # relu_ in place (_operation)
    nn.ReLU6: "hardtanh",  # F.hardtanh, whatever its inplace flag
    nn.Hardtanh: "hardtanh",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.BatchNorm1d: "batch_norm",
    nn.BatchNorm2d: "batch_norm",
    nn.BatchNorm3d: "batch_norm",
    nn.LayerNorm: "layer_norm",
    nn.GroupNorm: "group_norm",
    nn.MaxPool1d: "max_pool1d",
    nn.MaxPool2d: "max_pool2d",
    nn.MaxPool3d: "max_pool3d",
    nn.AvgPool1d: "avg_pool1d",
    nn.AvgPool2d: "avg_pool2d",
    nn.AvgPool3d: "avg_pool3d",
    nn.AdaptiveAvgPool1d: "adaptive_avg_pool1d",
    nn.AdaptiveAvgPool2d: "adaptive_avg_pool2d",
    nn.AdaptiveAvgPool3d: "adaptive_avg_pool3d",
    nn.AdaptiveMaxPool2d: "adaptive_max_pool2d",
    nn.Dropout: "dropout",
    nn.Dropout2d: "dropout2d",
    nn.Flatten: "flatten",
    nn.Softmax: "softmax",
    nn.Hardswish: "hardswish",
    nn.Hardsigmoid: "hardsigmoid",
    nn.SiLU: "silu",
    nn.GELU: "gelu",
    nn.LeakyReLU: "leaky_relu",
    nn.ELU: "elu",
    nn.PReLU: "prelu",
    nn.Upsample: "interpolate",
}
_CALL_INDEX = re.compile(r"0|[1-9][0-9]*")


class ModuleAddresses:
    """Where a module can be addressed from: its own addresses (name, scope, first operation
    call), the prefix of its operation's calls (``.../ReLU[relu]/relu_``: any call index) and,
    for exact entries only, its containers' names and scopes."""

    def __init__(
        self, own: Tuple[str, ...], containers: Tuple[str, ...], calls: Optional[str] = None
    ) -> None:
        self.own = own
        self.containers = containers
        self.calls = calls

    def is_call(self, address: str) -> bool:
        """Whether address is a call of the module's operation, ``<calls><n>``."""
        if self.calls is None or not address.startswith(self.calls):
            return False
        return _CALL_INDEX.fullmatch(address[len(self.calls) :]) is not None


def operation_name(module: nn.Module) -> Optional[str]:
    """The operator NNCF records for module's forward, as graph.trace names it, if known."""
    operation = _OPERATIONS.get(type(module))
    if type(module) is nn.ReLU and module.inplace:
        # NNCF records the torch.relu_ that F.relu(x, inplace=True) calls (relu__0); the other
        # activations' functional forms are recorded by their own name whatever their flag.
        return "relu_"
    return operation


def module_addresses(name: str, scope: str, module: nn.Module) -> ModuleAddresses:
    own = [name, scope] if name else [scope]
    operation = operation_name(module)
    calls = None
    if operation is not None:
        calls = f"{scope}/{operation}_"
        own.append(f"{calls}0")
    parts = name.split(".") if name else []
    containers = [".".join(parts[:i]) for i in range(1, len(parts))]
    scope_parts = scope.split("/")
    containers += ["/".join(scope_parts[:i]) for i in range(1, len(scope_parts))]
    return ModuleAddresses(tuple(own), tuple(containers), calls)


class ScopeSelection:
    """One of ignored_scopes / target_scopes (see the module docstring)."""

    def __init__(self, what: str, entries: Optional[List[str]]) -> None:
        self.what = what
        if entries is not None and (
            isinstance(entries, str) or not all(isinstance(e, str) for e in entries)
        ):
            raise TypeError(f"Quantizer: {what} must be a list of strings, got {entries!r}")
        self._entries: List[Tuple[str, Optional[Pattern[str]], str]] = []
        for entry in entries or []:
            text = _NNCF_WRAPPED.sub("", entry)
            if "{re}" in text:
                try:
                    pattern = re.compile(text.replace("{re}", ""))
                except re.error as exc:
                    raise ValueError(
                        f"Quantizer: {what}: {entry!r} is not a regular expression ({exc})"
                    ) from exc
                self._entries.append((entry, pattern, text))
            else:
                self._entries.append((entry, None, text))
        self._matched: Set[str] = set()

    def __bool__(self) -> bool:
        return bool(self._entries)

    def selects(self, addresses: ModuleAddresses) -> bool:
        found = False
        for entry, pattern, text in self._entries:
            if pattern is not None:
                hit = any(pattern.search(a) for a in addresses.own)
            else:
                hit = (
                    text in addresses.own or text in addresses.containers or addresses.is_call(text)
                )
            if hit:
                self._matched.add(entry)
                found = True
        return found

    def check_all_selected(self, known: Iterable[str], validate: bool) -> None:
        """An entry that selected no module (every module passed through selects first): an
        error naming the closest known addresses, or a warning when not validating."""
        unmatched = [entry for entry, _, _ in self._entries if entry not in self._matched]
        if not unmatched:
            return
        candidates = sorted(set(known))
        lines = []
        for entry in unmatched:
            close = difflib.get_close_matches(_NNCF_WRAPPED.sub("", entry), candidates, n=3)
            hint = f" (closest: {', '.join(close)})" if close else ""
            lines.append(f"{entry!r}{hint}")
        message = (
            f"Quantizer: {self.what} entries select no module of the model: "
            f"{'; '.join(lines)}. Entries are module names, scopes or operation addresses "
            f"(Model/Type[name]/op_0), or {{re}} patterns searched in them"
        )
        if validate:
            raise ValueError(message + "; validate_scopes=False makes this a warning")
        warnings.warn(message)
