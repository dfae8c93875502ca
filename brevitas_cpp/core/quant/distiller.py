"""Distiller's quantization-aware-training methods as quantizer blocks: PACT's learned clipping
(LearnedClippedLinearQuant), DoReFa's fixed clipping of activations (ClippedLinearQuant), its weights (DorefaParamQuant) and the range-based linear
quantizers of QuantAwareTrainRangeLinearQuantizer, for activations with an EMA of the range
(RangeLinearFakeQuant) and for parameters from the tensor itself (RangeLinearParamQuant).

Distiller writes a quantizer as q = round(m * x - z), x' = (q + z) / m with a multiplier m and
an offset z; Brevitas as x' = (q - zero_point) * scale. Each block computes Distiller's numbers
and returns Brevitas's metadata, scale = 1 / m and zero_point = -z, with bit widths and signs
(chosen by the quantizers in brevitas_cpp.quant.distiller) that hold every integer q produced.
Rounding is half to even (torch.round, as Distiller), straight through (round_ste)."""

import numbers
from enum import Enum
from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor, nn

from brevitas_cpp import jit
from brevitas_cpp.core._state_dict import KeyPolicy
from brevitas_cpp.core.quant._checks import check_bool, check_int, check_open_unit_interval
from brevitas_cpp.core.quant.block_output import QuantBlockOutput
from brevitas_cpp.core.utils import StatelessBuffer
from brevitas_cpp.function.ops_ste import round_ste, tensor_clamp_ste

__all__ = [
    "LINEAR_QUANT_MODES",
    "ClippedLinearQuant",
    "DorefaParamQuant",
    "LearnedClippedLinearQuant",
    "RangeLinearFakeQuant",
    "RangeLinearParamQuant",
    "check_act_clip_init_val",
    "check_ema_decay",
    "check_linear_quant_mode",
    "check_pact_dorefa_bit_width",
    "check_per_channel",
    "check_range_linear_bit_width",
    "linear_quant_bit_width",
    "linear_quant_levels",
    "linear_quant_params",
]

SYMMETRIC, SYMMETRIC_RESTRICTED = "SYMMETRIC", "SYMMETRIC_RESTRICTED"
ASYMMETRIC_UNSIGNED, ASYMMETRIC_SIGNED = "ASYMMETRIC_UNSIGNED", "ASYMMETRIC_SIGNED"
LINEAR_QUANT_MODES = (SYMMETRIC, SYMMETRIC_RESTRICTED, ASYMMETRIC_UNSIGNED, ASYMMETRIC_SIGNED)
# Layers report integers as int32 at most.
MAX_BITS = 32


# ---- argument checks (shared with the quantizers, so errors name whichever is built) ----------


def check_pact_dorefa_bit_width(owner: str, bit_width: Any) -> int:
    return check_int(owner, "bit_width", bit_width, "integers [0, 2^bit_width - 1]", 1, MAX_BITS)


def check_range_linear_bit_width(owner: str, bit_width: Any) -> int:
    # 1 bit: Distiller's symmetric range rounds every value to 0 (restricted divides by 0).
    return check_int(owner, "bit_width", bit_width, "Distiller's num_bits", 2, MAX_BITS)


