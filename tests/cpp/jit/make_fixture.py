"""Writes the fixture of tests/cpp/jit/test_load_scripted_model.cpp into the directory given as
the only argument: model.pt (a scripted quant CNN, fresh, in train mode) and expected.pt (its
input, output and gradients). ctest runs it before the C++ loader tests (CMakeLists.txt); it
needs the installed brevitas_cpp, and fails loudly when it cannot write the fixture."""

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TORCHSCRIPT_TESTS = HERE.parents[1] / "nn" / "test_torchscript.py"


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} FIXTURE_DIR")
    # The model and the checks are those of the Python TorchScript tests, loaded by path.
    spec = importlib.util.spec_from_file_location(
        "brevitas_cpp_torchscript_tests", TORCHSCRIPT_TESTS
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    directory = Path(sys.argv[1])
    module.write_cpp_fixture(directory)
    print(f"wrote {directory / 'model.pt'} and {directory / 'expected.pt'}")


if __name__ == "__main__":
    main()
