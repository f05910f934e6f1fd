#!/usr/bin/env bash
# The test command of README.md: install dependencies, build, run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 -j 2 "$@"
