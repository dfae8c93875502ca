"""QuantizationInt8: seed 003's training-time quantizer, the C++ op quantization_int8 around
its two buffers (a detection codebase's MXNet operator, with per-channel weights and
power-of-two thresholds added).

Symmetric narrow signed integers [-QL, QL], QL = 2^(bit_width-1) - 1, zero point 0. The
threshold t is max|x| at every call for weights; for activations the max|x| of the first
training batch, then an exponential moving average t * (1 - ema_decay) + max|x| * ema_decay
(over the ranks' maximum under torch.distributed). scale = t / QL (t rounded up to a power of
two with quant_mode="power2"). For the first delay_quant training calls the output is x itself
while the statistics move. forward(x) -> (y, scale, zero_point = 0, bit_width).

``threshold`` (float32: [] per tensor, [C] per channel) and ``iteration`` (int64 []) are
persistent buffers, updated in place by the op in training mode only, so a scripted or
compiled copy of a model that shares them keeps them current. They stay float32/int64 when the
model moves to another dtype (the op's statistics are float32 whatever x's dtype).
"""

from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from brevitas_cpp import jit
from brevitas_cpp.core._state_dict import KeyPolicy
from brevitas_cpp.core.quant._checks import (
    check_bool,
    check_choice,
    check_int,
    check_open_unit_interval,
)
from brevitas_cpp.core.quant.block_output import QuantBlockOutput
from brevitas_cpp.core.utils import StatelessBuffer
from brevitas_cpp.function import quantization_int8

__all__ = ["QuantizationInt8", "check_quantization_int8_args"]

# The op's bounds: QL must be exact in float32 (24 bits), and 1 bit has no symmetric range.
MIN_BITS, MAX_BITS = 2, 24
GRAD_MODES = ("ste", "clip")
QUANT_MODES = ("minmax", "power2")
THRESHOLD, ITERATION = "threshold", "iteration"


def check_quantization_int8_args(
    owner: str,
    bit_width: Any,
    is_weight: Any,
    channel_axis: Any,
    channels: Any,
    ema_decay: Any,
    delay_quant: Any,
    grad_mode: Any,
    quant_mode: Any,
) -> Tuple[int, bool, Optional[int], Optional[int], float, int, str, str]:
    """The constructor arguments of QuantizationInt8, checked and normalised; errors name owner
    (the block, or the quantizer that builds it) and the argument."""
    bit_width = check_int(
        owner,
        "bit_width",
        bit_width,
        "integers [-QL, QL], QL = 2^(bit_width-1) - 1",
        MIN_BITS,
        MAX_BITS,
    )
    check_bool(owner, "is_weight", is_weight)
    if channel_axis is not None:
        channel_axis = check_int(
            owner, "channel_axis", channel_axis, "the axis of x the thresholds run along"
        )
        channels = check_int(owner, "channels", channels, "the number of thresholds", low=1)
    elif channels is not None:
        raise ValueError(
            f"{owner}: channels={channels!r} is given but channel_axis is None (per tensor); "
            f"give channel_axis too for per-channel thresholds"
        )
    ema_decay = check_open_unit_interval(
        owner, "ema_decay", ema_decay, "the weight of each new batch's max|x|"
    )
    delay_quant = check_int(
        owner, "delay_quant", delay_quant, "training calls before quantizing", low=0
    )
    grad_mode = check_choice(owner, "grad_mode", grad_mode, GRAD_MODES)
    quant_mode = check_choice(owner, "quant_mode", quant_mode, QUANT_MODES)
    return (
        bit_width,
        is_weight,
        channel_axis,
        channels,
        ema_decay,
        delay_quant,
        grad_mode,
        quant_mode,
    )