def check_act_clip_init_val(
    owner: str, value: Any, name: str = "act_clip_init_val", meaning: str = "PACT's initial"
) -> float:
    """A clipping value (PACT's initial alpha, or DoReFa's fixed one): a finite real > 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{owner}: {name} must be a float > 0 ({meaning} clipping value), "
            f"got {value!r} of type {type(value).__name__}"
        )
    if not 0.0 < float(value) < float("inf"):
        raise ValueError(
            f"{owner}: {name} must be a finite float > 0 ({meaning} clipping value), got {value!r}"
        )
    return float(value)


def check_ema_decay(owner: str, ema_decay: Any) -> float:
    return check_open_unit_interval(
        owner, "ema_decay", ema_decay, "the weight of the running range at each batch"
    )


def check_per_channel(owner: str, per_channel: Any) -> bool:
    check_bool(owner, "per_channel", per_channel)
    return per_channel


def check_linear_quant_mode(owner: str, mode: Any) -> str:
    """One of LINEAR_QUANT_MODES (case-insensitive), or an enum member of that name (e.g.
    Distiller's LinearQuantMode); returned upper-case."""
    name = mode.name if isinstance(mode, Enum) else mode
    if isinstance(name, str) and name.upper() in LINEAR_QUANT_MODES:
        return name.upper()
    accepted = ", ".join(repr(m) for m in LINEAR_QUANT_MODES)
    raise ValueError(f"{owner}: linear_quant_mode must be one of {accepted}, got {mode!r}")


def linear_quant_bit_width(bit_width: int, mode: str) -> int:
    """The bit width the integers of a mode need. SYMMETRIC's multiplier maps the range to
    +-(2^b - 1) / 2, which rounds half to even to +-2^(b-1): 2^b + 1 levels, b + 1 bits (Distiller
    clamps no integer in QAT). The other modes stay within b bits."""
    return bit_width + 1 if mode == SYMMETRIC else bit_width


# ---- Distiller's multiplier and offset -----------------------------------------------------------


def linear_quant_levels(bit_width: int, mode: str) -> Tuple[bool, float, float]:
    """(symmetric, n, offset) of a mode: Distiller's n (the multiplier maps the range's extent to
    it) and the offset ASYMMETRIC_SIGNED adds to the zero point."""
    if mode == SYMMETRIC:
        return True, (2.0**bit_width - 1.0) / 2.0, 0.0
    if mode == SYMMETRIC_RESTRICTED:
        return True, 2.0 ** (bit_width - 1) - 1.0, 0.0
    offset = 2.0 ** (bit_width - 1) if mode == ASYMMETRIC_SIGNED else 0.0
    return False, 2.0**bit_width - 1.0, offset


def linear_quant_params(
    lo: Tensor, hi: Tensor, symmetric: bool, n: float, offset: float
) -> Tuple[Tensor, Tensor]:
    """(m, z) of Distiller's symmetric/asymmetric_linear_quantization_params for the range
    [lo, hi] (tensors of one shape), with linear_quant_levels's numbers. A zero range gives
    m = 1 (every value quantizes to 0)."""
    if symmetric:
        sat = torch.maximum(lo.abs(), hi.abs())
        m = n / sat.masked_fill(sat == 0, n)
        return m, torch.zeros_like(m)
    # The range always holds 0, so that 0 is exact.
    sat_min = torch.clamp_max(lo, 0.0)
    diff = torch.clamp_min(hi, 0.0) - sat_min
    m = n / diff.masked_fill(diff == 0, n)
    z = torch.round(m * sat_min)
    if offset != 0.0:
        z = z + offset
    return m, z


def _fake_quant(x: Tensor, m: Tensor, z: Tensor) -> Tensor:
    """Distiller's LinearQuantizeSTE with dequantize: (round(m x - z) + z) / m, round straight
    through."""
    return (round_ste(m * x - z) + z) / m


def _min_max(x: Tensor, channel_axis: Optional[int]) -> Tuple[Tensor, Tensor]:
    """min and max of x, over everything or per index of channel_axis (shaped to broadcast)."""
    if channel_axis is None:
        return x.min(), x.max()
    axis = channel_axis
    rows = x.transpose(0, axis).reshape(x.shape[axis], -1)
    shape = [1] * x.dim()
    shape[axis] = x.shape[axis]
    return rows.amin(1).view(shape), rows.amax(1).view(shape)


# ---- state_dict -----------------------------------------------------------------------------------


class _ScalarStateDict(KeyPolicy):
    """The blocks keep per-tensor state 0-dim; Distiller's modules keep it in shape [1] (and
    iter_count in float): one-element entries load into either layout. A float model's
    checkpoint (without the block) loads strictly: the state keeps its initial value
    (DERIVED_KEYS)."""

    NEVER_SAVED_KEYS = ("training",)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        own: Dict[str, Tensor] = dict(self._parameters)
        own.update(self._buffers)
        for name, tensor in own.items():
            value = state_dict.get(prefix + name)
            if (
                isinstance(value, Tensor)
                and tensor is not None
                and value.numel() == 1
                and tensor.numel() == 1
            ):
                state_dict[prefix + name] = value.reshape(tensor.shape).to(tensor.dtype)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )


