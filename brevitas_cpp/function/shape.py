"""Shapes s such that x.view(s) flattens x along chosen dimensions (Brevitas's helpers)."""

from typing import Tuple

from torch import Tensor


def over_tensor(x: Tensor) -> int:
    """Flat: -1."""
    return -1


def over_output_channels(x: Tensor) -> Tuple[int, int]:
    """Output channels (dim 0) by everything else."""
    return x.shape[0], -1


def over_batch_over_tensor(x: Tensor) -> Tuple[int, int]:
    """Batch (dim 0) by everything else."""
    return x.shape[0], -1


def over_batch_over_output_channels(x: Tensor) -> Tuple[int, int, int]:
    """Batch (dim 0) by channels (dim 1) by everything else."""
    return x.shape[0], x.shape[1], -1


def over_output_features(x: Tensor) -> Tuple[int, int]:
    """Everything but the last dim, by the last dim (features)."""
    return -1, x.shape[-1]
