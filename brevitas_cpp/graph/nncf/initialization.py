"""``NNCFInitialization``: the config's initializer run over a data loader as NNCF runs it when
the model is created: range initialisation (graph.calibrate's calibration, one sample at a
time), then BatchNorm adaptation."""

from dataclasses import dataclass
from typing import Any, Dict, Iterable

from torch import Tensor, nn

from brevitas_cpp.graph.calibrate import calibration_mode
from brevitas_cpp.graph.nncf.schema import (
    NUM_BN_ADAPTATION_SAMPLES,
    NUM_INIT_SAMPLES,
    RANGE_INIT_TYPE,
)
from brevitas_cpp.graph.trace import evaluating

__all__ = ["NNCFInitialization"]


@dataclass(frozen=True)
class NNCFInitialization:
    """An NNCF initializer section, run over data by ``run`` (NNCF's order: ranges, then
    BatchNorm statistics). A sample count of 0 skips that step. A batch is a Tensor, or a
    tuple/list whose first item is the input (as graph.calibrate takes them); NNCF takes whole
    batches until the count is reached (ceil(count / batch size) of them)."""

    num_init_samples: int = NUM_INIT_SAMPLES
    range_type: str = RANGE_INIT_TYPE
    num_bn_adaptation_samples: int = NUM_BN_ADAPTATION_SAMPLES

    def run(self, model: nn.Module, data: Iterable[Any]) -> Dict[str, int]:
        """Initialise the prepared model's quantizer ranges and adapt its BatchNorms; returns
        the number of samples each step used."""
        return {
            "range_init_samples": self.initialize_ranges(model, data),
            "bn_adaptation_samples": self.adapt_batchnorms(model, data),
        }

    def initialize_ranges(self, model: nn.Module, data: Iterable[Any]) -> int:
        """graph.calibrate's calibration, one sample at a time: each activation quantizer's
        statistic averaged over the samples, NNCF's mean of per-sample extrema."""
        seen = 0
        if self.num_init_samples == 0:
            return seen
        with calibration_mode(model):
            for batch in data:
                inputs = _batch_input(batch)
                for sample in inputs.split(1):
                    model(sample)
                seen += inputs.shape[0]
                if seen >= self.num_init_samples:
                    break
        return seen

    def adapt_batchnorms(self, model: nn.Module, data: Iterable[Any]) -> int:
        """NNCF's BatchNorm adaptation (nncf/torch/initialization.py): forwards without
        gradients, the BatchNorms in training mode and the rest in eval, so that only their
        running statistics move; every module's mode is restored after."""
        seen = 0
        if self.num_bn_adaptation_samples == 0:
            return seen
        norms = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
        with evaluating(model, []):
            for module in model.modules():
                if isinstance(module, norms):
                    module.train()
            for batch in data:
                inputs = _batch_input(batch)
                model(inputs)
                seen += inputs.shape[0]
                if seen >= self.num_bn_adaptation_samples:
                    break
        return seen


def _batch_input(batch: Any) -> Tensor:
    inputs = batch[0] if isinstance(batch, (tuple, list)) else batch
    if not isinstance(inputs, Tensor):
        raise TypeError(
            f"NNCFInitialization: a batch is a Tensor or a (Tensor, ...) tuple, got "
            f"{type(batch).__name__}"
        )
    return inputs
