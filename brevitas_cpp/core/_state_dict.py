"""state_dict handling shared by the core blocks.

``_save_to_state_dict`` / ``_load_from_state_dict`` are plain Python even on scripted modules, so
they can be inherited where script methods cannot: the mixins here are listed before
``jit.ScriptModule`` among a block's bases. ``KeyPolicy`` declares, per block, which entries are
renamed from older checkpoints, never saved, or may be missing; ``LazyInitValueStateDict`` and
``WarmupValueStateDict`` add what loading and saving mean for a learned tensor ``value`` that is
initialised from statistics, on the first call from the tracked parameters (flag ``init_done``)
or after a warm-up of ``collect_stats_steps`` training batches whose running average lives in the
buffer ``buffer`` (``counter`` counts them).

What Brevitas's keys cannot hold (step counters, the warm-up's running average) travels in the
state_dict's per-module metadata (``state_dict._metadata[module path]["brevitas_cpp"]``), which
torch saves and loads with the dict (``weights_only=True`` included) and Brevitas ignores: a
checkpoint keeps Brevitas's keys, so it loads strictly into Brevitas, and a Brevitas checkpoint
(no such entry) loads here as Brevitas loads it."""

from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from brevitas_cpp import config

__all__ = [
    "METADATA_KEY",
    "KeyPolicy",
    "LEGACY_VALUE_KEYS",
    "LazyInitValueStateDict",
    "LearnedScaleChecks",
    "WarmupValueStateDict",
    "forgive_missing",
    "forgive_missing_when_ignoring",
]

VALUE_KEY = "value"
# Older checkpoints name a learned scale 'learned_value'.
LEGACY_VALUE_KEYS = (("learned_value", VALUE_KEY),)
# The entry of a module's state_dict metadata that holds brevitas_cpp's own state.
METADATA_KEY = "brevitas_cpp"


def saved_metadata(destination: Dict[str, Any], prefix: str) -> Optional[Dict[str, Any]]:
    """The dict, in the metadata of a state_dict being saved, that the module at prefix keeps its
    own state in (created empty); None when destination keeps no metadata (a plain dict)."""
    metadata = getattr(destination, "_metadata", None)
    if metadata is None:
        return None
    return metadata.setdefault(prefix[:-1], {}).setdefault(METADATA_KEY, {})


def describe_values(value: Tensor) -> str:
    """A short account of a tensor for an error message: the value, or the offending ones."""
    flat = value.detach().reshape(-1).to("cpu", torch.float64)
    if flat.numel() <= 4:
        return str([float(v) for v in flat])
    bad = flat[~torch.isfinite(flat) | (flat <= 0)]
    shown = bad if bad.numel() else flat
    return f"{[float(v) for v in shown[:4]]} among {flat.numel()} values"


