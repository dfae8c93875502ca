"""Brevitas's ``brevitas.utils.logging``: ``setup_logger`` makes a logger at the level named by
``BREVITAS_LOGGING`` (``config.LOGGING_LEVEL``, default CRITICAL) that prints to stderr. The
bit-width loggers (``LogWeightBitWidth``, ...) raise on use (``brevitas_cpp._unsupported``).
It re-exports utils.quant_utils, as Brevitas's module does, so it ranks apart from utils, above
quant_utils (tests/test_import_direction.py)."""

import logging

from brevitas_cpp import config
from brevitas_cpp._unsupported import unsupported_getattr
from brevitas_cpp.utils.quant_utils import *  # noqa: F403  (re-exported, as in Brevitas)

__all__ = ["setup_logger"]

_FORMAT = "%(asctime)s - %(name)s - %(levelname)s - %(message)s"


def setup_logger(name: str) -> logging.Logger:
    """The logger ``name`` at ``config.LOGGING_LEVEL``, not propagating to the root logger, with
    one more stream handler (each call adds one, as in Brevitas)."""
    level = logging.getLevelName(config.LOGGING_LEVEL)
    logger = logging.getLogger(name)
    logger.setLevel(level)
    logger.propagate = False
    handler = logging.StreamHandler()
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter(_FORMAT))
    logger.addHandler(handler)
    return logger


__getattr__ = unsupported_getattr(__name__)
