#!/usr/bin/env bash
# The full pytest suite against each torch version given (default: 2.11.0 2.13.0 2.14.1): for
# each, a throwaway virtual environment with that torch and the test tools, a build of this
# tree against it, and `pytest tests`; then a table of version / build / passed / failed / skipped.
# Versions other than the local 2.13.0+cpu wheel come from the package index as CUDA wheels
# (several GB each; they run on CPU). Not part of .ci/run.
#   bash scripts/test_torch_versions.sh [VERSION ...]     (WORK=dir keeps the venvs and logs)
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/brevitas_torch_versions}
PYTHON=${PYTHON:-python3}
mkdir -p "$WORK"
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.11.0 2.13.0 2.14.1)

declare -A build passed failed skipped
for v in "${versions[@]}"; do
  venv="$WORK/venv-$v" log="$WORK/torch-$v"
  echo "== torch $v: venv $venv, logs $log.*.log"
  build[$v]=failed passed[$v]=- failed[$v]=- skipped[$v]=-
  if ! { [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"; } ||
     ! "$venv/bin/pip" install -q "torch==$v" -r requirements-dev.txt >"$log.install.log" 2>&1; then
    build[$v]="install failed"; continue
  fi
  # A build directory per version (the default one belongs to the main environment).
  if ! "$venv/bin/pip" install -q --no-build-isolation --no-deps \
      --config-settings=build-dir="$WORK/build-$v" . >"$log.build.log" 2>&1; then
    continue
  fi
  build[$v]=ok
  # -P: import the installed package, not the source tree.
  "$venv/bin/python" -P -m pytest -q -p no:cacheprovider tests >"$log.pytest.log" 2>&1
  summary=$(grep -E '[0-9]+ (passed|failed|errors?)' "$log.pytest.log" | grep -E ' in [0-9.:hms ()]+$' | tail -1)
  count() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' || echo 0; }
  passed[$v]=$(count passed) failed[$v]=$(( $(count failed) + $(count error) )) skipped[$v]=$(count skipped)
done

printf '\n| torch | build | passed | failed | skipped |\n| --- | --- | ---: | ---: | ---: |\n'
status=0
for v in "${versions[@]}"; do
  printf '| %s | %s | %s | %s | %s |\n' "$v" "${build[$v]}" "${passed[$v]}" "${failed[$v]}" "${skipped[$v]}"
  [ "${build[$v]}" = ok ] && [ "${failed[$v]}" = 0 ] || status=1
done
exit $status