def loaded_scale_refusal(
    domain_value: Tensor, restrict_impl: Optional[torch.nn.Module]
) -> Optional[str]:
    """Why a learned scale of the restrict domain (e.g. log2 for power-of-two scales) can not be
    loaded: the scale it stands for must be positive and finite (None: it can be loaded). A zero
    or negative scale would be clamped or folded by abs into a quantizer that outputs about 0."""
    value = domain_value.detach()
    if not value.is_floating_point():
        return None
    scale = value if restrict_impl is None else restrict_impl(value)
    if (
        bool(torch.isfinite(value).all())
        and bool((scale > 0).all())
        and bool(torch.isfinite(scale).all())
    ):
        return None
    domain = "" if restrict_impl is None else f" ({type(restrict_impl).__name__} domain)"
    return (
        f"a learned scale must stand for a positive, finite scale; got {describe_values(value)}"
        f"{domain}"
    )


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
      block keeps its initial value;
    - FINITE_KEYS: entries whose loaded values must be finite (learned state: a NaN or an
      infinity would reach every output), refused with an error naming the key otherwise;
    - SAVED_COUNTERS: int attributes (step counters) saved in the block's metadata entry and
      restored from it, so that a resumed run counts on where the saved one stopped.

    Subclasses refuse further values in ``_refusal`` and react to what a checkpoint held in
    ``_after_load``."""

    RENAMED_KEYS: Tuple[Tuple[str, str], ...] = ()
    NEVER_SAVED_KEYS: Tuple[str, ...] = ()
    INIT_KEPT_KEYS: Tuple[str, ...] = ()
    FINITE_KEYS: Tuple[str, ...] = ()
    SAVED_COUNTERS: Tuple[str, ...] = ()

    def _refusal(self, name: str, value: Tensor) -> Optional[str]:
        """Why value can not be loaded into entry name (None: it can)."""
        if (
            name in self.FINITE_KEYS
            and value.is_floating_point()
            and not bool(torch.isfinite(value).all())
        ):
            return f"must be finite, got {describe_values(value)}"
        return None

    def _after_load(
        self, state_dict: Dict[str, Tensor], prefix: str, saved: Optional[Dict[str, Any]]
    ) -> None:
        """saved: the block's own metadata entry in the checkpoint (None: a checkpoint without
        one, e.g. Brevitas's)."""

    def _refuse_bad_values(
        self, state_dict: Dict[str, Tensor], prefix: str, error_msgs: List[str]
    ) -> Dict[str, Tensor]:
        """Takes the entries _refusal refuses out of state_dict (the module keeps its values),
        with an error each; returns them so that the caller can put them back."""
        refused = {}
        for key, value in list(state_dict.items()):
            name = key[len(prefix) :]
            if not key.startswith(prefix) or "." in name or not isinstance(value, Tensor):
                continue
            reason = self._refusal(name, value)
            if reason is not None:
                error_msgs.append(f"{type(self).__name__} at {key!r}: {reason}")
                refused[key] = state_dict.pop(key)
        return refused

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        for old_key, key in self.RENAMED_KEYS:
            if prefix + old_key in state_dict:
                state_dict[prefix + key] = state_dict.pop(prefix + old_key)
        refused = self._refuse_bad_values(state_dict, prefix, error_msgs)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        for key in refused:
            forgive_missing(missing_keys, key)
        state_dict.update(refused)
        for key in self.NEVER_SAVED_KEYS:
            forgive_missing(missing_keys, prefix + key)
        for key in self.INIT_KEPT_KEYS:
            forgive_missing_when_ignoring(missing_keys, prefix + key)
        saved = local_metadata.get(METADATA_KEY) if local_metadata else None
        for name in self.SAVED_COUNTERS:
            if saved is not None and name in saved:
                setattr(self, name, int(saved[name]))
        if not refused:
            self._after_load(state_dict, prefix, saved)
        self._forgive_derived(missing_keys, prefix, local_metadata, saved)

    # Entries worked out from statistics when a checkpoint lacks them (see _forgive_derived).
    DERIVED_KEYS: Tuple[str, ...] = ()

    def _derived_were_saved(self, saved: Dict[str, Any]) -> bool:
        """Whether the saving block had already worked out its DERIVED_KEYS."""
        return True

    def _forgive_derived(
        self,
        missing_keys: List[str],
        prefix: str,
        local_metadata: Dict[str, Any],
        saved: Optional[Dict[str, Any]],
    ) -> None:
        """A missing entry of DERIVED_KEYS is complete when the checkpoint has no such block (a
        float model's: the statistics are collected as for a new model) or when its block had not
        worked the entry out yet; it stays missing (an error under strict=True) when the saving
        block had it, and for a Brevitas checkpoint with the block, as in Brevitas (unless
        config.IGNORE_MISSING_KEYS, INIT_KEPT_KEYS's rule)."""
        if not local_metadata or (saved is not None and not self._derived_were_saved(saved)):
            for key in self.DERIVED_KEYS:
                forgive_missing(missing_keys, prefix + key)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.SAVED_COUNTERS:
            entry = saved_metadata(destination, prefix)
            if entry is not None:
                for name in self.SAVED_COUNTERS:
                    entry[name] = int(getattr(self, name))


