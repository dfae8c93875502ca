"""The one invalidation rule for decisions a block derives from the types in its module tree.

Some blocks choose, when built, how they will compute: IntQuant whether its rounding and clamp
are the fused op's, the scaling blocks which submodules are identities they may skip, and
RescalingIntQuant its plan (core/quant/plan), the one op that stands in for its whole chain.
Such a choice is valid while the tree it was read from is unchanged. In eager mode a user may
replace a block at any depth (``quant.scaling_impl.stats.stats_impl = MyStats()``), so:

    When a module is registered into a block (attribute assignment, add_module), the block it
    was registered into re-derives its decisions at once, and every plan owner above it does so
    at its next call: the registration moves a process-wide generation, and an owner whose
    plan is of an older generation derives it again (``refresh_plan``).

The rule is one torch registration hook (``register_module_module_registration_hook``), not a
``__setattr__`` per class. Scripted blocks (``BREVITAS_JIT=1``, or ``torch.jit.script`` of an
eager model, which calls ``__prepare_scriptable__`` first) keep the decisions they were
compiled with: TorchScript fixes a submodule's type.
"""

import torch
from torch.nn import Module
from torch.nn.modules.module import register_module_module_registration_hook

from brevitas_cpp.config import JIT_ENABLED

# Moved by every module registration in the process; a list so that readers see the update.
_generation = [0]

PLAN_GENERATION = "plan_generation"  # the __dict__ key of the generation a block planned at


class Replans:
    """Mixin for a block whose decisions (TorchScript constants, flags its parent reads) are
    derived from its module tree. ``derive_plan`` computes them from module types and Python
    attributes only, never tensor values (refresh_plan may run it in a call being traced or
    compiled); ``replan`` runs it and records the generation. Call ``replan()`` at the end of
    ``__init__``."""

    def derive_plan(self) -> None:
        raise NotImplementedError

    def replan(self) -> None:
        self.derive_plan()
        self.__dict__[PLAN_GENERATION] = _generation[0]

    def replan_after(self, name: str) -> None:
        """The registration hook's call, once submodule name is in place: replan, and
        whatever else derives from that submodule."""
        self.replan()

    def plan_holds(self) -> bool:
        """Whether the decisions still describe the tree, read without side effects (a plan
        owner re-runs its matcher; the default trusts the registration hook)."""
        return True

    def __prepare_scriptable__(self):
        # torch.jit.script of an eager model compiles the decisions as the tree is now.
        refresh_plan(self)
        return self

    def __setstate__(self, state) -> None:
        # Unpickled into another process, whose generation is unrelated: derive again on the
        # next call (a block pickled before this attribute existed has none either).
        super().__setstate__(state)  # type: ignore[misc]
        self.__dict__[PLAN_GENERATION] = -1


def refresh_plan(block: Module) -> None:
    """Derive block's decisions again if a module was registered anywhere since it last did
    (eager mode: one integer comparison on every call of a plan owner). A block compiled with
    BREVITAS_JIT=1 keeps its constants.

    Under torch.compile or torch.export the generation is not read: a guard on it would
    recompile every compiled model after any registration anywhere. The owner's matcher runs
    instead (the graph is then guarded on the block types it reads), and only a tree that
    changed since the plan was derived leaves the graph to derive it again. torch.export keeps
    the plan as derived: its tracer reaches submodules through stand-in objects of other types,
    which the matcher would not recognise (derive the plan in eager mode, by a call, first)."""
    if JIT_ENABLED or torch.compiler.is_exporting():
        return
    if torch.compiler.is_compiling():
        if not block.plan_holds():  # type: ignore[operator]
            _replan_outside_graph(block)
    elif block.__dict__.get(PLAN_GENERATION, -1) != _generation[0]:
        block.replan()  # type: ignore[operator]


@torch.compiler.disable
def _replan_outside_graph(block: Module) -> None:
    block.replan()  # type: ignore[operator]


def _on_module_registered(parent: Module, name: str, child) -> None:
    _generation[0] += 1
    if JIT_ENABLED or not isinstance(parent, Replans) or PLAN_GENERATION not in parent.__dict__:
        return None  # scripted blocks keep their choice; one still in __init__ plans at its end
    # torch stores the child right after its hooks return: stored here first, so that the
    # block re-derives from the tree it will have (the same value is stored again).
    parent._modules[name] = child
    parent.replan_after(name)
    return None


_handle = register_module_module_registration_hook(_on_module_registered)


def invalidate_plans() -> None:
    """Have every plan owner derive its plan again at its next call, as a registration would
    (for a decision input that is not a module: force_module_chain's switch)."""
    _generation[0] += 1
