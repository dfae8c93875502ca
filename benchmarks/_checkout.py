"""Which brevitas_cpp a benchmark imports: this checkout where its op library is built in place,
else the installed package (``pip install -e .`` imports the checkout; ``pip install .`` a copy
of it as it was when installed). The checkout's sources without their built library can not
load, so they are put first on sys.path only where the library sits beside them."""

import glob
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_brevitas_cpp_nn():
    """brevitas_cpp.nn, from this checkout where it is built in place."""
    built_in_place = glob.glob(os.path.join(REPO, "brevitas_cpp", "_C*.so"))
    if built_in_place and sys.path[0] != REPO:
        sys.path.insert(0, REPO)
    import brevitas_cpp.nn as qnn

    return qnn
