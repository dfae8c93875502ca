"""Brevitas's ``brevitas.utils.jit_utils``: ``clear_class_registry`` frees what TorchScript keeps
of every class it has compiled (torch.jit.trace and script leak it; pytorch#86537, #35600)."""

import torch

from brevitas_cpp._torch_version import torch_version

__all__ = ["clear_class_registry", "torch_version"]


def clear_class_registry() -> None:
    """Forget the compiled classes and concrete module types TorchScript has registered."""
    torch._C._jit_clear_class_registry()
    torch.jit._recursive.concrete_type_store = torch.jit._recursive.ConcreteTypeStore()
    torch.jit._state._script_classes.clear()
