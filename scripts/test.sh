#!/usr/bin/env bash
# Every test: pytest (Python) and the GoogleTest suite through ctest (C++).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pytest -q -p no:cacheprovider tests
ctest --test-dir build/skbuild --output-on-failure
