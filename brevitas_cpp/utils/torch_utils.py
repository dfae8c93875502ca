"""Brevitas's ``brevitas.utils.torch_utils``: small torch helpers that user code and
calibration scripts import (sequential containers of tuple-returning modules, a forward hook
that sees keyword arguments, a deep copy that shares parameters, padding helpers, the internal
scale of a minifloat format)."""

import copy
import functools
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

from brevitas_cpp import jit
from brevitas_cpp.function import shape
from brevitas_cpp.function.ops_ste import floor_ste

__all__ = [
    "KwargsForwardHook",
    "StopFwdException",
    "TupleSequential",
    "compute_channel_view_shape",
    "float_internal_scale",
    "init_process_group",
    "is_broadcastable",
    "kthvalue",
    "pad_to_dim",
    "padding_to_multiple",
    "torch_dtype",
    "torch_partial_deepcopy",
]

F = TypeVar("F", bound=Callable[..., Any])


class StopFwdException(Exception):
    """Raised by a hook to stop a forward pass early (e.g. once the layer being calibrated has
    seen its input), and caught by whoever ran the forward."""


class TupleSequential(nn.Sequential):
    """A Sequential whose modules may take several inputs: a tuple returned by one module is
    unpacked into the arguments of the next; the first module gets the call's arguments."""

    def output(self, mod: nn.Module, input: Any) -> Any:  # noqa: A002  (Brevitas's name)
        return mod(*input) if isinstance(input, tuple) else mod(input)

    def forward(self, *input: Any) -> Any:  # noqa: A002
        out: Any = input
        for mod in self._modules.values():
            out = self.output(mod, out)
        return out


class KwargsForwardHook(nn.Module):
    """Wraps ``module`` so that ``hook_fn(module, *args, output, **kwargs)`` runs after each
    call: unlike a torch forward hook (before torch 2.0), the hook sees keyword arguments."""

    def __init__(self, module: nn.Module, hook_fn: Callable[..., Any]) -> None:
        super().__init__()
        self.module = module
        self.hook_fn = hook_fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = self.module(*args, **kwargs)
        self.hook_fn(self.module, *args, out, **kwargs)
        return out


def torch_partial_deepcopy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` whose parameters are shallow copies: new Parameter objects over
    the same storage, so the copy's weights are the original's (no memory is duplicated)."""
    memo: Dict[int, Any] = {id(p): copy.copy(p) for p in model.parameters()}
    return copy.deepcopy(model, memo)


def kthvalue(
    x: Tensor,
    k: int,
    dim: Optional[int] = None,
    keepdim: bool = False,
    out: Optional[Tuple[Tensor, Tensor]] = None,
) -> Tuple[Tensor, Tensor]:
    """torch.kthvalue, also for the dtypes it has no kernel for (float16 on the CPU, bfloat16
    on CUDA): those are computed in float32 and the value is cast back (exact: the k-th value
    is one of the inputs)."""
    if out is not None:  # the output dtype could not be controlled
        raise RuntimeError("out argument for kthvalue not supported")
    dtype = x.dtype
    device_type = x.device.type
    unsupported = (dtype == torch.float16 and device_type == "cpu") or (
        dtype == torch.bfloat16 and device_type == "cuda"
    )
    if unsupported:
        x = x.to(torch.float32)
    # torch.kthvalue has no dim=None: leaving dim out selects the last dimension.
    if dim is None:
        values, indices = torch.kthvalue(x, k, keepdim=keepdim)
    else:
        values, indices = torch.kthvalue(x, k, dim=dim, keepdim=keepdim)
    return values.to(dtype), indices


def compute_channel_view_shape(tensor: Tensor, channel_dim: int) -> Tuple[int, ...]:
    """The shape that views a per-channel vector along ``channel_dim`` of ``tensor``, e.g.
    (1, -1, 1, 1) for dim 1 of a 4-d tensor."""
    shape = [1] * tensor.dim()
    shape[channel_dim] = -1
    return tuple(shape)


@jit.script
def float_internal_scale(
    x: Tensor, mantissa_bit_width: Tensor, fp_internal_scale_min: Tensor, eps: float
) -> Tensor:
    """The spacing of the minifloat grid around each element of ``x``:
    2 ** max(floor(log2(|x| + eps)) - mantissa_bit_width, fp_internal_scale_min); the floor has
    a straight-through gradient, and the minimum is the subnormal spacing."""
    exponent = floor_ste(torch.log2(torch.abs(x) + eps)) - mantissa_bit_width
    return torch.exp2(torch.clamp_min(exponent, fp_internal_scale_min))


@jit.ignore
@torch.compiler.disable
def padding_to_multiple(x: Tensor, dim_to_expand: int, dim_multiple: int) -> Tensor:
    """``x`` zero-padded at the end of ``dim_to_expand`` up to a multiple of ``dim_multiple``
    (groupwise quantization splits that dimension in groups of ``dim_multiple``)."""
    return shape.padding_to_multiple(x, dim_to_expand, dim_multiple)


def pad_to_dim(tensor: Tensor, dim_to_expand: int, new_dim: int) -> Tensor:
    """``tensor`` zero-padded at the end of ``dim_to_expand`` to size ``new_dim``."""
    # F.pad lists (before, after) pairs from the last dimension backwards.
    padding = [0] * (2 * tensor.dim())
    padding[2 * (tensor.dim() - 1 - dim_to_expand % tensor.dim()) + 1] = int(
        new_dim - tensor.shape[dim_to_expand]
    )
    return torch.nn.functional.pad(tensor, padding)


def is_broadcastable(tensor: Sequence[int], other: Sequence[int]) -> bool:
    """Whether two shapes broadcast: aligned from the last dimension, each pair is equal or
    has a 1 (the leading dimensions of the longer shape are free)."""
    return all(a == b or a == 1 or b == 1 for a, b in zip(reversed(tensor), reversed(other)))


def torch_dtype(dtype: torch.dtype) -> Callable[[F], F]:
    """Decorator: runs the function with ``dtype`` as torch's default dtype, restored after."""

    def decorator(fn: F) -> F:
        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            previous = torch.get_default_dtype()
            torch.set_default_dtype(dtype)
            try:
                return fn(*args, **kwargs)
            finally:
                torch.set_default_dtype(previous)

        return wrapped  # type: ignore[return-value]

    return decorator


def init_process_group(backend: str = "nccl") -> None:
    """Joins the default process group when the script was started by torchrun (torch elastic);
    does nothing in a plain single-process run."""
    if dist.is_torchelastic_launched():
        dist.init_process_group(backend=backend)