# ---- PACT ----------------------------------------------------------------------------------------


class LearnedClippedLinearQuant(_ScalarStateDict, jit.ScriptModule):
    """PACT (Choi et al. 2018), Distiller's LearnedClippedLinearQuantization: y = relu(x)
    clipped at the learned clip_val (alpha), quantized to unsigned bit_width integers with
    m = (2^b - 1) / clip_val, zero point 0. forward(x) -> (y, 1 / m, 0, bit_width).

    clip_val is a Parameter (0-dim) that learns from the elements at or above it (torch.where,
    as Distiller: the tie goes to clip_val); m is computed without gradient. A clip_val of 0
    gives m = 1, as in Distiller; a negative one gives NaN (Distiller raises ValueError)."""

    __constants__ = ["nbits", "levels"]
    FINITE_KEYS = ("clip_val",)
    INIT_KEPT_KEYS = ("clip_val",)
    DERIVED_KEYS = ("clip_val",)

    def __init__(self, bit_width: int = 8, act_clip_init_val: float = 8.0) -> None:
        super().__init__()
        owner = type(self).__name__
        self.nbits = check_pact_dorefa_bit_width(owner, bit_width)
        self.levels = 2.0**self.nbits - 1.0
        # The name Distiller's PACTQuantizer (and brevitas_cpp's schedules) find it by.
        self.clip_val = nn.Parameter(
            torch.tensor(check_act_clip_init_val(owner, act_clip_init_val))
        )
        self.zero_point = StatelessBuffer(torch.tensor(0.0))
        self.bit_width = StatelessBuffer(torch.tensor(float(self.nbits)))

    @jit.script_method
    def forward(self, x: Tensor) -> QuantBlockOutput:
        x = torch.relu(x)
        # where, not clamp: at and above clip_val the gradient goes to clip_val (PACT's dy/da).
        x = torch.where(x < self.clip_val, x, self.clip_val)
        with torch.no_grad():
            clip = self.clip_val.detach()
            # Distiller's zero range: m = 1. Distiller raises on a negative clip_val; NaN here
            # (as the library's GPU kernels do), so that no call waits on the host.
            clip = clip.masked_fill(clip == 0, self.levels).masked_fill(clip < 0, float("nan"))
            m = self.levels / clip
        y = round_ste(m * x) / m
        return y, 1.0 / m, self.zero_point(), self.bit_width()

    def extra_repr(self) -> str:
        return f"bit_width={self.nbits}"


class ClippedLinearQuant(jit.ScriptModule):
    """Distiller's ClippedLinearQuantization (DoReFa's and WRPN's activations): x clamped to
    [0, clip_val], a constant (1 in Distiller's quantizers), and quantized to unsigned bit_width
    integers with m = (2^b - 1) / clip_val, zero point 0. forward(x) -> (y, 1 / m, 0,
    bit_width). The clamp's gradient is 1 in [0, clip_val], ends included, as torch.clamp's."""

    __constants__ = ["nbits", "clip_val"]

    def __init__(self, bit_width: int = 8, act_clip_val: float = 1.0) -> None:
        super().__init__()
        owner = type(self).__name__
        self.nbits = check_pact_dorefa_bit_width(owner, bit_width)
        self.clip_val = check_act_clip_init_val(owner, act_clip_val, "act_clip_val", "the")
        # In float32, as Distiller's asymmetric_linear_quantization_params computes it.
        m = torch.tensor(2.0**self.nbits - 1.0) / torch.tensor(self.clip_val)
        self.multiplier = StatelessBuffer(m)
        self.scale = StatelessBuffer(1.0 / m)
        self.zero_point = StatelessBuffer(torch.tensor(0.0))
        self.bit_width = StatelessBuffer(torch.tensor(float(self.nbits)))

    @jit.script_method
    def forward(self, x: Tensor) -> QuantBlockOutput:
        m = self.multiplier()
        y = round_ste(m * torch.clamp(x, 0.0, self.clip_val)) / m
        return y, self.scale(), self.zero_point(), self.bit_width()

    def extra_repr(self) -> str:
        return f"bit_width={self.nbits}, clip_val={self.clip_val}"


