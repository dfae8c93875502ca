#!/usr/bin/env bash
# On a machine with a GPU and a CUDA build of torch (not part of .ci/run, which has no GPU):
# builds the package with its CUDA kernels into $SITE, then runs the CUDA tests, the whole
# pytest suite against that build (-n 8), and the GPU benchmarks, each with its log under OUTDIR.
#   bash scripts/cuda_check.sh OUTDIR [STAGE ...]    stages: build cuda cpu bench qat ncu
#                                                    (default: all but ncu)
# Pure-Python wheels in .whl/ (Brevitas 0.12.1 and its needs, for a machine without a package
# index) go into $BREVITAS_SITE, which only the qat stage puts on the path. Each stage is cut at
# STAGE_TIMEOUT seconds (default 900) so that one hang leaves the others their time.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-/tmp/cuda_check}
shift || true
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(build cuda cpu bench qat)
SITE=${SITE:-/tmp/brevitas_cuda}
BREVITAS_SITE=${BREVITAS_SITE:-/tmp/brevitas_wheels}
mkdir -p "$OUTDIR" "$SITE" "$BREVITAS_SITE"
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1
py() { timeout "${STAGE_TIMEOUT:-900}" python3 -P "$@"; }  # -P: the built package, not the tree
status=0
for stage in "${stages[@]}"; do
  start=$(date +%s)
  case $stage in
    build)
      { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1
        g++ --version | head -1; python3 --version; } > "$OUTDIR/machine.log" 2>&1
      if compgen -G ".whl/*.whl" > /dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --target "$BREVITAS_SITE" .whl/*.whl
      fi
      CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-16} python3 -m pip install -v \
        --no-build-isolation --no-deps --target "$SITE" --upgrade . > "$OUTDIR/build.log" 2>&1 \
        || { tail -40 "$OUTDIR/build.log"; exit 1; }
      py -c "import brevitas_cpp, torch; print(torch.__version__, brevitas_cpp.build_info())" \
        | tee -a "$OUTDIR/machine.log" ;;
    cuda) py -m pytest -q -p no:cacheprovider -n "${CUDA_WORKERS:-4}" --maxfail=60 tests/ops/test_cuda_ops.py \
            tests/nn/test_cuda_models.py tests/nn/test_cuda_layers.py tests/distributed/test_ddp_cuda.py "tests/examples/test_qat_digits.py::test_main_job_on_gpu_ends_where_cpu_does" \
            > "$OUTDIR/cuda_tests.log" 2>&1 || status=1 ;;
    cpu) py -m pytest -q -p no:cacheprovider -n 8 tests > "$OUTDIR/cpu_tests.log" 2>&1 || status=1 ;;
    bench) py benchmarks/bench_ops.py --device cuda --stat min > "$OUTDIR/bench_ops.log" 2>&1 || status=1 ;;
    qat) PYTHONPATH="$SITE:$BREVITAS_SITE" py benchmarks/bench_qat_step_cuda.py ${QAT_ARGS:-} \
           > "$OUTDIR/bench_qat_step.log" 2>&1 || status=1 ;;
    ncu) ncu --kernel-name regex:'map_kernel|reduce_by_param|param_grad' --launch-skip 6 --launch-count 6 \
           --section SpeedOfLight --section Occupancy --section LaunchStats \
           python3 -P benchmarks/profile_int_quant_cuda.py > "$OUTDIR/ncu.log" 2>&1 || status=1 ;;
    *) echo "unknown stage $stage (build cuda cpu bench qat ncu)"; exit 2 ;;
  esac
  echo "== $stage: $(( $(date +%s) - start )) s"
  case $stage in cuda|cpu) tail -3 "$OUTDIR/${stage}_tests.log" ;; esac
done
exit $status
