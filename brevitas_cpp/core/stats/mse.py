"""MSE search (Brevitas's ``brevitas.core.stats.stats_op.MSE``): the statistic a scale or zero
point is initialised from is the candidate that minimises the squared quantization error of the
quantizer's own output, sum((x - Q(x))^2) (per output channel when ``stats_reduce_dim`` is set).

Candidates are multiples of ``init = mse_init_op(x)`` (e.g. max|x|): ``grid`` tries
``init * i / mse_iters`` for i = 2 ... mse_iters, ``fibonacci`` narrows [init / mse_iters, init]
in mse_iters - 1 Fibonacci steps (it assumes the error is unimodal there). Each candidate is
evaluated by calling the quant proxy that owns this block, with every block of the proxy in
*local-loss mode*: the MSE blocks return their current candidate and the learned scales and zero
points return the statistic without initialising themselves or their running averages.

The block holds a reference to the proxy, so it is a plain ``nn.Module`` (as Brevitas's) with its
Python state in an ``_MSESearch``. With ``BREVITAS_JIT=1`` the script blocks around it compile it;
its compiled forward then calls the search back in Python (``_search_forward_in_python``), so such a
model runs but can not be saved with ``torch.jit.save``. Under ``torch.jit.script`` of a layer
(``BREVITAS_JIT=0``) the compiled forward raises instead: run the search eagerly first (one
forward of the layer, in training mode for activations, for as many steps as the quantizer
collects statistics), after which it is never called again and the scripted layer can be saved."""

import itertools
import weakref
from typing import Any, Callable, List, Optional

import torch
from torch import Tensor, nn

from brevitas_cpp import config
from brevitas_cpp.core._checks import checked_module

from .stats_op import _checked_dim

__all__ = ["DEFAULT_MSE_ITERS", "DEFAULT_MSE_SEARCH_METHOD", "MSE", "MSE_SEARCH_METHODS"]

MSE_SEARCH_METHODS = ("fibonacci", "grid")
DEFAULT_MSE_SEARCH_METHOD = "fibonacci"
DEFAULT_MSE_ITERS = 20

# Fewest iterations per method: fibonacci compares two points per step and needs one step.
_MIN_ITERS = {"fibonacci": 2, "grid": 1}


# ---- switches of the blocks of a proxy ------------------------------------------------------------


class _LocalLossSwitches:
    """The blocks of a proxy with a ``local_loss_mode`` or an ``observer_only`` switch, found
    once per search (walking a proxy of script modules per candidate would cost more than the
    candidate). While a candidate is evaluated every block is in local-loss mode and no block
    only observes (its quantized output is scored), as Brevitas's MSE sets them."""

    def __init__(self, proxy_module: nn.Module) -> None:
        modules = list(proxy_module.modules())
        self.local_loss = [m for m in modules if hasattr(m, "local_loss_mode")]
        self.observers = [m for m in modules if hasattr(m, "observer_only")]
        self.previous_observer_mode: List[bool] = []

    def enter(self) -> None:
        for m in self.local_loss:
            m.local_loss_mode = True
        self.previous_observer_mode = [m.observer_only for m in self.observers]
        for m in self.observers:
            m.observer_only = False

    def exit(self) -> None:
        for m in self.local_loss:
            m.local_loss_mode = False
        for m, observer_only in zip(self.observers, self.previous_observer_mode):
            m.observer_only = observer_only


def _fib_seq(n: int) -> List[int]:
    """F_0 ... F_n (at least [0, 1])."""
    if n <= 0:
        return [0]
    seq = [0, 1]
    while len(seq) <= n:
        seq.append(seq[-1] + seq[-2])
    return seq


def _quantized_value(out: Any) -> Tensor:
    """The value of what a proxy returns: a tensor (nothing quantized), a QuantTensor or a
    QuantTuple (value first)."""
    if isinstance(out, Tensor):
        return out
    value = getattr(out, "value", None)
    return value if isinstance(value, Tensor) else out[0]


# ---- arguments ------------------------------------------------------------------------------------


def _checked_search_method(owner: str, method: Any) -> str:
    if method not in MSE_SEARCH_METHODS:
        raise ValueError(
            f"{owner}: mse_search_method={method!r} is not supported; accepted: "
            f"{', '.join(repr(m) for m in MSE_SEARCH_METHODS)}"
        )
    return method


def _checked_iters(owner: str, iters: Any, method: str) -> int:
    least = _MIN_ITERS[method]
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < least:
        raise ValueError(
            f"{owner}: mse_iters must be an int >= {least} with mse_search_method={method!r}, "
            f"got {iters!r}"
        )
    return iters


