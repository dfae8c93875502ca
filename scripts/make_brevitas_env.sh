#!/usr/bin/env bash
# The throwaway environment the golden generators run in (tests/quant/golden/generate.py,
# tests/nn/golden/generate.py): Brevitas 0.12.1 beside the pinned CPU torch. Brevitas is never a
# dependency of brevitas_cpp; this environment exists only to record reference numbers.
#   bash scripts/make_brevitas_env.sh [DIR]        (default /tmp/brevenv)
# then e.g.  /tmp/brevenv/bin/python tests/nn/golden/generate.py
set -euo pipefail
ENV_DIR=${1:-/tmp/brevenv}
PYTHON=${PYTHON:-python3}
[ -x "$ENV_DIR/bin/python" ] || "$PYTHON" -m venv "$ENV_DIR"
# Brevitas 0.12.1's declared requirements do not resolve beside torch 2.13: install it without
# them, with the few it needs at run time; setuptools<81 still has the pkg_resources it imports.
"$ENV_DIR/bin/pip" install -q torch==2.13.0 numpy "setuptools<81" packaging
"$ENV_DIR/bin/pip" install -q --no-deps brevitas==0.12.1 unfoldNd dependencies==2.0.1
# torch 2.13 dropped named tensors, which Brevitas 0.12 still calls (Tensor.rename(None));
# generate.py installs the no-op stand-in itself, so nothing here patches torch.
env -u BREVITAS_JIT "$ENV_DIR/bin/python" -c "import brevitas, torch; print('brevitas', brevitas.__version__, 'torch', torch.__version__)"
