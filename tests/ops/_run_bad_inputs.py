"""Child process of test_bad_inputs_isolated.py: imports what the test suite imports, in the
order given by argv[1] ("suite-first" or "library-first"), then runs every case of
bad_input_cases.py. Prints "start <case>" before each call (so a crash names its case), one
"FAIL <case>: <why>" line per wrong outcome, and "done <n>" at the end."""

import importlib
import pkgutil
import sys
from pathlib import Path

# What test modules, conftest and the examples import besides brevitas_cpp (heaviest first).
SUITE_MODULES = [
    "numpy",
    "hypothesis",
    "expecttest",
    "torch.testing._internal.optests",
    "torch._dynamo",
    "torch.distributed",
    "torch.fx",
]


def import_library() -> None:
    import brevitas_cpp

    for info in pkgutil.walk_packages(brevitas_cpp.__path__, "brevitas_cpp."):
        if not info.name.endswith(".libbrevitas_cpp_ops"):  # the op library, not a module
            importlib.import_module(info.name)


def import_suite() -> None:
    for name in SUITE_MODULES:
        importlib.import_module(name)


def main() -> int:
    order = sys.argv[1]
    steps = {
        "suite-first": [import_suite, import_library],
        "library-first": [import_library, import_suite],
    }[order]
    for step in steps:
        step()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bad_input_cases import cases

    failures = 0
    all_cases = cases()
    for case in all_cases:
        print(f"start {case.name}", flush=True)
        try:
            case.call()
        except RuntimeError as exc:
            message = str(exc)
            missing = [f for f in case.fragments if f not in message]
            if missing:
                failures += 1
                print(f"FAIL {case.name}: message lacks {missing}: {message!r}", flush=True)
        except Exception as exc:  # noqa: BLE001 - reported, not swallowed
            failures += 1
            print(
                f"FAIL {case.name}: {type(exc).__name__} instead of RuntimeError: {exc}", flush=True
            )
        else:
            failures += 1
            print(f"FAIL {case.name}: no error raised", flush=True)
    print(f"done {len(all_cases)}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
