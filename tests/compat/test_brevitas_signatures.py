"""brevitas_cpp's classes and functions take Brevitas 0.12.1's positional parameters in
Brevitas's order (issue 32: code written for Brevitas calls them positionally).

brevitas_signatures.json is recorded from Brevitas's own sources by
scripts/compare_brevitas_signatures.py (in the Brevitas environment): every public class
``__init__`` and function of brevitas.nn, .core, .proxy, .quant_tensor and .function. For each
one brevitas_cpp has at the same path, Brevitas's positional parameters are ours, name by name
and position by position; one with a default in Brevitas has one here, and a positional
parameter we add after them has a default. Names brevitas_cpp lacks, or only stubs (raising
UnsupportedError on use), are tests/compat/test_public_names.py's business."""

import importlib
import inspect
import json
import os
from typing import Any, Dict, List, Optional

import pytest

SIGNATURES_FILE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "brevitas_signatures.json"
)
POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
# torch calls these through __torch_function__ with the caller's arguments, keywords named as
# torch names them (F.linear(input=..., weight=...)): ours take torch's names, Brevitas's
# differ (quant_input, inp), so only their positions are compared.
HANDLER_MODULES = (
    "brevitas.quant_tensor.torch_handler",
    "brevitas.quant_tensor.int_torch_handler",
    "brevitas.quant_tensor.float_torch_handler",
)

with open(SIGNATURES_FILE) as _file:
    RECORDED: Dict[str, Dict[str, Any]] = json.load(_file)["signatures"]


def _ours(key: str) -> Optional[Any]:
    """brevitas_cpp's object at Brevitas's path, or None when absent or an unsupported stub."""
    module_name, _, name = key.rpartition(".")
    try:
        obj = getattr(importlib.import_module("brevitas_cpp" + module_name[8:]), name)
    except (ImportError, AttributeError, NotImplementedError):  # UnsupportedError
        return None
    # The stubs of brevitas_cpp._unsupported say so in their docstring.
    if (inspect.getdoc(obj) or "").startswith("brevitas_cpp does not support"):
        return None
    return obj


def _parameters(obj: Any) -> List[List[Any]]:
    """[[name, kind, has_default], ...] as the recording script writes them."""
    function = obj.__init__ if isinstance(obj, type) else obj
    params = list(inspect.signature(function).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return [[p.name, p.kind.name, p.default is not inspect.Parameter.empty] for p in params]


def _mismatches(key: str, theirs: List[List[Any]], ours: List[List[Any]]) -> List[str]:
    their_pos = [p for p in theirs if p[1] in POSITIONAL]
    our_pos = [p for p in ours if p[1] in POSITIONAL]
    problems = []
    if len(our_pos) < len(their_pos):
        problems.append(
            f"takes {len(our_pos)} positional parameters, Brevitas {len(their_pos)}: "
            f"{[p[0] for p in their_pos]}"
        )
    for index, (their, our) in enumerate(zip(their_pos, our_pos)):
        if our[0] != their[0] and key.rpartition(".")[0] not in HANDLER_MODULES:
            problems.append(f"position {index} is {our[0]!r}, Brevitas's {their[0]!r}")
        elif their[2] and not our[2]:
            problems.append(f"{our[0]!r} has no default, Brevitas's {their[0]!r} has")
    # After Brevitas's positional parameters, a required one would break Brevitas's calls
    # (unless Brevitas takes *args, e.g. to hand them to a base class, and so names none).
    if not any(p[1] == "VAR_POSITIONAL" for p in theirs):
        extra = [p[0] for p in our_pos[len(their_pos) :] if not p[2]]
        if extra:
            problems.append(f"required positional parameters Brevitas does not have: {extra}")
    return problems


def test_recorded_table_covers_the_packages() -> None:
    """The recording is whole: the packages' main classes are in it (a cut-short recording
    would let mismatches pass)."""
    for key in (
        "brevitas.nn.quant_rnn.QuantLSTM",
        "brevitas.nn.quant_conv.QuantConv2d",
        "brevitas.core.quant.int.RescalingIntQuant",
        "brevitas.proxy.parameter_quant.BiasQuantProxyFromInjector",
        "brevitas.quant_tensor.int_quant_tensor.IntQuantTensor",
        "brevitas.function.ops.max_int",
    ):
        assert key in RECORDED, key
    assert len(RECORDED) > 250


def test_positional_parameters_are_brevitas() -> None:
    compared = 0
    problems = []
    for key, entry in RECORDED.items():
        obj = _ours(key)
        if obj is None:
            continue
        compared += 1
        problems += [f"{key}: {p}" for p in _mismatches(key, entry["params"], _parameters(obj))]
    assert not problems, "\n".join(problems)
    assert compared > 200  # most of the table exists here


@pytest.mark.parametrize(
    "theirs, ours, expected",
    [
        # Brevitas's QuantRecurrentStackBase against the order brevitas_cpp had before.
        (
            [
                ["layer_impl", "POSITIONAL_OR_KEYWORD", False],
                ["io_quant", "POSITIONAL_OR_KEYWORD", False],
            ],
            [
                ["layer_impl", "POSITIONAL_OR_KEYWORD", False],
                ["batch_first", "POSITIONAL_OR_KEYWORD", False],
            ],
            "position 1 is 'batch_first', Brevitas's 'io_quant'",
        ),
        (
            [["bias", "POSITIONAL_OR_KEYWORD", True]],
            [["bias", "POSITIONAL_OR_KEYWORD", False]],
            "'bias' has no default",
        ),
        (
            [["x", "POSITIONAL_OR_KEYWORD", False], ["kwargs", "VAR_KEYWORD", False]],
            [["x", "POSITIONAL_OR_KEYWORD", False], ["extra", "POSITIONAL_OR_KEYWORD", False]],
            "required positional parameters Brevitas does not have: ['extra']",
        ),
        (
            [["x", "POSITIONAL_OR_KEYWORD", False], ["y", "POSITIONAL_OR_KEYWORD", False]],
            [["x", "POSITIONAL_OR_KEYWORD", False], ["y", "KEYWORD_ONLY", False]],
            "takes 1 positional parameters, Brevitas 2",
        ),
    ],
)
def test_the_comparison_catches_each_kind_of_mismatch(theirs, ours, expected) -> None:
    problems = _mismatches("brevitas.nn.x.X", theirs, ours)
    assert any(expected in p for p in problems), problems
