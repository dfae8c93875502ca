#!/usr/bin/env bash
# Every test: pytest (Python) and the GoogleTest suite through ctest (C++).
set -euo pipefail
cd "$(dirname "$0")/.."
# Style first (seconds): the tree as scripts/format.sh leaves it.
scripts/format.sh --check
# -P: do not put the source tree first on sys.path (it lacks the compiled modules).
python3 -P -m pytest -q -p no:cacheprovider tests
# The quantizer blocks again as TorchScript modules (BREVITAS_JIT is read once, at import).
BREVITAS_JIT=1 python3 -P -m pytest -q -p no:cacheprovider \
    tests/test_jit.py tests/core tests/inject tests/quant tests/quant_tensor tests/proxy tests/nn tests/graph \
    tests/distributed/test_stats_sync.py tests/distributed/test_stats_all_reduce.py \
    tests/docs/test_docs_code.py tests/examples
ctest --test-dir build/skbuild --output-on-failure
