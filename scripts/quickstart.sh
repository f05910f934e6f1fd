#!/usr/bin/env bash
# The main command of README.md: install dependencies, build, and train a tiny
# Llama on this machine's CPU for a few steps (random tokens, for now: the data
# pipeline and the real pretraining quickstart are tracked in the issues).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/bin/hone bench --model llama_tiny --batch-size 8 --seq-len 128 --steps 20