# ---- DoReFa --------------------------------------------------------------------------------------


class DorefaParamQuant(jit.ScriptModule):
    """DoReFa weights (Zhou et al. 2016), Distiller's dorefa_quantize_param.

    bit_width b >= 2: t = tanh(w) / (2 max|tanh(w)|) + 0.5 (differentiable, max included),
    q = round((2^b - 1) t) straight through, y = 2 q / (2^b - 1) - 1: unsigned integers q in
    [0, 2^b - 1] with scale 2 / (2^b - 1) and zero point (2^b - 1) / 2 (not an integer: 0 is not
    on DoReFa's grid). An all-zero w gives NaN, as in Distiller.

    b = 1: y = E sign(w) (+E at 0), E = mean|w|, with the identity as backward for w (Distiller's
    DorefaParamsBinarizationSTE): signed integers +-1, scale E, zero point 0.
    forward(w) -> (y, scale, zero_point, bit_width)."""

    __constants__ = ["nbits", "levels"]

    def __init__(self, bit_width: int = 8) -> None:
        super().__init__()
        self.nbits = check_pact_dorefa_bit_width(type(self).__name__, bit_width)
        self.levels = 2.0**self.nbits - 1.0
        binary = self.nbits == 1
        self.grid_scale = StatelessBuffer(torch.tensor(2.0 / self.levels))
        self.zero_point = StatelessBuffer(torch.tensor(0.0 if binary else self.levels / 2.0))
        self.bit_width = StatelessBuffer(torch.tensor(float(self.nbits)))

    @jit.script_method
    def forward(self, w: Tensor) -> QuantBlockOutput:
        if self.nbits == 1:
            with torch.no_grad():
                e = w.abs().mean()
                y = torch.where(w == 0, torch.ones_like(w), torch.sign(w)) * e
            # Clamped to [y, y]: exactly y, with w's gradient passed through unchanged.
            return tensor_clamp_ste(w, y, y), e, self.zero_point(), self.bit_width()
        t = torch.tanh(w)
        t = t / (2 * t.abs().max()) + 0.5
        q = round_ste(self.levels * t) / self.levels
        return 2 * q - 1, self.grid_scale(), self.zero_point(), self.bit_width()

    def extra_repr(self) -> str:
        return f"bit_width={self.nbits}"


# ---- range-based linear quantization -------------------------------------------------------------


