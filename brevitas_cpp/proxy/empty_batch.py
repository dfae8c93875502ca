"""An empty batch through activation quantizers, handled as BatchNorm handles one in training:
the statistics are left as they are (no statistics step is counted, the running averages are
not touched), the output is the empty tensor of the input's shape and dtype, and every learned
tensor of the quantizer is in the graph with a zero gradient (so that a data-parallel rank whose
batch is empty reduces the same parameters as the others). The quantizer runs as in eval mode:
its scale is the running statistic, or the learned value once initialised.

Eager mode only: the proxies and the recurrent layers call these around their quantizers."""

from contextlib import contextmanager
from typing import Any, Iterator, Optional

import torch
from torch import Tensor, nn

from brevitas_cpp.quant_tensor import _unpack_quant_tensor

__all__ = ["is_empty_batch", "linked_to_parameters", "statistics_paused"]


def is_empty_batch(x: Any) -> bool:
    """Whether x (a Tensor or a QuantTensor) holds no element."""
    value = _unpack_quant_tensor(x)
    return isinstance(value, Tensor) and value.numel() == 0


@contextmanager
def statistics_paused(module: Optional[nn.Module]) -> Iterator[None]:
    """module and everything below it in eval mode while inside (statistics blocks neither
    collect nor count a step in eval); each module's own training flag is restored after."""
    flags = [(m, m.training) for m in module.modules()] if module is not None else []
    try:
        for m, _ in flags:
            m.training = False
        yield
    finally:
        for m, training in flags:
            m.training = training


def linked_to_parameters(x: Any, module: Optional[nn.Module]) -> Any:
    """x (empty) with every parameter of module that requires grad joined to its graph: x plus
    their sums has x's shape and dtype, no element, and gives each of them a zero gradient. A
    QuantTensor is returned as it is."""
    if module is None or not isinstance(x, Tensor):
        return x
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return x
    # A 0-dim sum does not promote x's dtype (float16 stays float16).
    link = torch.stack([p.sum().to(x.dtype) for p in params]).sum()
    return x + link
