"""Learned rounding (Brevitas's ``brevitas.core.function_wrapper.learned_round``): a
``float_to_int_impl`` whose per-element choice between rounding down and up is a parameter.

``LearnedRoundSte`` holds the parameter ``value`` (one entry per weight element, Brevitas's
state_dict key) and maps it through an implementation:

- ``LearnedRoundHardSigmoid`` (AdaRound, arXiv:2004.10568): h = clamp(sigmoid(v) * (zeta - gamma)
  + gamma, 0, 1), y = floor(x) + h; in eval mode h is the hard decision h > 0.5;
- ``LearnedRoundSigmoid``: h = sigmoid(v / temperature), y = floor(x) + h; in eval mode v > 0;
- ``LearnedRoundIdentity`` (arXiv:2309.05516): y = round(x + clamp(v, -0.5, 0.5)), the clamp
  with a straight-through gradient.

floor and round have straight-through gradients, so x receives the upstream gradient unchanged
and ``value`` receives it through h. ``IntQuant`` runs such a block through its step-by-step
composition (the fused op only knows fixed rounding modes)."""

from typing import Optional

import torch
from torch import Tensor
from torch.nn import Module, Parameter

from brevitas_cpp import config, jit
from brevitas_cpp.core.function_wrapper.ops_ste import TensorClampSte
from brevitas_cpp.core.utils import SliceTensor
from brevitas_cpp.function.ops_ste import floor_ste, round_ste

__all__ = [
    "LearnedRoundHardSigmoid",
    "LearnedRoundIdentity",
    "LearnedRoundSigmoid",
    "LearnedRoundSte",
    "SliceTensor",
]


class LearnedRoundHardSigmoid(jit.ScriptModule):
    """The rectified sigmoid of AdaRound, stretched to (gamma, zeta) and clipped to [0, 1], so
    that the learned offset can reach exactly 0 or 1."""

    __constants__ = ["learned_round_zeta", "learned_round_gamma"]

    def __init__(self, learned_round_zeta: float = 1.1, learned_round_gamma: float = -0.1) -> None:
        super().__init__()
        self.learned_round_zeta = float(learned_round_zeta)
        self.learned_round_gamma = float(learned_round_gamma)

    @jit.script_method
    def forward(self, p: Tensor) -> Tensor:
        h = torch.sigmoid(p) * (self.learned_round_zeta - self.learned_round_gamma)
        h = torch.clamp(h + self.learned_round_gamma, 0.0, 1.0)
        if not self.training:
            return h > 0.5  # the hard decision: round up or down
        return h

    @jit.script_method
    def round_forward(self, x: Tensor, p: Tensor) -> Tensor:
        return floor_ste(x) + p


class LearnedRoundSigmoid(jit.ScriptModule):
    """A plain sigmoid with a temperature; in eval mode the decision v > 0."""

    __constants__ = ["learned_round_temperature"]

    def __init__(self, learned_round_temperature: float = 1.0) -> None:
        super().__init__()
        if learned_round_temperature == 0:
            raise ValueError("LearnedRoundSigmoid: learned_round_temperature must not be 0")
        self.learned_round_temperature = float(learned_round_temperature)

    @jit.script_method
    def forward(self, p: Tensor) -> Tensor:
        if not self.training:
            return p > 0
        return torch.sigmoid(p / self.learned_round_temperature)

    @jit.script_method
    def round_forward(self, x: Tensor, p: Tensor) -> Tensor:
        return floor_ste(x) + p


class LearnedRoundIdentity(jit.ScriptModule):
    """A learned offset added before rounding to nearest, kept within half a step."""

    def __init__(self) -> None:
        super().__init__()
        self.tensor_clamp = TensorClampSte()
        self.upper_lower_bound = jit.Attribute(0.5, float)

    @jit.script_method
    def forward(self, p: Tensor) -> Tensor:
        bound = torch.tensor(self.upper_lower_bound).type_as(p)
        return self.tensor_clamp(p, min_val=-bound, max_val=bound)

    @jit.script_method
    def round_forward(self, x: Tensor, p: Tensor) -> Tensor:
        return round_ste(x + p)


class LearnedRoundSte(jit.ScriptModule):
    """float_to_int_impl with a learned rounding decision per element: the parameter ``value``
    (initialised from ``learned_round_init``, one entry per element of the tensor quantized)
    goes through ``learned_round_impl``, is viewed like the input (``input_view_impl``) and
    sliced like it, and decides how ``x`` is rounded."""

    def __init__(
        self,
        learned_round_impl: Module,
        learned_round_init: Tensor,
        input_view_impl: Module,
        device: Optional[torch.device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        self.learned_round_impl = learned_round_impl
        self.tensor_slicer = SliceTensor()
        self.value = Parameter(learned_round_init.to(device=device, dtype=dtype))
        self.input_view_impl = input_view_impl

    @jit.script_method
    def forward(self, x: Tensor) -> Tensor:
        p = self.tensor_slicer(self.input_view_impl(self.learned_round_impl(self.value)))
        return self.learned_round_impl.round_forward(x, p)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        # BREVITAS_IGNORE_MISSING_KEYS=1: a float checkpoint has no rounding parameters.
        value_key = prefix + "value"
        if config.IGNORE_MISSING_KEYS and value_key in missing_keys:
            missing_keys.remove(value_key)
