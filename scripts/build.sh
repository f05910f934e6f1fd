#!/usr/bin/env bash
# Configures and builds hone into build/ (Release, Ninja). CUDA is built when nvcc is found.
# HONE_TARGETS names the targets to build (default: all, the tests and benchmarks included).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache (CMakeLists.txt) keeps its objects in the checkout: every build folder here shares them.
export CCACHE_DIR="${CCACHE_DIR:-$PWD/.cache/ccache}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build ${HONE_TARGETS:+--target $HONE_TARGETS}
