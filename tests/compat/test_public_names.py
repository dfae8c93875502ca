"""Every public name of Brevitas 0.12.1 exists in brevitas_cpp at the same path (issue 32): the
names recorded from Brevitas's own sources (brevitas_public_names.txt, written by
scripts/list_brevitas_names.py in the Brevitas environment) all import, and those brevitas_cpp
does not support raise on use, saying what to use instead."""

import importlib
import os
import re
from typing import List, Tuple

import pytest

import brevitas_cpp
from brevitas_cpp._unsupported import UnsupportedError
from brevitas_cpp._unsupported_table import UNSUPPORTED

NAMES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "brevitas_public_names.txt")


def _recorded() -> List[Tuple[str, str, str]]:
    with open(NAMES_FILE) as file:
        rows = [line.rstrip("\n").split("\t") for line in file if not line.startswith("#")]
    return [(module, name, kind) for module, name, kind in rows]


RECORDED = _recorded()
STUBBED = {(module, name) for module, (_, names) in UNSUPPORTED.items() for name in names}


def _ours(module: str) -> str:
    return "brevitas_cpp" + module[len("brevitas") :]


def _relative(module: str) -> str:
    return module[len("brevitas.") :] if module != "brevitas" else ""


def test_the_record_covers_brevitas():
    """The record is the whole package (a truncated file would pass everything below)."""
    modules = {module for module, _, _ in RECORDED}
    assert len(RECORDED) > 1400 and len(modules) > 200
    for expected in ("brevitas.export.inference.manager", "brevitas.export.shark.manager"):
        assert expected in modules


def test_every_recorded_name_imports():
    missing = []
    for module, name, _ in RECORDED:
        try:
            imported = importlib.import_module(_ours(module))
            if name != "-":
                getattr(imported, name)
        except (ImportError, AttributeError) as error:
            missing.append(f"{module}.{name}: {error}")
    assert not missing, "\n".join(missing)


def test_the_table_lists_only_recorded_names_that_brevitas_cpp_lacks():
    """A stale entry (the name now implemented, or never Brevitas's) would hide a real object
    or invent a name."""
    recorded = {(_relative(module), name) for module, name, _ in RECORDED}
    assert STUBBED <= recorded, sorted(STUBBED - recorded)
    package = os.path.dirname(brevitas_cpp.__file__)
    for module, name in sorted(STUBBED):
        path = os.path.join(package, *module.split("."))
        if os.path.exists(path + ".py") or os.path.exists(os.path.join(path, "__init__.py")):
            real = importlib.import_module(f"brevitas_cpp.{module}".rstrip("."))
            assert name not in vars(real), f"brevitas.{module}.{name} is implemented and stubbed"


def test_implemented_names_are_not_stubs():
    for module, name, _ in RECORDED:
        if name == "-" or (_relative(module), name) in STUBBED:
            continue
        obj = getattr(importlib.import_module(_ours(module)), name)
        assert "does not support" not in (getattr(obj, "__doc__", None) or ""), (module, name)


def _use(obj: object, kind: str) -> None:
    if kind == "class":
        obj()
    elif kind == "function":
        obj(1, key=2)
    else:
        str(obj)


@pytest.mark.parametrize("module", sorted(UNSUPPORTED))
def test_stubs_raise_on_use_naming_the_alternative(module):
    imported = importlib.import_module(f"brevitas_cpp.{module}".rstrip("."))
    for name, kind in UNSUPPORTED[module][1].items():
        qualname = ".".join(part for part in ("brevitas", module, name) if part)
        pattern = rf"^brevitas_cpp does not support {re.escape(qualname)}; .+ instead"
        with pytest.raises(UnsupportedError, match=pattern):
            _use(getattr(imported, name), kind)


def test_stub_classes_values_and_functions_fail_on_any_use():
    from brevitas_cpp.export import TorchQCDQManager, export_qonnx
    from brevitas_cpp.graph.quantize import COMPUTE_LAYER_MAP
    from brevitas_cpp.nn import TruncQuantAccumulator

    assert isinstance(UnsupportedError("x"), NotImplementedError)
    with pytest.raises(UnsupportedError, match="use brevitas_cpp.export.export_torch_qcdq"):
        TorchQCDQManager.export(None)  # a class attribute
    with pytest.raises(UnsupportedError, match="QONNX export is not ported"):
        export_qonnx(None, None, "model.onnx")

    class Subclass(TruncQuantAccumulator):  # subclassing works, instantiating does not
        pass

    with pytest.raises(UnsupportedError, match="TruncQuantAccumulator"):
        Subclass()
    assert not isinstance(object(), TruncQuantAccumulator)
    for use in (
        lambda: COMPUTE_LAYER_MAP["x"],
        lambda: list(COMPUTE_LAYER_MAP),
        lambda: COMPUTE_LAYER_MAP.get("x"),
    ):
        with pytest.raises(UnsupportedError, match="graph.quantize.COMPUTE_LAYER_MAP"):
            use()
    assert "unsupported brevitas.graph.quantize.COMPUTE_LAYER_MAP" in repr(COMPUTE_LAYER_MAP)
    # One object per name, however it is reached.
    from brevitas_cpp.export import TorchQCDQManager as again

    assert again is TorchQCDQManager


def test_names_brevitas_never_had_still_fail():
    with pytest.raises(ImportError):
        from brevitas_cpp.graph import NotABrevitasName  # noqa: F401
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("brevitas_cpp.graph.not_a_brevitas_module")
    with pytest.raises(AttributeError):
        importlib.import_module("brevitas_cpp.graph.gptq").GPTQQ  # noqa: B018


def test_the_names_of_the_issue_are_implemented():
    import brevitas_cpp.utils.quant_utils as quant_utils
    from brevitas_cpp.core.restrict_val import QuantRestrictValue
    from brevitas_cpp.export.inference import quant_inference_mode
    from brevitas_cpp.nn import HadamardClassifier

    assert brevitas_cpp.NATIVE_STE_BACKEND_LOADED is True
    for obj in (QuantRestrictValue, quant_inference_mode, HadamardClassifier):
        assert (obj.__module__.split(".")[0], obj.__name__) == ("brevitas_cpp", obj.__name__)
        assert "does not support" not in (obj.__doc__ or "")
    assert callable(quant_utils.groupwise_dequant_expand)
