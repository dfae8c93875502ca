"""Brevitas's ``brevitas.library``: ``custom_op``, torch's decorator that makes a Python
function a torch custom op. A leaf: torch only."""

from brevitas_cpp.library.custom_op import custom_op

__all__ = ["custom_op"]
