#!/usr/bin/env bash
# Configures and builds hone into build/ (Release, Ninja). CUDA is built when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build
