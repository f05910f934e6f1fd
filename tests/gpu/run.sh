#!/usr/bin/env bash
# On the device machine: runs the GPU tests that tests/gpu/bundle.sh packed
# (carry .gpu) and NCCL's at one rank, then `hone bench --device cuda` on GPT-2 124M and Llama 3.2 1B
# (MFU against the datasheet peak), attention alone at seq 4096 (head sizes 128
# and 64) and the Llama 3.1 8B LoRA memory goal, printing a summary and leaving
# logs and XML reports in $OUT. Arguments go to the tests (e.g. --gtest_filter=...).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/hone-gpu-out}
mkdir -p "$out"
bundle=/tmp/hone-gpu
rm -rf "$bundle" && mkdir -p "$bundle" && tar -C "$bundle" -xzf .gpu/bundle.tar.gz || exit 1
source_dir=$(cat "$bundle/source_dir")
if [ ! -e "$source_dir/tests/reference" ]; then
  mkdir -p "$(dirname "$source_dir")" && ln -sfn "$PWD" "$source_dir"
fi
# CUDA's runtime, cuBLASLt, NVRTC (cuDNN compiles some engines at run time),
# cuDNN and NCCL from the machine: the toolkit's, else any copy (e.g. pip's).
# The toolkit and ldconfig first; one walk of /usr and /opt for the rest (a
# walk per library costs device time on a machine with a large Python install).
libs="$bundle/lib"
names="libcudart.so.13 libcublasLt.so.13 libnvrtc.so.13 libcudnn.so.9 libnccl.so.2"
declare -A where
for name in $names; do
  where[$name]=$(ls /usr/local/cuda/lib64/$name 2>/dev/null || ldconfig -p | awk -v n="$name" '$1 == n {print $NF; exit}')
done
walk=()
for name in $names; do [ -z "${where[$name]}" ] && walk+=(-o -name "$name"); done
if [ ${#walk[@]} -gt 0 ]; then
  while read -r found; do
    name=$(basename "$found")
    [ -z "${where[$name]}" ] && where[$name]=$found
  done < <(find /usr /opt \( "${walk[@]:1}" \) 2>/dev/null)
fi
for name in $names; do
  echo "$name: ${where[$name]:-not found}"
  [ -n "${where[$name]}" ] && libs="$libs:$(dirname "${where[$name]}")"
done
export LD_LIBRARY_PATH="$libs:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# #8's MFU goals count against the datasheet's dense bf16 peak (PaLM's convention).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*PCIe*) peak=756 ;;
  *H100* | *H200*) peak=989 ;;
  *A100*) peak=312 ;;
  *) peak="" ;;
esac
peak_flag=${peak:+--peak-tflops $peak}
# Stages (HONE_GPU_STAGES, default all three): tests, bench (GPT-2 124M, Llama
# 3.2 1B, attention), lora8b (the 8B memory goal, up to 7 minutes): a device call
# ends at 10 minutes, so a session may run them in two calls.
stages=" ${HONE_GPU_STAGES:-tests bench lora8b} "
status=0
if [[ $stages == *" tests "* ]]; then
  for test in test_cuda_ops test_cuda_models; do
    "$bundle/bin/$test" --gtest_output="xml:$out/$test.xml" "$@" >"$out/$test.log" 2>&1
    rc=$?
    grep -E '^\[  (FAILED|SKIPPED) |relative error|Failure|Expected|Which is|^\[  PASSED|^\[==========\]|^hone: ' \
      "$out/$test.log"
    [ "$rc" -eq 0 ] || status=1
  done
  # Where cuDNN refused hone's attention graphs, its own log says which operation and why.
  if grep -q "^hone: cuDNN" "$out"/test_cuda_*.log; then
    CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$out/cudnn.log" "$bundle/bin/test_cuda_ops" \
      --gtest_filter='*Cudnn*' >/dev/null 2>&1
    truncate -s '<15M' "$out/cudnn.log"
    grep -m 20 -E 'Reason|No viable' "$out/cudnn.log"
  fi
  # #7's NCCL backend, a world of one (the lent machines have one GPU; two ranks need two).
  HONE_DIST_TIMEOUT=60 "$bundle/bin/nccl_collectives" --gtest_output="xml:$out/nccl_collectives.xml" \
    >"$out/nccl_collectives.log" 2>&1
  rc=$?
  grep -E '^\[  (FAILED|SKIPPED) |Failure|^\[  PASSED|^\[==========\]' "$out/nccl_collectives.log"
  [ "$rc" -eq 0 ] || status=1
fi
if [[ $stages == *" bench "* ]]; then
  # End to end: the trainer's step on the GPU.
  "$bundle/bin/hone" bench --model gpt2_124M --batch-size 8 --seq-len 1024 --dtype bf16 --steps 5 --device cuda \
    $peak_flag >"$out/bench.log" 2>&1
  echo "bench: exit $?: $(tail -1 "$out/bench.log")"
  # #8's MFU goal for the Llama 3.2 1B shape at seq 2048.
  "$bundle/bin/hone" bench --model llama3_2_1B --batch-size 4 --seq-len 2048 --dtype bf16 --steps 5 --device cuda \
    $peak_flag >"$out/bench_llama_1b.log" 2>&1
  echo "bench Llama 3.2 1B: exit $?: $(tail -1 "$out/bench_llama_1b.log")"
  # Where its step goes: each op timed with the device synchronized around it.
  HONE_PROFILE=1 "$bundle/bin/hone" bench --model llama3_2_1B --batch-size 4 --seq-len 2048 --dtype bf16 --steps 2 \
    --device cuda >"$out/profile_llama_1b.log" 2>&1
  echo "profile Llama 3.2 1B: exit $?"; grep -A12 "hone profile" "$out/profile_llama_1b.log"
  # Attention alone: cuDNN's fused kernels (the default) and hone's own.
  for kernels in cudnn hone; do
    for head_dim in 128 64; do
      HONE_CUDA_ATTENTION=$kernels "$bundle/bin/bench_attention" --device cuda --batch 4 --seq 4096 \
        --heads $((2048 / head_dim)) --kv-heads $((2048 / head_dim)) --head-dim "$head_dim" \
        >>"$out/bench_attention.log" 2>&1
      echo "bench_attention ($kernels): exit $?: $(tail -1 "$out/bench_attention.log")"
    done
  done
fi
if [[ $stages == *" lora8b "* ]]; then
  # #8's LoRA memory goal (<= 16.0 GiB): Llama 3.1 8B at 2 x 2048, inputs offloaded to the host.
  timeout 420 "$bundle/bin/hone" bench --model llama3_1_8B --batch-size 2 --seq-len 2048 --dtype bf16 --steps 3 \
    --lora-rank 8 --activation-checkpointing --activation-offloading --device cuda >"$out/bench_lora_8b.log" 2>&1
  echo "bench LoRA 8B: exit $?: $(tail -1 "$out/bench_lora_8b.log")"
fi
exit "$status"
