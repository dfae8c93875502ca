"""Dependencies between the packages run one way, top to bottom:

    onnx -> export -> graph, loss (side by side) -> nn, inject.defaults (side by side) -> quant
       (quantizers and their solvers, which name the proxies), utils.quant_utils -> proxy ->
       quant_tensor, core (side by side) -> inject, utils, optim (side by side) -> function ->
       the leaf modules

Each package is imported, with all its modules, in a fresh interpreter in which importing a
package above it (or beside it, at the same rank) raises: an import cycle or a module alias
that reaches upward fails here. ``inject.enum`` is a leaf (the standard library only) that
every package may use. ``inject.defaults`` re-exports ``quant``'s quantizers under Brevitas's
module name, so it is ranked on its own, above ``quant``, and left out of ``inject``'s check;
``utils.quant_utils`` (Brevitas's module of proxy predicates), ``utils.logging`` (which
re-exports it) and ``utils.python_utils`` (whose ``AutoName`` is ``inject.enum``'s, behind
``inject``'s package) are ranked apart from ``utils``, above ``proxy`` and ``inject``.
``_unsupported`` (the stubs of Brevitas's unsupported names), ``compiler`` and ``library`` are
leaves. ``optim`` depends on torch only (the root package still loads ``function``)."""

import os
import subprocess
import sys
import textwrap

import pytest

import brevitas_cpp

# rank: higher imports lower, never the reverse or sideways.
RANKS = {
    "onnx": 9,
    "export": 8,
    "graph": 7,
    "loss": 7,
    "nn": 6,
    "inject.defaults": 6,
    "quant": 5,
    "utils.quant_utils": 5,
    "utils.logging": 6,
    "utils.python_utils": 3,
    "proxy": 4,
    "quant_tensor": 3,
    "core": 3,
    "inject": 2,
    "utils": 2,
    "optim": 2,
    "function": 1,
}
LEAVES = {
    "_load",
    "_C",
    "_torch_version",
    "_unsupported",
    "_unsupported_table",
    "compiler",
    "config",
    "jit",
    "distributed",
    "inject.enum",
    "library",
}
# Modules ranked apart from the package that holds them (checked on their own, not with it).
RANKED_MODULES = {name for name in RANKS if "." in name}

CHECK = textwrap.dedent("""
    import importlib, importlib.abc, pkgutil, sys

    package, blocked = sys.argv[1], set(sys.argv[2].split(","))
    leaves = set(sys.argv[3].split(","))
    apart = {"brevitas_cpp." + m for m in sys.argv[4].split(",")} if len(sys.argv) > 4 else set()

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            parts = name.split(".")
            if parts[0] != "brevitas_cpp" or len(parts) < 2:
                return None
            if ".".join(parts[1:3]) in leaves or parts[1] in leaves:
                return None
            if parts[1] in blocked or ".".join(parts[1:3]) in blocked:
                raise ImportError(f"brevitas_cpp.{package} imports {name}, which is above it")
            return None

    sys.meta_path.insert(0, Block())
    root = importlib.import_module("brevitas_cpp." + package)
    walk = pkgutil.walk_packages(getattr(root, "__path__", []), root.__name__ + ".")
    names = [info.name for info in walk if info.name not in apart]
    for name in names:
        importlib.import_module(name)
    print(len(names) + 1)
""")


def _run_check(*args: str) -> subprocess.CompletedProcess:
    # The brevitas_cpp this process imported (installed, or a source tree), not another one.
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(brevitas_cpp.__file__)))
    return subprocess.run(
        [sys.executable, "-P", "-c", *args], capture_output=True, text=True, timeout=300, env=env
    )


@pytest.mark.parametrize("package", sorted(RANKS, key=RANKS.get))
def test_package_imports_only_packages_below_it(package):
    blocked = [p for p, rank in RANKS.items() if p != package and rank >= RANKS[package]]
    result = _run_check(
        CHECK, package, ",".join(blocked), ",".join(LEAVES), ",".join(RANKED_MODULES)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.split()[-1]) >= 1


def test_a_blocked_import_is_caught():
    """The check itself: core made to see nn as above it must fail when nn is imported."""
    result = _run_check(
        CHECK + "\nimportlib.import_module('brevitas_cpp.nn')", "function", "nn", ",".join(LEAVES)
    )
    assert result.returncode != 0
    assert "brevitas_cpp.function imports brevitas_cpp.nn" in result.stderr


def test_own_modules_are_imported_at_module_level():
    """No import of brevitas_cpp inside a function (a lazy import would hide a cycle from the
    test above); _load imports the compiled extension inside a try, to explain a failure."""
    import ast
    import pathlib

    root = pathlib.Path(brevitas_cpp.__file__).parent
    lazy = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        top_level = set(map(id, tree.body))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in top_level:
                module = node.module or ""
                if (module.startswith("brevitas_cpp") or node.level) and path.name != "_load.py":
                    lazy.append(f"{path.relative_to(root)}:{node.lineno}")
            elif isinstance(node, ast.Import) and id(node) not in top_level:
                if any(a.name.startswith("brevitas_cpp") for a in node.names):
                    lazy.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not lazy, f"imports of brevitas_cpp inside functions or blocks: {lazy}"


def test_a_blocked_module_ranked_apart_is_caught():
    """inject.defaults is above inject: inject importing it must fail the check."""
    result = _run_check(
        CHECK + "\nimportlib.import_module('brevitas_cpp.inject.defaults')",
        "inject",
        "inject.defaults",
        ",".join(LEAVES),
        ",".join(RANKED_MODULES),
    )
    assert result.returncode != 0
    assert "brevitas_cpp.inject imports brevitas_cpp.inject.defaults" in result.stderr
