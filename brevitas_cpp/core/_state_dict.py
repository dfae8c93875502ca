"""state_dict handling shared by the core blocks.

``_save_to_state_dict`` / ``_load_from_state_dict`` are plain Python even on scripted modules, so
they can be inherited where script methods cannot: the mixins here are listed before
``jit.ScriptModule`` among a block's bases. ``KeyPolicy`` declares, per block, which entries are
renamed from older checkpoints, never saved, or may be missing; ``LazyInitValueStateDict`` and
``WarmupValueStateDict`` add what loading and saving mean for a learned tensor ``value`` that is
initialised from statistics, on the first call from the tracked parameters (flag ``init_done``)
or after a warm-up of ``collect_stats_steps`` training batches whose running average lives in the
buffer ``buffer`` (``counter`` counts them)."""

from typing import Dict, List, Tuple

from torch import Tensor

from brevitas_cpp import config

__all__ = [
    "KeyPolicy",
    "LEGACY_VALUE_KEYS",
    "LazyInitValueStateDict",
    "WarmupValueStateDict",
    "forgive_missing",
    "forgive_missing_when_ignoring",
]

VALUE_KEY = "value"
# Older checkpoints name a learned scale 'learned_value'.
LEGACY_VALUE_KEYS = (("learned_value", VALUE_KEY),)


def forgive_missing(missing_keys: List[str], key: str) -> None:
    """key is not reported missing: the block never saves it."""
    if key in missing_keys:
        missing_keys.remove(key)


def forgive_missing_when_ignoring(missing_keys: List[str], key: str) -> None:
    """key is not reported missing under config.IGNORE_MISSING_KEYS (retraining from a float
    checkpoint: the block keeps its initial value)."""
    if config.IGNORE_MISSING_KEYS:
        forgive_missing(missing_keys, key)


class KeyPolicy:
    """A declarative ``_load_from_state_dict``, relative to the block's prefix:

    - RENAMED_KEYS: (older name, name) pairs renamed in the checkpoint before loading;
    - NEVER_SAVED_KEYS: entries the block never saves, so never reported missing (a scripted
      module also lists its ``training`` flag among the expected keys);
    - INIT_KEPT_KEYS: entries not reported missing under config.IGNORE_MISSING_KEYS, where the
      block keeps its initial value.

    Subclasses react to what a checkpoint held in ``_after_load``."""

    RENAMED_KEYS: Tuple[Tuple[str, str], ...] = ()
    NEVER_SAVED_KEYS: Tuple[str, ...] = ()
    INIT_KEPT_KEYS: Tuple[str, ...] = ()

    def _after_load(self, state_dict: Dict[str, Tensor], prefix: str) -> None:
        pass

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        for old_key, key in self.RENAMED_KEYS:
            if prefix + old_key in state_dict:
                state_dict[prefix + key] = state_dict.pop(prefix + old_key)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        for key in self.NEVER_SAVED_KEYS:
            forgive_missing(missing_keys, prefix + key)
        for key in self.INIT_KEPT_KEYS:
            forgive_missing_when_ignoring(missing_keys, prefix + key)
        self._after_load(state_dict, prefix)


class LazyInitValueStateDict(KeyPolicy):
    """A block whose ``value`` is initialised on its first call (flag ``init_done``): the
    placeholder is not saved before that (unless config._FULL_STATE_DICT asks for every tensor),
    and loading a value marks the block initialised, so that fresh statistics never overwrite
    it."""

    INIT_KEPT_KEYS = (VALUE_KEY,)

    def _after_load(self, state_dict: Dict[str, Tensor], prefix: str) -> None:
        if prefix + VALUE_KEY in state_dict:
            self.init_done = True

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if not self.init_done and not config._FULL_STATE_DICT:
            destination.pop(prefix + VALUE_KEY, None)


class WarmupValueStateDict(KeyPolicy):
    """A block whose ``value`` is initialised after a warm-up of collect_stats_steps training
    batches (``counter``, running average ``buffer``). Saved as ``value``: nothing before the
    first batch (the placeholder, unless config._FULL_STATE_DICT and
    FULL_STATE_DICT_KEEPS_PLACEHOLDER), the running average (as _warmup_value_of makes it)
    during the warm-up, the learned value afterwards; ``buffer`` itself never. Loading a value
    ends the warm-up."""

    NEVER_SAVED_KEYS = ("buffer", "training")
    INIT_KEPT_KEYS = (VALUE_KEY,)
    FULL_STATE_DICT_KEEPS_PLACEHOLDER = True

    def _warmup_value_of(self, average: Tensor) -> Tensor:
        """What the running average is saved as (e.g. moved into a restrict domain)."""
        return average

    def _after_load(self, state_dict: Dict[str, Tensor], prefix: str) -> None:
        if prefix + VALUE_KEY in state_dict:
            self.counter = self.collect_stats_steps + 1

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        value_key = prefix + VALUE_KEY
        destination.pop(prefix + "buffer", None)
        if self.counter == 0 and not (
            self.FULL_STATE_DICT_KEEPS_PLACEHOLDER and config._FULL_STATE_DICT
        ):
            destination.pop(value_key, None)
        elif self.counter <= self.collect_stats_steps:
            average = self.buffer if keep_vars else self.buffer.detach()
            destination[value_key] = self._warmup_value_of(average)
