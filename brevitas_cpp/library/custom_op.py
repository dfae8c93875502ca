"""``custom_op`` as Brevitas exposes it: ``torch.library.custom_op`` (Brevitas falls back to a
plain wrapper for torch versions without it, which brevitas_cpp does not run on)."""

from torch.library import custom_op

__all__ = ["custom_op"]
