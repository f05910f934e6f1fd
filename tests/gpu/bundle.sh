#!/usr/bin/env bash
# Builds the GPU tests (and NCCL's, #7), the hone binary, bench_attention and bench_linear for Hopper (sm_90), without
# -march=native (the device machine's processor may lack this one's AVX-512),
# and packs them with the shared libraries a CUDA image lacks, and the CPU's
# loss curve on the quickstart data (a minute), into .gpu/bundle.tar.gz,
# for tests/gpu/run.sh on the device machine (docs/cuda.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DHONE_CUDA=ON \
  -DHONE_NATIVE=OFF >/dev/null
cmake --build build-gpu --target test_cuda_ops test_cuda_models nccl_collectives hone bench_attention bench_linear
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib" .gpu
cp build-gpu/bin/test_cuda_ops build-gpu/bin/test_cuda_models build-gpu/bin/nccl_collectives build-gpu/bin/hone \
  build-gpu/bin/bench_attention build-gpu/bin/bench_linear "$stage/bin/"
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
# #8's loss-curve check (run.sh's stage `curve`): the quickstart's data and its
# first 200 pretraining steps run here on the CPU (build/, built for this CPU:
# 1 minute, where build-gpu/'s portable kernels take 4), for the GPU's to follow.
bash scripts/build.sh
cache="$(bash scripts/quickstart-data.sh build/bin/hone | tail -n 1)"
mkdir -p "$stage/curve"
cp "$cache"/quickstart/sotu_text_document.{bin,idx} "$stage/curve/"
cp -rL "$cache/tokenizers/gpt2-hf" "$stage/curve/"
cpu_run=$(mktemp -d)
build/bin/hone run pretrain --config quickstart max_steps=200 "output_dir=$cpu_run" \
  "dataset.path=$stage/curve/sotu_text_document" "tokenizer.path=$stage/curve/gpt2-hf" | tail -2
cp "$cpu_run/metrics.jsonl" "$stage/curve/cpu_metrics.jsonl"
rm -rf "$cpu_run"
tar -C "$stage" -czf .gpu/bundle.tar.gz .
rm -rf "$stage"
ls -la .gpu/bundle.tar.gz
