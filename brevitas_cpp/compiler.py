"""Brevitas's ``brevitas.compiler``: ``disable`` keeps a function out of torch.compile's graphs
(``torch._dynamo.disable``, which Brevitas uses from torch 2.1 on; brevitas_cpp needs a newer
torch). Also where brevitas_cpp's step counters meet torch.compile
(``mark_step_counters_dynamic``). A leaf: it imports no package of brevitas_cpp."""

from typing import Any, Callable, Tuple

import torch

from brevitas_cpp._torch_version import torch_version

__all__ = ["STEP_COUNTER_SOURCES", "disable", "mark_step_counters_dynamic", "torch_version"]

disable: Callable[..., Any] = torch._dynamo.disable

# The step counters of the blocks that count training calls: ParameterFromRuntimeStatsScaling
# and ParameterFromRuntimeZeroPoint (``scaling_impl``/``zero_point_impl``), _RuntimeStats
# (``runtime_stats``) and _DelayQuant (``delay_impl``). They are Python ints, as in Brevitas, and
# dynamo treats an int attribute of a module as a constant: every statistics step would compile
# the model again, and past the recompile limit (8) it would run eagerly from then on. Sources
# named here are symbolic ints instead, so the steps of one phase share one graph. The patterns
# are dynamo source names (``re.match``), without commas or spaces (the config's separators).
STEP_COUNTER_SOURCES: Tuple[str, ...] = (
    r".*\._modules\['(scaling_impl|zero_point_impl|runtime_stats)'\]\.counter$",
    r".*\._modules\['delay_impl'\]\.quant_delay_steps$",
)


def mark_step_counters_dynamic() -> None:
    """Add STEP_COUNTER_SOURCES to ``torch.compiler.config.dynamic_sources`` (run on import),
    keeping the entries already there (the user's, e.g. from TORCH_COMPILE_DYNAMIC_SOURCES)."""
    config = torch.compiler.config
    entries = [entry for entry in config.dynamic_sources.split(",") if entry]
    entries += [pattern for pattern in STEP_COUNTER_SOURCES if pattern not in entries]
    config.dynamic_sources = ",".join(entries)


mark_step_counters_dynamic()
