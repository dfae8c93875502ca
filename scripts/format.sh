#!/usr/bin/env bash
# Formats the tree: ruff (Python: format, then lint with the import order fixed) and
# clang-format (C++ and CUDA under csrc/ and tests/cpp/), as configured in pyproject.toml and
# .clang-format. With --check it changes nothing and fails on any difference.
set -euo pipefail
cd "$(dirname "$0")/.."
# The clang-format of requirements-dev.txt (its wheel's binary), whatever else is on PATH.
clang_format=$(python3 -c "import clang_format, os; print(os.path.join(os.path.dirname(clang_format.__file__), 'data', 'bin', 'clang-format'))")
cxx_files=$(git ls-files 'csrc/*.cpp' 'csrc/*.h' 'csrc/*.cu' 'csrc/*.cuh' 'tests/cpp/*.cpp' 'tests/cpp/*.h')
if [ "${1:-}" = "--check" ]; then
  python3 -m ruff format --check --quiet .
  python3 -m ruff check --quiet .
  # shellcheck disable=SC2086
  "$clang_format" --dry-run --Werror $cxx_files
else
  python3 -m ruff format --quiet .
  python3 -m ruff check --quiet --fix .
  # shellcheck disable=SC2086
  "$clang_format" -i $cxx_files
fi
