"""Record the constructor and function signatures of Brevitas 0.12.1's public API.

Run by hand in the environment scripts/make_brevitas_env.sh builds (Brevitas is never a
dependency of brevitas_cpp), with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv
    env -u BREVITAS_JIT /tmp/brevenv/bin/python scripts/compare_brevitas_signatures.py \
        > tests/compat/brevitas_signatures.json

Every module under brevitas.nn, brevitas.core, brevitas.proxy, brevitas.quant_tensor and
brevitas.function is imported. For each public class the module defines itself (``__module__``
is the module) its ``__init__`` is recorded, for each public function the function; names
re-exported from elsewhere are recorded once, under their defining module. A parameter is
``[name, kind, has_default]``, kind as ``inspect.Parameter.kind``'s name, ``self`` left out.

tests/compat/test_brevitas_signatures.py reads the file without Brevitas and checks that
brevitas_cpp's same-named class or function takes Brevitas's positional parameters in Brevitas's
order.
"""

import importlib
import inspect
import json
import pkgutil
import sys
import types
from typing import Any, Dict, List, Optional

PACKAGES = (
    "brevitas.nn",
    "brevitas.core",
    "brevitas.proxy",
    "brevitas.quant_tensor",
    "brevitas.function",
)


def _install_rename_stand_in() -> None:
    """torch 2.13 dropped named tensors; Brevitas 0.12 calls Tensor.rename(None) on some import
    paths. A no-op for the unnamed case, the one Brevitas uses (as tests/nn/golden/generate.py)."""
    import torch

    if hasattr(torch.Tensor, "rename"):
        return

    def _rename_none(self, *names, **rename_map):
        if names != (None,) or rename_map:
            raise NotImplementedError("named tensors are not available in this torch")
        return self

    torch.Tensor.rename = _rename_none


def parameters(function: Any) -> Optional[List[List[Any]]]:
    """[[name, kind, has_default], ...] of a callable's signature, without self; None when
    inspect can not read one (a C function)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    params = list(signature.parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return [[p.name, p.kind.name, p.default is not inspect.Parameter.empty] for p in params]


def _modules(package_name: str) -> List[types.ModuleType]:
    package = importlib.import_module(package_name)
    modules = [package]
    for info in pkgutil.walk_packages(package.__path__, package_name + "."):
        try:
            modules.append(importlib.import_module(info.name))
        except Exception as error:  # an optional dependency missing in Brevitas itself
            print(f"skipped {info.name}: {error!r}", file=sys.stderr)
    return modules


def brevitas_signatures() -> Dict[str, Dict[str, Any]]:
    """{"module.Name": {"kind": "class" | "function", "params": [...]}}, sorted."""
    table: Dict[str, Dict[str, Any]] = {}
    for package_name in PACKAGES:
        for module in _modules(package_name):
            for name, obj in vars(module).items():
                if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                    continue
                if isinstance(obj, type):
                    kind, params = "class", parameters(obj.__init__)
                elif isinstance(obj, types.FunctionType):
                    kind, params = "function", parameters(obj)
                else:
                    continue
                if params is not None:
                    table[f"{module.__name__}.{name}"] = {"kind": kind, "params": params}
    return dict(sorted(table.items()))


def main() -> None:
    _install_rename_stand_in()
    import brevitas

    # brevitas.nn.equalized_layer imported on its own is a circular import; through graph it loads.
    importlib.import_module("brevitas.graph")
    table = brevitas_signatures()
    print(
        json.dumps(
            {"brevitas_version": brevitas.__version__, "signatures": table},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
