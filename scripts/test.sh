#!/usr/bin/env bash
# The test command of README.md: install dependencies, build, run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache (CMakeLists.txt) keeps its objects in the checkout: every build folder here shares them.
export CCACHE_DIR="${CCACHE_DIR:-$PWD/.cache/ccache}"
bash scripts/install-deps.sh --hip  # hipcc: the build also compiles the GPU kernels as HIP (a check)
bash scripts/build.sh
# GPU tests (label gpu) run on a machine with a GPU: ctest -L gpu (docs/cuda.md).
(cd build && ctest --output-on-failure --timeout 600 -j 2 -LE gpu "$@")
# And here, on the CPU: the same tests in builds whose CUDA kernels run in hone's
# CUDA emulator, with its memory check, then with its race check (docs/cuda.md).
for check in memory races; do
  dir=build-emulator-$check
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHONE_CUDA=EMULATOR -DHONE_EMULATOR_CHECK="${check^^}" \
    -DHONE_HIP_CHECK=OFF -DHONE_BUILD_BENCH=OFF >/dev/null
  cmake --build "$dir" --target test_cuda_ops test_cuda_models test_cuda_emulator "test_cuda_${check}_check"
  (cd "$dir" && ctest --output-on-failure --timeout 900 -j 2 -L gpu "$@")
done
# The CPU kernels', ops' and models' tests once more, compiled with
# AddressSanitizer and UndefinedBehaviorSanitizer (HONE_SANITIZE): the first
# access outside a buffer, leak or undefined behaviour ends the test. This build
# has no CUDA backend, as on a machine without nvcc: it also compiles the ops'
# CPU-only branches and links the hone binary without CUDA, which then trains a
# tiny model end to end.
sanitized="test_core test_ops test_transformer test_lora test_decoder test_pytorch_reference"
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHONE_SANITIZE=ON -DHONE_CUDA=OFF \
  -DHONE_HIP_CHECK=OFF -DHONE_BUILD_BENCH=OFF >/dev/null
cmake --build build-sanitize --target $sanitized hone
for test in $sanitized; do build-sanitize/bin/$test --gtest_brief=1; done
build-sanitize/bin/hone bench --model llama_tiny --batch-size 2 --seq-len 64 --steps 2 | tail -n 1
