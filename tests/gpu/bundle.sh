#!/usr/bin/env bash
# Builds the GPU tests (and NCCL's, #7), the hone binary and bench_attention for Hopper (sm_90), without
# -march=native (the device machine's processor may lack this one's AVX-512),
# and packs them with the shared libraries a CUDA image lacks into
# .gpu/bundle.tar.gz, for tests/gpu/run.sh on the device machine (docs/cuda.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DHONE_CUDA=ON \
  -DHONE_NATIVE=OFF >/dev/null
cmake --build build-gpu --target test_cuda_ops test_cuda_models nccl_collectives hone bench_attention
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib" .gpu
cp build-gpu/bin/test_cuda_ops build-gpu/bin/test_cuda_models build-gpu/bin/nccl_collectives build-gpu/bin/hone \
  build-gpu/bin/bench_attention "$stage/bin/"
if ldd "$stage"/bin/* | grep 'not found'; then
  echo "bundle.sh: the binaries need libraries this machine lacks (above)" >&2
  exit 1
fi
# Every library they load but glibc's and CUDA's (the device machine has its own
# CUDA 13; NCCL, 200 MB, comes with its PyTorch).
ldd "$stage"/bin/* | awk '/=> \//{print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread)\.so|/ld-linux|libcudart|libcublas|libnccl' |
  xargs -I{} cp -L {} "$stage/lib/"
# The binaries read tests/reference/ under the source folder they were built from.
pwd > "$stage/source_dir"
tar -C "$stage" -czf .gpu/bundle.tar.gz .
rm -rf "$stage"
ls -la .gpu/bundle.tar.gz
