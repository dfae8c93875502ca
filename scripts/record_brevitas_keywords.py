"""Record the layer keywords Brevitas 0.12.1 knows into brevitas_cpp/nn/mixin/_brevitas_keywords.py.

A Brevitas layer routes ``<prefix><name>=value`` to the quantizer its prefix selects
(``quant.let(name=value)``) and never checks that the quantizer uses ``name``; programs rely on
that to pass one set of keywords to layers with different quantizers. brevitas_cpp accepts such
a keyword, unused, when Brevitas knows it, and keeps an error for anything else (a typo). What
"Brevitas knows" is recorded here, so brevitas_cpp needs no Brevitas at run time.

Run by hand in the environment scripts/make_brevitas_env.sh builds, with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv
    /tmp/brevenv/bin/python scripts/record_brevitas_keywords.py
    python3 -m ruff format brevitas_cpp/nn/mixin/_brevitas_keywords.py

Recorded:
  * QUANTIZER_NAMES: what a quantizer can be given: every attribute of every injector class in
    brevitas.quant.* and brevitas.inject.* (their ``__dependencies__``, inherited ones included)
    and the argument names of those attributes (``@value`` functions, classes they build);
    the constructor arguments of every class in brevitas.core.* (the injector builds blocks
    from them); and the attributes brevitas reads straight off an injector
    (``quant_injector.<name>``, ``'<name>' in quant_injector``).
  * PREFIXES: the keyword prefixes of the layers: the ``kwargs_prefix``/``act_kwargs_prefix``
    values in brevitas.nn, and for the composite layers (MHA, SDPA), each part's
    ``filter_kwargs('<part>_')`` prefix followed by one of the former.
  * LAYER_KEYWORDS: the constructor arguments of every class in brevitas.nn.* (taken as they are,
    unprefixed: **kwargs passes them on to layers that ignore them).
"""

import importlib
import inspect
import os
import pkgutil
import re
from typing import Iterable, Set

# The same no-op Tensor.rename(None) stand-in torch 2.13 needs for Brevitas 0.12 (a sibling script).
from compare_brevitas_signatures import _install_rename_stand_in

OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..",
    "brevitas_cpp",
    "nn",
    "mixin",
    "_brevitas_keywords.py",
)
IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# Attribute reads off an injector that are the injector library's API, not settings.
INJECTOR_API = {"let", "__dependencies__", "__name__"}


def _modules(package_name: str) -> Iterable:
    package = importlib.import_module(package_name)
    yield package
    for info in pkgutil.walk_packages(package.__path__, package_name + "."):
        try:
            yield importlib.import_module(info.name)
        except Exception as error:  # an optional dependency missing in Brevitas itself
            print(f"skipped {info.name}: {type(error).__name__}: {error}")


def _classes(package_name: str) -> Iterable[type]:
    for module in _modules(package_name):
        for obj in vars(module).values():
            if inspect.isclass(obj) and obj.__module__.startswith(package_name):
                yield obj


def _init_arguments(cls: type) -> Set[str]:
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return set()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in params if p.kind in named}


def _injector_names() -> Set[str]:
    from brevitas.inject import ExtendedInjector, Injector

    names: Set[str] = set()
    for package in ("brevitas.quant", "brevitas.inject"):
        for cls in _classes(package):
            if not issubclass(cls, (Injector, ExtendedInjector)):
                continue
            for name, spec in getattr(cls, "__dependencies__", {}).items():
                names.add(name)
                # spec: (marker, factory, argument names, number of required arguments)
                if isinstance(spec, tuple) and len(spec) > 2 and isinstance(spec[2], list):
                    names.update(spec[2])
    return names


def _injector_reads() -> Set[str]:
    import brevitas

    root = os.path.dirname(brevitas.__file__)
    patterns = [
        re.compile(r"injector\)?\.([A-Za-z_]+)"),
        re.compile(r"['\"]([A-Za-z_]+)['\"] in [A-Za-z_.]*injector"),
        re.compile(r"attr\([A-Za-z_.]*injector, ['\"]([A-Za-z_]+)['\"]"),
    ]
    names: Set[str] = set()
    for folder, _, files in os.walk(root):
        for file in files:
            if file.endswith(".py"):
                with open(os.path.join(folder, file)) as f:
                    source = f.read()
                for pattern in patterns:
                    names.update(pattern.findall(source))
    return names - INJECTOR_API


def _prefixes() -> Set[str]:
    import brevitas

    source = ""
    for folder, _, files in os.walk(os.path.join(os.path.dirname(brevitas.__file__), "nn")):
        for file in files:
            if file.endswith(".py"):
                with open(os.path.join(folder, file)) as f:
                    source += f.read()
    layer = set(re.findall(r"kwargs_prefix\s*=\s*['\"]([a-z_]*)['\"]", source))
    parts = set(re.findall(r"filter_kwargs\(['\"]([a-z_]+)['\"]\)", source))
    return layer | {p + q for p in parts for q in layer}


def _frozenset_source(name: str, values: Set[str], doc: str) -> str:
    lines = [f"# {doc}", f"{name}: FrozenSet[str] = frozenset(", "    {"]
    lines += [f'        "{v}",' for v in sorted(values)]
    lines += ["    }", ")", ""]
    return "\n".join(lines)


def main() -> None:
    _install_rename_stand_in()
    import brevitas

    quantizer = _injector_names() | _injector_reads()
    for cls in _classes("brevitas.core"):
        quantizer |= _init_arguments(cls)
    layer = set()
    for cls in _classes("brevitas.nn"):
        layer |= _init_arguments(cls)
    quantizer = {n for n in quantizer if IDENTIFIER.match(n)}
    layer = {n for n in layer if IDENTIFIER.match(n) and n not in ("args", "kwargs")}
    prefixes = _prefixes()
    header = (
        f'"""The layer keywords Brevitas {brevitas.__version__} knows (see '
        f"brevitas_cpp.nn.mixin.utils.is_brevitas_keyword).\n\n"
        f"Generated by scripts/record_brevitas_keywords.py from Brevitas's sources; do not edit.\n"
        f'"""\n\nfrom typing import FrozenSet\n\n'
        f'BREVITAS_VERSION = "{brevitas.__version__}"\n\n'
    )
    body = "\n".join(
        [
            _frozenset_source(
                "QUANTIZER_NAMES", quantizer, "Attributes a Brevitas quantizer can be given."
            ),
            _frozenset_source(
                "PREFIXES", prefixes, "Keyword prefixes of Brevitas's layers ('' included)."
            ),
            _frozenset_source(
                "LAYER_KEYWORDS", layer, "Constructor arguments of Brevitas's layers."
            ),
        ]
    )
    with open(OUT, "w") as f:
        f.write(header + body)
    print(
        f"wrote {os.path.normpath(OUT)}: {len(quantizer)} quantizer names, {len(prefixes)} "
        f"prefixes, {len(layer)} layer keywords"
    )


if __name__ == "__main__":
    main()
