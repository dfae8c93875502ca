"""torch functions that leave a QuantTensor's quantization unchanged.

Each of these maps every integer level of the input to an integer level of the same grid
(selecting, moving or repeating elements, clamping to a level, padding with zeros), so the
output is the function applied to `.value` with the input's scale, zero point and bit width.
`QUANT_TENSOR_FN_HANDLER` maps the torch function to its handler; a QuantTensor's
`__torch_function__` looks functions up here after the integer-specific table."""

import functools
from typing import Any, Callable, Dict, Optional, Sequence

import torch
import torch.nn.functional as F

from brevitas_cpp.quant_tensor.base_quant_tensor import _unpack_quant_tensor

__all__ = ["QUANT_TENSOR_FN_HANDLER", "implements", "quant_invariant_handler"]

QUANT_TENSOR_FN_HANDLER: Dict[Callable, Callable] = {}
# Each QuantTensor type's own handlers, filled by int_torch_handler and float_torch_handler
# (defined here, as in Brevitas).
INT_QUANT_TENSOR_FN_HANDLER: Dict[Callable, Callable] = {}
FLOAT_QUANT_TENSOR_FN_HANDLER: Dict[Callable, Callable] = {}


def handle_torch_function(
    own_handlers: Dict[Callable, Callable],
    func: Callable,
    args: Sequence[Any],
    kwargs: Optional[Dict[str, Any]],
) -> Any:
    """A QuantTensor type's __torch_function__: its own handler, else a shared one, else func on
    the values (a function not known to keep or define a quantization returns plain tensors)."""
    kwargs = kwargs or {}
    if func in own_handlers:
        return own_handlers[func](*args, **kwargs)
    if func in QUANT_TENSOR_FN_HANDLER:
        return QUANT_TENSOR_FN_HANDLER[func](*args, **kwargs)
    return func(*_unpack_quant_tensor(args), **_unpack_quant_tensor(kwargs))


def implements(torch_function: Callable) -> Callable[[Callable], Callable]:
    """Register the decorated function as the QuantTensor handler of torch_function."""

    def register(handler: Callable) -> Callable:
        QUANT_TENSOR_FN_HANDLER[torch_function] = handler
        return handler

    return register


def quant_invariant_handler(fn: Callable, inp: Any, *args: Any, **kwargs: Any) -> Any:
    """fn on inp.value, returned with inp's metadata."""
    return inp.set(value=fn(inp.value, *args, **kwargs))


def _register_invariant(torch_function: Callable) -> None:
    def handler(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002  (torch's name)
        return quant_invariant_handler(torch_function, input, *args, **kwargs)

    handler.__name__ = f"{torch_function.__name__}_handler"
    QUANT_TENSOR_FN_HANDLER[torch_function] = handler


@implements(torch.flatten)
def flatten_handler(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
    return input.flatten(*args, **kwargs)


@implements(torch.reshape)
def reshape_handler(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
    return input.reshape(*args, **kwargs)


@implements(torch.transpose)
def transpose_handler(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002
    return input.transpose(*args, **kwargs)


# Brevitas 0.12's list. Padding keeps the metadata whatever the pad value (as Brevitas).
for _fn in (
    F.pad,
    F.relu,
    F.relu6,
    F.hardtanh,
    F.alpha_dropout,
    F.dropout,
    F.dropout2d,
    F.dropout3d,
    F.max_pool1d,
    F.max_pool2d,
    F.max_pool3d,
    F.adaptive_max_pool1d,
    F.adaptive_max_pool2d,
    F.adaptive_max_pool3d,
    F.pixel_shuffle,
    F.pixel_unshuffle,
):
    _register_invariant(_fn)
del _fn

# Brevitas's names of these handlers (max_pool1d without the suffix, as there).
pad_handler = QUANT_TENSOR_FN_HANDLER[F.pad]
relu_qt_handler = QUANT_TENSOR_FN_HANDLER[F.relu]
relu6_qt_handler = QUANT_TENSOR_FN_HANDLER[F.relu6]
hardtanh_qt_handler = QUANT_TENSOR_FN_HANDLER[F.hardtanh]
alpha_dropout_handler = QUANT_TENSOR_FN_HANDLER[F.alpha_dropout]
dropout_handler = QUANT_TENSOR_FN_HANDLER[F.dropout]
dropout2d_handler = QUANT_TENSOR_FN_HANDLER[F.dropout2d]
dropout3d_handler = QUANT_TENSOR_FN_HANDLER[F.dropout3d]
max_pool1d = QUANT_TENSOR_FN_HANDLER[F.max_pool1d]
max_pool2d_handler = QUANT_TENSOR_FN_HANDLER[F.max_pool2d]
max_pool3d_handler = QUANT_TENSOR_FN_HANDLER[F.max_pool3d]
adaptive_max_pool1d_handler = QUANT_TENSOR_FN_HANDLER[F.adaptive_max_pool1d]
adaptive_max_pool2d_handler = QUANT_TENSOR_FN_HANDLER[F.adaptive_max_pool2d]
adaptive_max_pool3d_handler = QUANT_TENSOR_FN_HANDLER[F.adaptive_max_pool3d]
pixel_shuffle_handler = QUANT_TENSOR_FN_HANDLER[F.pixel_shuffle]
pixel_unshuffle_handler = QUANT_TENSOR_FN_HANDLER[F.pixel_unshuffle]


@implements(F.interpolate)
def interpolate_handler(
    input: Any,  # noqa: A002
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: Any = None,
    recompute_scale_factor: Any = None,
    **kwargs: Any,
) -> Any:
    """Nearest neighbour copies levels (metadata kept); other modes mix them (plain tensor)."""
    call = functools.partial(
        F.interpolate,
        size=size,
        scale_factor=scale_factor,
        mode=mode,
        align_corners=align_corners,
        recompute_scale_factor=recompute_scale_factor,
        **kwargs,
    )
    # torch spells it 'nearest-exact'; Brevitas 0.12 tests 'nearest_exact' (which torch
    # rejects), so there nearest-exact returned a plain tensor. Both copy levels: keep metadata.
    if mode in ("nearest", "nearest-exact", "nearest_exact"):
        return quant_invariant_handler(call, input)
    return call(input.value)