class RangeLinearParamQuant(jit.ScriptModule):
    """Distiller's QAT linear_quantize_param: m and z from the tensor's range at every call
    (max|w| for the symmetric modes, [min(w, 0), max(w, 0)] for the asymmetric ones), per
    tensor or per index of channel_axis, without gradient; y = (round(m w - z) + z) / m, round
    straight through and no clamp (Distiller's). forward(w) -> (y, 1 / m, -z, bit_width) with
    the bit width of linear_quant_bit_width."""

    __constants__ = ["nbits", "mode", "symmetric", "levels", "offset", "channel_axis"]

    def __init__(
        self,
        bit_width: int = 8,
        linear_quant_mode: str = SYMMETRIC,
        channel_axis: Optional[int] = None,
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.nbits = check_range_linear_bit_width(owner, bit_width)
        self.mode = check_linear_quant_mode(owner, linear_quant_mode)
        self.symmetric, self.levels, self.offset = linear_quant_levels(self.nbits, self.mode)
        if channel_axis is not None:
            channel_axis = check_int(owner, "channel_axis", channel_axis, "the channel dim", 0)
        self.channel_axis = channel_axis
        reported = linear_quant_bit_width(self.nbits, self.mode)
        self.bit_width = StatelessBuffer(torch.tensor(float(reported)))

    @jit.script_method
    def forward(self, w: Tensor) -> QuantBlockOutput:
        with torch.no_grad():
            lo, hi = _min_max(w.detach(), self.channel_axis)
            m, z = linear_quant_params(lo, hi, self.symmetric, self.levels, self.offset)
        return _fake_quant(w, m, z), 1.0 / m, 0.0 - z, self.bit_width()

    def extra_repr(self) -> str:
        per = "per tensor" if self.channel_axis is None else f"channel_axis={self.channel_axis}"
        return f"bit_width={self.nbits}, linear_quant_mode={self.mode!r}, {per}"


def _ema_step(
    biased: Tensor, tracked: Tensor, current: Tensor, decay: Tensor, correction: Tensor
) -> None:
    """Distiller's update_ema, in place: the biased average, then its bias-corrected value."""
    biased.copy_(biased * decay + (1 - decay) * current)
    tracked.copy_(biased / correction)


TRACKED_STATS = ("tracked_min_biased", "tracked_min", "tracked_max_biased", "tracked_max")


class RangeLinearFakeQuant(_ScalarStateDict, jit.ScriptModule):
    """Distiller's FakeLinearQuantization: activations clamped to a range tracked by an
    exponential moving average of each training batch's min and max, with bias correction,
    then quantized as RangeLinearParamQuant (m, z from the tracked range).

    Training call: iter_count += 1; biased = biased * d + (1 - d) * batch min (max);
    tracked = biased / (1 - d^iter_count); m and z recomputed into the buffers scale and
    zero_point (Distiller's names and values: the multiplier and offset). Eval: the stored
    values, nothing updated. The clamp range is [-max_abs, max_abs] (symmetric) or
    [tracked_min, tracked_max] (asymmetric), so before any training call the output is 0, as
    in Distiller. Under torch.distributed each rank tracks its own batches (no synchronisation).
    forward(x) -> (y, 1 / m, -z, bit_width)."""

    __constants__ = ["nbits", "mode", "symmetric", "levels", "offset", "ema_decay"]
    FINITE_KEYS = TRACKED_STATS + ("scale", "zero_point")
    INIT_KEPT_KEYS = TRACKED_STATS + ("iter_count", "scale", "zero_point")
    DERIVED_KEYS = INIT_KEPT_KEYS

    def __init__(
        self, bit_width: int = 8, linear_quant_mode: str = SYMMETRIC, ema_decay: float = 0.999
    ) -> None:
        super().__init__()
        owner = type(self).__name__
        self.nbits = check_range_linear_bit_width(owner, bit_width)
        self.mode = check_linear_quant_mode(owner, linear_quant_mode)
        self.symmetric, self.levels, self.offset = linear_quant_levels(self.nbits, self.mode)
        self.ema_decay = check_ema_decay(owner, ema_decay)
        for name in TRACKED_STATS:
            self.register_buffer(name, torch.zeros(()))
        self.register_buffer("iter_count", torch.zeros((), dtype=torch.int64))
        self.register_buffer("scale", torch.ones(()))
        self.register_buffer("zero_point", torch.zeros(()))
        reported = linear_quant_bit_width(self.nbits, self.mode)
        self.bit_width = StatelessBuffer(torch.tensor(float(reported)))

    @jit.script_method
    def forward(self, x: Tensor) -> QuantBlockOutput:
        with torch.no_grad():
            if self.training:
                self._track(x.detach())
            # Copies: a later training call updates the buffers in place while autograd may
            # still hold this call's values.
            lo, hi = self.tracked_min.clone(), self.tracked_max.clone()
            if self.symmetric:
                hi = torch.maximum(lo.abs(), hi.abs())
                lo = -hi
            m, z = self.scale.clone(), self.zero_point.clone()
        y = torch.clamp(x, lo.to(x.dtype), hi.to(x.dtype))
        return _fake_quant(y, m, z), 1.0 / m, 0.0 - z, self.bit_width()

    @jit.script_method
    def _track(self, x: Tensor) -> None:
        self.iter_count.add_(1)
        decay = torch.full_like(self.tracked_min, self.ema_decay)
        correction = 1 - decay ** self.iter_count.to(decay.dtype)
        _ema_step(self.tracked_min_biased, self.tracked_min, x.min(), decay, correction)
        _ema_step(self.tracked_max_biased, self.tracked_max, x.max(), decay, correction)
        m, z = linear_quant_params(
            self.tracked_min, self.tracked_max, self.symmetric, self.levels, self.offset
        )
        self.scale.copy_(m)
        self.zero_point.copy_(z)

    def extra_repr(self) -> str:
        return (
            f"bit_width={self.nbits}, linear_quant_mode={self.mode!r}, ema_decay={self.ema_decay}"
        )