class LazyInitValueStateDict(KeyPolicy):
    """A block whose ``value`` is initialised on its first call (flag ``init_done``): the
    placeholder is not saved before that (unless config._FULL_STATE_DICT asks for every tensor),
    and loading a value marks the block initialised, so that fresh statistics never overwrite
    it. The flag is saved in the metadata: a checkpoint of an initialised block must hold
    ``value``."""

    INIT_KEPT_KEYS = (VALUE_KEY,)
    DERIVED_KEYS = (VALUE_KEY,)

    def _derived_were_saved(self, saved: Dict[str, Any]) -> bool:
        return bool(saved.get("init_done", True))

    def _after_load(
        self, state_dict: Dict[str, Tensor], prefix: str, saved: Optional[Dict[str, Any]]
    ) -> None:
        if prefix + VALUE_KEY in state_dict and (saved is None or saved.get("init_done", True)):
            self.init_done = True

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        entry = saved_metadata(destination, prefix)
        if entry is not None:
            entry["init_done"] = bool(self.init_done)
        if not self.init_done and not config._FULL_STATE_DICT:
            destination.pop(prefix + VALUE_KEY, None)


class WarmupValueStateDict(KeyPolicy):
    """A block whose ``value`` is initialised after a warm-up of collect_stats_steps training
    batches (``counter``, running average ``buffer``). Saved as ``value``: nothing before the
    first batch (the placeholder, unless config._FULL_STATE_DICT and
    FULL_STATE_DICT_KEEPS_PLACEHOLDER), the running average (as _warmup_value_of makes it)
    during the warm-up, the learned value afterwards; ``buffer`` itself never.

    Loading a value ends the warm-up, as in Brevitas, unless the checkpoint's metadata says it
    was saved during the warm-up: then counter, the running average and the parameter itself
    (which an optimizer with weight decay moves meanwhile) come back as they were, and the
    warm-up goes on where it stopped."""

    NEVER_SAVED_KEYS = ("buffer", "training")
    INIT_KEPT_KEYS = (VALUE_KEY,)
    DERIVED_KEYS = (VALUE_KEY,)
    FULL_STATE_DICT_KEEPS_PLACEHOLDER = True

    def _warmup_value_of(self, average: Tensor) -> Tensor:
        """What the running average is saved as (e.g. moved into a restrict domain)."""
        return average

    def _derived_were_saved(self, saved: Dict[str, Any]) -> bool:
        return int(saved.get("counter", 1)) > 0

    def _after_load(
        self, state_dict: Dict[str, Tensor], prefix: str, saved: Optional[Dict[str, Any]]
    ) -> None:
        counter = None if saved is None else saved.get("counter")
        if counter is not None and int(counter) <= self.collect_stats_steps:
            self._resume_warmup(int(counter), saved)
        elif prefix + VALUE_KEY in state_dict:
            self.counter = self.collect_stats_steps + 1

    def _resume_warmup(self, counter: int, saved: Dict[str, Any]) -> None:
        with torch.no_grad():
            for name in ("buffer", VALUE_KEY):
                if name in saved:
                    getattr(self, name).copy_(saved[name])
        self.counter = counter

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        value_key = prefix + VALUE_KEY
        destination.pop(prefix + "buffer", None)
        entry = saved_metadata(destination, prefix)
        if entry is not None:
            entry["counter"] = int(self.counter)
            if 0 < self.counter <= self.collect_stats_steps:
                entry["buffer"] = self.buffer.detach()
                entry[VALUE_KEY] = self.value.detach()
        if self.counter == 0 and not (
            self.FULL_STATE_DICT_KEEPS_PLACEHOLDER and config._FULL_STATE_DICT
        ):
            destination.pop(value_key, None)
        elif self.counter <= self.collect_stats_steps:
            average = self.buffer if keep_vars else self.buffer.detach()
            destination[value_key] = self._warmup_value_of(average)


class LearnedScaleChecks:
    """Refuses a checkpoint's learned scale ``value`` that stands for no positive, finite scale
    (listed before KeyPolicy among a block's bases)."""

    def _scale_restrict_impl(self) -> Optional[torch.nn.Module]:
        """The block that takes value from its restrict domain to the linear one."""
        raise NotImplementedError

    def _refusal(self, name: str, value: Tensor) -> Optional[str]:
        if name == VALUE_KEY:
            return loaded_scale_refusal(value, self._scale_restrict_impl())
        return super()._refusal(name, value)
