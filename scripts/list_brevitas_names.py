"""List every public name of Brevitas 0.12.1's ``brevitas`` package, module by module.

Run by hand in the environment scripts/make_brevitas_env.sh builds (Brevitas is never a
dependency of brevitas_cpp), with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv
    /tmp/brevenv/bin/python scripts/list_brevitas_names.py > tests/compat/brevitas_public_names.txt

Every module of the package is imported (pkgutil.walk_packages, and the modules under folders
without an ``__init__.py``, which it does not enter). The export and ``graph.magr`` modules need
``pip install onnxscript tqdm`` in that environment (Brevitas imports them; without them those
modules are recorded as failing). A module's public names are the names not starting with
``_`` that it binds itself (def, class, assignment, at top level), plus its ``__all__`` where it
defines one; without ``__all__``, also the names it star-imports from Brevitas
(``brevitas.inject.defaults``) and, for a package's ``__init__``, the names it re-exports from
Brevitas or from ``dependencies`` (the injector library ``brevitas.inject`` re-exports as its own
API). A plain module's named imports are its dependencies, not its API; names
imported from torch, the standard library or other third-party packages are always left out,
and so are submodules (each module is a line of its own). A module whose import fails in Brevitas
itself (an optional dependency missing) is recorded as a ``#`` comment with the error, and its
names are read from its source (what it defines at top level).

Output, one entry per line, tab-separated: ``module  name  kind`` (kind: class, function,
value), or ``module  -  module`` for the module itself.
"""

import ast
import importlib
import inspect
import os
import pkgutil
import sys
import types
from typing import Dict, Iterator, List, Optional, Set, Tuple

# Third-party roots whose re-exports count as Brevitas's own API.
OWN_ROOTS = {"brevitas", "dependencies", "_dependencies"}


def _top_level_statements(body: List[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements run at import: descend into if/try/with blocks, not into defs or classes."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.With, ast.For, ast.While)):
            yield from _top_level_statements(node.body)
            yield from _top_level_statements(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            yield from _top_level_statements(node.body)
            for handler in node.handlers:
                yield from _top_level_statements(handler.body)
            yield from _top_level_statements(node.orelse)
            yield from _top_level_statements(node.finalbody)


def _assigned_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _assigned_names(element)


def _bindings(module: types.ModuleType) -> Tuple[Set[str], Dict[str, str], List[str]]:
    """(names the module defines, {name: module it is imported from}, star-imported modules)."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return set(), {}, []
    defined: Set[str] = set()
    imported: Dict[str, str] = {}
    stars: List[str] = []
    package = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
    for node in _top_level_statements(ast.parse(source).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                defined.update(_assigned_names(target))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            defined.update(_assigned_names(node.target))
        elif isinstance(node, ast.ImportFrom):
            origin = node.module or ""
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                origin = f"{base}.{origin}" if origin else base
            for alias in node.names:
                if alias.name == "*":
                    stars.append(origin)
                else:
                    imported[alias.asname or alias.name] = origin
    return defined, imported, stars


def _kind(obj: object) -> str:
    if isinstance(obj, type):
        return "class"
    if callable(obj):
        return "function"
    return "value"


def public_names(module: types.ModuleType, cache: Dict[str, Set[str]]) -> Dict[str, str]:
    """{name: kind} of the module's public names (see the module docstring)."""
    names: Dict[str, str] = {}
    namespace = vars(module)
    defined, imported, stars = _bindings(module)
    if "__all__" in namespace:
        # A name __all__ lists but the module never defines is no name (importing it fails).
        # What the module defines itself without a leading underscore is public too: Brevitas's
        # own examples import such names (core.zero_point.RuntimeDynamicGroupZeroPoint).
        listed = [name for name in namespace["__all__"] if name in namespace]
        own = [name for name in defined if not name.startswith("_") and name in namespace]
        names = {name: _kind(namespace[name]) for name in listed + own}
        cache[module.__name__] = set(names)
        return names
    star_names: Set[str] = set()
    # A package re-exports what its __init__ imports from Brevitas, and any module what it
    # star-imports (brevitas.inject.defaults); a plain module's named imports are its own
    # dependencies, not its API.
    reexports = hasattr(module, "__path__")
    for origin in stars:
        if origin.split(".")[0] in OWN_ROOTS and origin in sys.modules:
            star_names |= cache.get(origin) or set(public_names(sys.modules[origin], cache))
    for name, obj in namespace.items():
        if name.startswith("_") or isinstance(obj, types.ModuleType):
            continue
        if name in defined or name in star_names:
            names[name] = _kind(obj)
        elif reexports and name in imported and imported[name].split(".")[0] in OWN_ROOTS:
            names[name] = _kind(obj)
    cache[module.__name__] = set(names)
    return names


def _namespace_modules(root: str) -> List[str]:
    """Modules under folders without an __init__.py (namespace packages, e.g.
    brevitas.export.shark), which walk_packages does not enter but ``import`` reaches; the
    folders themselves when they hold Python modules."""
    names: Set[str] = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        relative = os.path.relpath(folder, root)
        parts = ["brevitas"] + ([] if relative == "." else relative.split(os.sep))
        for file in files:
            if file.endswith(".py") and file != "__init__.py":
                module = parts + [file[:-3]]
                names.update(".".join(module[:i]) for i in range(2, len(module) + 1))
    return sorted(names)


def _names_from_source(path: str) -> Dict[str, str]:
    """{name: kind} of what a module that fails to import defines at top level."""
    with open(path) as file:
        tree = ast.parse(file.read())
    names: Dict[str, str] = {}
    for node in _top_level_statements(tree.body):
        if isinstance(node, ast.ClassDef):
            names[node.name] = "class"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = "function"
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(dict.fromkeys(_assigned_names(target), "value"))
    return {name: kind for name, kind in names.items() if not name.startswith("_")}


def main() -> None:
    import brevitas

    failures: List[Tuple[str, str]] = []

    def onerror(name: str) -> None:
        failures.append((name, repr(sys.exc_info()[1])[:200]))

    module_names = ["brevitas"]
    for info in pkgutil.walk_packages(brevitas.__path__, "brevitas.", onerror=onerror):
        module_names.append(info.name)
    module_names += _namespace_modules(brevitas.__path__[0])
    cache: Dict[str, Set[str]] = {}
    lines: List[str] = []
    for name in sorted(set(module_names)):
        try:
            module: Optional[types.ModuleType] = importlib.import_module(name)
        except Exception as error:  # an optional dependency missing in Brevitas itself
            failures.append((name, repr(error)[:200]))
            module = None
        if module is None:  # what its source defines
            path = os.path.join(brevitas.__path__[0], *name.split(".")[1:]) + ".py"
            names = _names_from_source(path) if os.path.exists(path) else {}
        else:
            names = public_names(module, cache)
        lines.append(f"{name}\t-\tmodule")
        for public, kind in sorted(names.items()):
            lines.append(f"{name}\t{public}\t{kind}")
    print(f"# Public names of Brevitas {brevitas.__version__} (scripts/list_brevitas_names.py)")
    print(f"# BREVITAS_JIT={os.environ.get('BREVITAS_JIT', '')!r}; module, name, kind")
    for name, error in sorted(set(failures)):
        print(f"# import fails in Brevitas itself (names from its source): {name}: {error}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
