"""Record what tests/compat/programs/brevitas_program.py returns on Brevitas 0.12.1.

Run by hand in the environment scripts/make_brevitas_env.sh builds, plus scipy (Brevitas's
HadamardClassifier builds its matrix with scipy.linalg.hadamard), with BREVITAS_JIT unset:

    bash scripts/make_brevitas_env.sh /tmp/brevenv && /tmp/brevenv/bin/pip install scipy
    /tmp/brevenv/bin/python tests/compat/golden/record_program.py

It writes brevitas_0_12_program.pt next to this file; the test reads it with plain torch.
"""

import importlib.util
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))

# torch 2.13 dropped named tensors; Brevitas 0.12's layers call Tensor.rename(None), which for an
# unnamed tensor returns it (tests/nn/golden/generate.py installs the same stand-in).
if not hasattr(torch.Tensor, "rename"):

    def _rename_none(self, *names, **rename_map):
        if names != (None,) or rename_map:
            raise NotImplementedError("named tensors are not available in this torch")
        return self

    torch.Tensor.rename = _rename_none


def main() -> None:
    path = os.path.join(HERE, "..", "programs", "brevitas_program.py")
    spec = importlib.util.spec_from_file_location("brevitas_program", path)
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    torch.save(program.run(), os.path.join(HERE, "brevitas_0_12_program.pt"))


if __name__ == "__main__":
    main()
