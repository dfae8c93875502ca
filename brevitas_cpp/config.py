"""Settings read from the environment once, at import (Brevitas's variable names)."""

import logging
import os

from torch.jit._state import _enabled as _torch_jit_enabled

_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f", ""}


def env_to_bool(name: str, default: bool) -> bool:
    """Read a boolean environment variable; anything unrecognised is an error, not False."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(
        f"environment variable {name}={raw!r} is not a boolean; accepted: "
        f"{sorted(_TRUE)} or {sorted(_FALSE - {''})}"
    )


# Core blocks become TorchScript modules only when asked and when PYTORCH_JIT is not 0.
JIT_ENABLED: bool = env_to_bool("BREVITAS_JIT", False) and bool(_torch_jit_enabled)
REINIT_ON_STATE_DICT_LOAD: bool = env_to_bool("BREVITAS_REINIT_ON_STATE_DICT_LOAD", True)
IGNORE_MISSING_KEYS: bool = env_to_bool("BREVITAS_IGNORE_MISSING_KEYS", False)
# A checkpoint of ours records the quantizer it was made for (class, signedness, narrow range,
# constant bit widths): loading it into another is an error unless this is set.
IGNORE_QUANTIZER_MISMATCH: bool = env_to_bool("BREVITAS_IGNORE_QUANTIZER_MISMATCH", False)

# Brevitas's BREVITAS_NATIVE_STE_BACKEND asks for its optional C++ STE ops; here they are the
# only ones, so the setting is always on (the variable is not read).
NATIVE_STE_BACKEND_ENABLED: bool = True
VERBOSE: bool = env_to_bool("BREVITAS_VERBOSE", False)
# A level name of the logging module, for the loggers utils.logging.setup_logger makes.
LOGGING_LEVEL: str = os.environ.get("BREVITAS_LOGGING", "CRITICAL")
if not isinstance(logging.getLevelName(LOGGING_LEVEL), int):
    raise ValueError(
        f"environment variable BREVITAS_LOGGING={LOGGING_LEVEL!r} is not a logging level; "
        "accepted: CRITICAL, ERROR, WARNING, INFO, DEBUG, NOTSET"
    )

# Brevitas's switch (set by the user or export code) to save the tracked parameters that
# quantizers normally leave out of their state_dict.
_FULL_STATE_DICT: bool = False
