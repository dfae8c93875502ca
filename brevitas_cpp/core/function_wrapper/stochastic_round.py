"""Stochastic rounding (Brevitas's ``core.function_wrapper.stochastic_round``): x rounds up with
probability frac(x) and down otherwise, drawn with torch.bernoulli from the block's own
generator (seeded: the draws are Brevitas's for the same seed), with an identity gradient. In
eval mode it rounds to nearest (``round_ste``) unless ``deterministic_inference=False``."""

from typing import Any, Callable, Optional

import torch
from torch import Tensor

from brevitas_cpp.function.ops_ste import round_ste

__all__ = ["StochasticRoundSte", "stochastic_round_ste_fn"]


def stochastic_round_ste_fn(generator: torch.Generator) -> Callable[[Tensor], Tensor]:
    """The stochastic rounding function drawing from ``generator``."""

    class StochasticRoundSteFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Tensor) -> Tensor:
            floor_x = torch.floor(x)
            prob = torch.bernoulli(torch.abs(x - floor_x), generator=generator)
            return torch.where(prob.to(torch.bool), floor_x + 1.0, floor_x)

        @staticmethod
        def backward(ctx: Any, grad: Tensor) -> Tensor:
            return grad

    return StochasticRoundSteFn.apply


_NOT_SCRIPTABLE = (
    "StochasticRoundSte can not be scripted (BREVITAS_JIT=1 or torch.jit.script): its random "
    "generator is Python state that a script module drops. Run it unscripted (BREVITAS_JIT=0), "
    "or round with RoundSte."
)


class StochasticRoundSte(torch.nn.Module):
    """A ``float_to_int_impl``: stochastic rounding in training, round to nearest in eval
    (``deterministic_inference``); ``seed`` seeds the generator, remade on the input's device
    when it moves. Not scriptable: its generator is Python state a script module drops, so
    scripting it (BREVITAS_JIT=1, torch.jit.script) raises, saying so."""

    def __init__(
        self, deterministic_inference: bool = True, seed: Optional[int] = None, device: Any = None
    ) -> None:
        super().__init__()
        self.seed = seed
        self.deterministic_inference = deterministic_inference
        self.inference_fn = round_ste if deterministic_inference else None
        self._make_generator(device)

    def _make_generator(self, device: Any) -> None:
        self.generator = torch.Generator(device=device)
        if self.seed is not None:
            self.generator.manual_seed(self.seed)
        self.round_fn = stochastic_round_ste_fn(self.generator)

    def __prepare_scriptable__(self) -> "StochasticRoundSte":
        raise RuntimeError(_NOT_SCRIPTABLE)

    @torch.jit.ignore
    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(self, StochasticRoundSte):  # a script module's copy, inside BREVITAS_JIT
            raise RuntimeError(_NOT_SCRIPTABLE)
        if x.device != self.generator.device:
            self._make_generator(x.device)
        if self.deterministic_inference and not self.training:
            return self.inference_fn(x)
        return self.round_fn(x)
