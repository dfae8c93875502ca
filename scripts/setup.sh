#!/usr/bin/env bash
# One-time set-up on a fresh machine (Debian, Python 3.11, root): system packages,
# the pinned CPU torch, build/test tools, then build and install brevitas_cpp.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
[ -f /usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake ] || [ -d /usr/src/googletest ] || need_apt+=(libgtest-dev)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}"
fi

python3 -m pip install -q torch==2.13.0
python3 -m pip install -q -r requirements-dev.txt
# The zoo test's model definitions (tests/zoo_models.py). --no-deps: its wheel pins another torch
# (which would replace the CPU one); its C extension does not load beside this torch and is unused.
python3 -m pip install -q --no-deps torchvision==0.28.0
# transformers' models of the zoo: its own requirements (huggingface_hub, safetensors, tokenizers,
# pyyaml, ...) pull no torch. timm's pin torch and torchvision, so --no-deps: the rest of what it
# needs (pyyaml, huggingface_hub, safetensors) comes with transformers.
python3 -m pip install -q transformers==5.24.0
python3 -m pip install -q --no-deps timm==1.0.31
# --no-build-isolation: build against the torch installed above (never a fresh download).
# The C++ tests are on here (the test command runs them); a plain `pip install .` leaves them off.
python3 -m pip install -q --no-build-isolation \
    --config-settings=cmake.define.BREVITAS_CPP_BUILD_TESTS=ON .
# -P: import the installed package, not the source tree of the current directory.
python3 -P -c "import brevitas_cpp; print('brevitas_cpp installed:', brevitas_cpp.build_info())"
