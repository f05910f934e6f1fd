#!/usr/bin/env bash
# The test command of README.md: install dependencies, build, run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --hip  # hipcc: the build also compiles the GPU kernels as HIP (a check)
bash scripts/build.sh
cd build
# GPU tests (label gpu) run on a machine with a GPU: ctest -L gpu (docs/cuda.md).
ctest --output-on-failure --timeout 600 -j 2 -LE gpu "$@"
