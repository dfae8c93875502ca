#!/usr/bin/env bash
# Every test: pytest (Python) and the GoogleTest suite through ctest (C++).
set -euo pipefail
cd "$(dirname "$0")/.."
# -P: do not put the source tree first on sys.path (it lacks the compiled modules).
python3 -P -m pytest -q -p no:cacheprovider tests
ctest --test-dir build/skbuild --output-on-failure