def _checked_proxy(owner: str, proxy_module: Any) -> nn.Module:
    if not isinstance(proxy_module, nn.Module):
        raise TypeError(
            f"{owner}: proxy_module must be the quant proxy that owns the quantizer (an "
            f"nn.Module; a proxy injects itself when it builds the quantizer, e.g. a layer's "
            f"weight_quant), got {proxy_module!r}"
        )
    return proxy_module


def _quantizer_call(proxy_module: nn.Module) -> Callable[[Tensor], Any]:
    # quant_tuple is the quantizer alone (no QuantTensor, no inference cache filled with a
    # candidate's output); proxies without it are called as Brevitas calls them.
    quant_tuple = getattr(proxy_module, "quant_tuple", None)
    return quant_tuple if callable(quant_tuple) else proxy_module.forward


# ---- the search -----------------------------------------------------------------------------------


class _ProxySearch:
    """The Python state of a statistic found by searching (MSE, HQO): the proxy whose output is
    scored, the statistic the search starts from (``init``), and ``internal_candidate``, what
    the block returns in local-loss mode (the candidate being evaluated, else the last search's
    result). Subclasses define ``search``."""

    def __init__(
        self, proxy_module: nn.Module, init_op: nn.Module, input_view_shape_impl: nn.Module
    ) -> None:
        self.proxy_module = proxy_module  # not a submodule: the proxy owns this block
        self.init_op = init_op
        self.input_view_shape_impl = input_view_shape_impl
        self.internal_candidate: Optional[Tensor] = None

    def init(self, x: Tensor) -> Tensor:
        return self.init_op(self.input_view_shape_impl(x)).detach()

    def quantize(self, x: Tensor, candidate: Tensor, switches: _LocalLossSwitches) -> Any:
        """The proxy's output on x with candidate as this block's statistic."""
        self.internal_candidate = candidate
        switches.enter()
        try:
            return _quantizer_call(self.proxy_module)(x)
        finally:
            switches.exit()

    def search(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    # A Python loop around calls of the proxy: run eagerly under torch.compile (a graph break).
    @torch.compiler.disable
    def forward(self, x: Tensor, local_loss_mode: bool) -> Tensor:
        if not local_loss_mode:
            with torch.no_grad():
                best = self.search(x)
            # Kept for blocks evaluated later in local-loss mode (e.g. the zero point's search).
            self.internal_candidate = best
            return best
        # Another block is being searched (e.g. the scale before this zero point): the current
        # candidate, or the initial statistic when this block has none yet.
        if self.internal_candidate is None:
            self.internal_candidate = self.init(x)
        return self.internal_candidate


class _MSESearch(_ProxySearch):
    """An MSE block's search (see the module docstring)."""

    def __init__(
        self,
        proxy_module: nn.Module,
        mse_init_op: nn.Module,
        input_view_shape_impl: nn.Module,
        stats_reduce_dim: Optional[int],
        search_method: str,
        iters: int,
    ) -> None:
        super().__init__(proxy_module, mse_init_op, input_view_shape_impl)
        self.stats_reduce_dim = stats_reduce_dim
        self.search_method = search_method
        self.num = iters

    def mse_loss_fn(self, x: Tensor, quant_value: Tensor) -> Tensor:
        """Squared error summed over everything, or per output channel (over the viewed dim)."""
        loss = torch.nn.functional.mse_loss(x, quant_value, reduction="none")
        if self.stats_reduce_dim is not None:
            loss = self.input_view_shape_impl(loss)
            return torch.sum(loss, dim=self.stats_reduce_dim)
        return torch.sum(loss)

    def evaluate_loss(self, x: Tensor, candidate: Tensor, switches: _LocalLossSwitches) -> Tensor:
        """The error of the proxy's output on x with candidate as this block's statistic."""
        return self.mse_loss_fn(x, _quantized_value(self.quantize(x, candidate, switches)))

    def mse_grid_search(self, xl: Tensor, x: Tensor) -> Tensor:
        """The best of xl * i, i = 2 ... num (the first one on ties)."""
        best_loss = torch.tensor(float("inf"), device=x.device, dtype=x.dtype)
        best_candidate = xl
        switches = _LocalLossSwitches(self.proxy_module)
        for i in range(2, self.num + 1):
            candidate = (xl * i).detach()
            loss = self.evaluate_loss(x, candidate, switches)
            best_candidate = torch.where(loss < best_loss, candidate, best_candidate)
            best_loss = torch.min(loss, best_loss)
        return best_candidate

    def mse_fib_search(self, xl: Tensor, xr: Tensor, x: Tensor) -> Tensor:
        """Fibonacci search of [xl, xr], element-wise (per channel): each step keeps the part of
        the interval on the better side of two interior points."""
        fib = _fib_seq(self.num)
        length0 = xr - xl
        length = (fib[self.num - 2] / fib[self.num]) * length0
        switches = _LocalLossSwitches(self.proxy_module)
        for i in range(2, self.num + 1):
            x1 = torch.where(length > length0 / 2, xr - length, xl + length)
            x2 = torch.where(length > length0 / 2, xl + length, xr - length)
            f1 = self.evaluate_loss(x, x1, switches)
            f2 = self.evaluate_loss(x, x2, switches)
            xr = torch.where(f1 <= f2, x2, xr)
            xl = torch.where(f1 >= f2, x1, xl)
            # Equal losses shrink by the plain Fibonacci ratio, otherwise relative to the rest.
            length = (fib[self.num - i] / fib[self.num - (i - 2)]) * torch.where(
                f1 != f2, length0, xr - xl
            )
            length0 = xr - xl
        return torch.where(f1 <= f2, x1, x2)

    def search(self, x: Tensor) -> Tensor:
        init = self.init(x)
        base = init / self.num
        if self.search_method == "grid":
            return self.mse_grid_search(base, x)
        return self.mse_fib_search(base, init, x)


# Compiled search blocks find their search by key (a compiled call into Python gets no self).
_SEARCHES: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_SEARCH_KEYS = itertools.count()


@torch.jit.ignore
def _search_forward_in_python(search_key: int, x: Tensor, local_loss_mode: bool) -> Tensor:
    """The forward of a compiled search block (BREVITAS_JIT=1), run in Python."""
    search = _SEARCHES.get(search_key)
    if search is None:
        raise RuntimeError(
            "the search state of this MSE/HQO block is gone (a TorchScript module loaded from a "
            "file can not run the search); run the search before scripting"
        )
    return search.forward(x, local_loss_mode)


class ProxySearchStats(nn.Module):
    """Base of the statistics found by a search that calls the quant proxy owning the block
    (MSE, HQO): the Python search object (``forward(x, local_loss_mode)`` and
    ``internal_candidate``), local-loss mode, and the compiled forward (see the module
    docstring)."""

    # Compiled in only with BREVITAS_JIT=1, where the script blocks around this one need a
    # compiled forward that calls the search back in Python.
    __constants__ = ["search_from_script"]
    # Python state, carried over to a TorchScript wrapper of this block (which keeps it alive).
    __jit_ignored_attributes__ = ["_search"]
    __jit_unused_properties__ = ["internal_candidate"]

    def _hold_search(self, search: Any) -> None:
        self.local_loss_mode: bool = False
        self.search_from_script = config.JIT_ENABLED
        self._search = search
        self.search_key = next(_SEARCH_KEYS)
        _SEARCHES[self.search_key] = search

    @property
    def internal_candidate(self) -> Optional[Tensor]:
        """The current candidate (the last search's result once a search has run)."""
        return self._search.internal_candidate

    def forward(self, x: Tensor) -> Tensor:
        if torch.jit.is_scripting():
            if self.search_from_script:
                return _search_forward_in_python(self.search_key, x, self.local_loss_mode)
            raise RuntimeError(
                "an MSE or HQO search calls the quant proxy in Python and can not run in a "
                "torch.jit.script'ed model; run the layer eagerly until its quantizer is "
                "initialised (one forward for weights, collect_stats_steps training steps for "
                "activations), then script it"
            )
        return self._search.forward(x, self.local_loss_mode)


class MSE(ProxySearchStats):
    """The statistic (of the shape mse_init_op gives) that minimises the squared error of the
    quantizer's output; see the module docstring. In local-loss mode (set by another block's
    search) it returns its current candidate instead of searching."""

    def __init__(
        self,
        proxy_module: nn.Module,
        mse_init_op: nn.Module,
        inner_stats_input_view_shape_impl: nn.Module,
        stats_reduce_dim: Optional[int] = None,
        mse_search_method: str = DEFAULT_MSE_SEARCH_METHOD,
        mse_iters: int = DEFAULT_MSE_ITERS,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.search_method = _checked_search_method(owner, mse_search_method)
        self.num = _checked_iters(owner, mse_iters, self.search_method)
        self.stats_reduce_dim = _checked_dim(owner, stats_reduce_dim)
        self.mse_init_op = checked_module(owner, "mse_init_op", mse_init_op)
        self.input_view_shape_impl = checked_module(
            owner, "inner_stats_input_view_shape_impl", inner_stats_input_view_shape_impl
        )
        self._hold_search(
            _MSESearch(
                _checked_proxy(owner, proxy_module),
                self.mse_init_op,
                self.input_view_shape_impl,
                self.stats_reduce_dim,
                self.search_method,
                self.num,
            )
        )