class QuantizationInt8(KeyPolicy, jit.ScriptModule):
    """See the module docstring. channel_axis None: one threshold; an int: one per channel
    along that axis of x, channels of them."""

    __constants__ = [
        "nbits",
        "is_weight",
        "channel_axis",
        "ema_decay",
        "delay_quant",
        "grad_mode",
        "quant_mode",
    ]
    # Some TorchScript versions report the `training` flag as a state entry; it is not state.
    NEVER_SAVED_KEYS = ("training",)
    # Retraining from a float checkpoint: the statistics start afresh (and, for a block that
    # has seen no data, without the flag: _forgive_fresh_statistics).
    INIT_KEPT_KEYS = (THRESHOLD, ITERATION)

    def __init__(
        self,
        bit_width: int = 8,
        is_weight: bool = False,
        channel_axis: Optional[int] = None,
        channels: Optional[int] = None,
        ema_decay: float = 0.01,
        delay_quant: int = 0,
        grad_mode: str = "ste",
        quant_mode: str = "minmax",
    ) -> None:
        super().__init__()
        (
            self.nbits,
            self.is_weight,
            self.channel_axis,
            channels,
            self.ema_decay,
            self.delay_quant,
            self.grad_mode,
            self.quant_mode,
        ) = check_quantization_int8_args(
            type(self).__name__,
            bit_width,
            is_weight,
            channel_axis,
            channels,
            ema_decay,
            delay_quant,
            grad_mode,
            quant_mode,
        )
        shape = () if channels is None else (channels,)
        self.register_buffer(THRESHOLD, torch.zeros(shape, dtype=torch.float32))
        self.register_buffer(ITERATION, torch.zeros((), dtype=torch.int64))
        # Fixed by the settings, not state.
        self.zero_point = StatelessBuffer(torch.tensor(0.0))
        self.bit_width = StatelessBuffer(torch.tensor(float(self.nbits)))

    @jit.script_method
    def forward(self, x: Tensor) -> QuantBlockOutput:
        y, scale, _ = quantization_int8(
            x,
            self.threshold,
            self.iteration,
            self.nbits,
            self.is_weight,
            self.channel_axis,
            self.ema_decay,
            self.delay_quant,
            self.grad_mode,
            self.quant_mode,
            self.training,
        )
        return y, scale, self.zero_point(), self.bit_width()

    def extra_repr(self) -> str:
        per = "per tensor" if self.channel_axis is None else f"channel_axis={self.channel_axis}"
        return (
            f"bit_width={self.nbits}, is_weight={self.is_weight}, {per}, "
            f"ema_decay={self.ema_decay}, delay_quant={self.delay_quant}, "
            f"grad_mode={self.grad_mode!r}, quant_mode={self.quant_mode!r}"
        )

    def _apply(self, fn, *args, **kwargs):
        # model.half()/.double() would convert the float32 statistics buffer too, which the op
        # refuses (and half would round it): it follows the device only.
        threshold = self.threshold
        result = super()._apply(fn, *args, **kwargs)
        if self.threshold.dtype != torch.float32:
            self.threshold = threshold.to(device=self.threshold.device)
        return result

    def _expected_threshold(self) -> str:
        if self.channel_axis is None:
            return "one value (shape []) per tensor"
        return f"one per channel along axis {self.channel_axis}, shape [{self.threshold.shape[0]}]"

    def _checkpoint_error(self, key: str, value: Any) -> Optional[str]:
        """Why a checkpoint entry can not be this block's buffer, or None."""
        owner = type(self).__name__
        if not isinstance(value, Tensor):
            return f"{owner}: {key} must be a tensor, got {type(value).__name__}"
        if key.endswith(THRESHOLD):
            if tuple(value.shape) != tuple(self.threshold.shape) and not (
                self.channel_axis is None and value.numel() == 1
            ):
                return (
                    f"{owner}: {key} has shape {list(value.shape)} in the checkpoint, but this "
                    f"quantizer keeps {self._expected_threshold()} (was it saved from a "
                    f"quantizer of another granularity, or a layer of another size?)"
                )
            if not (
                value.is_floating_point() and bool(torch.all(torch.isfinite(value) & (value >= 0)))
            ):
                return f"{owner}: {key} must hold finite values >= 0 (max|x|), got {value}"
            return None
        if value.numel() != 1 or value.is_floating_point() or value.is_complex():
            return (
                f"{owner}: {key} must be one integer (the training-call counter), got "
                f"{value.dtype} of shape {list(value.shape)}"
            )
        if int(value.reshape(())) < 0:
            return f"{owner}: {key} must be >= 0 (the training-call counter), got {int(value)}"
        return None

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        refused = []
        for name, buffer in ((THRESHOLD, self.threshold), (ITERATION, self.iteration)):
            key = prefix + name
            if key not in state_dict:
                continue
            error = self._checkpoint_error(key, state_dict[key])
            if error is not None:
                # Reported once, in these words, instead of torch's generic size mismatch.
                error_msgs.append(error)
                refused.append(key)
                del state_dict[key]
            else:
                # A per-tensor threshold saved as [1], or a counter of another int dtype.
                state_dict[key] = state_dict[key].reshape(buffer.shape).to(buffer.dtype)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        missing_keys[:] = [key for key in missing_keys if key not in refused]
        self._forgive_fresh_statistics(prefix, missing_keys)

    def _forgive_fresh_statistics(self, prefix: str, missing_keys: list) -> None:
        """A checkpoint without either buffer (a float model's) loads strictly into a block that
        has seen no data: its statistics start from the first training batch, as they would
        have. One buffer without the other, or statistics this block already holds, are still
        reported missing (unless BREVITAS_IGNORE_MISSING_KEYS)."""
        keys = [prefix + THRESHOLD, prefix + ITERATION]
        if all(key in missing_keys for key in keys) and int(self.iteration) == 0:
            missing_keys[:] = [key for key in missing_keys if key not in keys]
