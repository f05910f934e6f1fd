#!/usr/bin/env bash
# On the device machine: runs the GPU tests that tests/gpu/bundle.sh packed
# (carry .gpu) and NCCL's at one rank, 200 quickstart steps against the CPU's
# loss curve, then `hone bench --device cuda` on GPT-2 124M and Llama 3.2 1B
# (MFU against the datasheet peak), their linear layers' products alone, attention
# alone at seq 4096 (head sizes 128 and 64) and the Llama 3.1 8B LoRA memory
# goal, printing a summary. Logs and XML
# reports go into $OUT/logs.tar.gz, repacked after each stage (the device tool
# returns at most 8 files, and nothing of a call it ends at 10 minutes but what
# $OUT holds by then). Arguments go to the tests (e.g. --gtest_filter=...).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/hone-gpu-out}
logs=/tmp/hone-gpu-logs
rm -rf "$logs" && mkdir -p "$out" "$logs"
pack() { tar -czf "$out/logs.tar.gz" -C "$logs" .; }
# Every command gets its own limit, cut to what is left of the call's (a device
# call ends at 600 s; HONE_GPU_BUDGET_S leaves room to pack the logs).
budget=${HONE_GPU_BUDGET_S:-570}
bounded() {  # bounded SECONDS LOG COMMAND...: runs it with its output in LOG, prints its exit status
  local limit=$1 log=$2 left=$((budget - SECONDS)) rc
  shift 2
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -le 5 ]; then
    echo "$(basename "$log" .log): skipped, the call's time is spent"
    return 124
  fi
  timeout -k 10 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  echo "$(basename "$log" .log): exit $rc$([ "$rc" -eq 124 ] && echo " (timed out after $limit s)")"
  [ "$rc" -eq 0 ] || tail -3 "$log"
  return "$rc"
}
grep PRETTY_NAME /etc/os-release; ldd --version | head -1
bundle=/tmp/hone-gpu
rm -rf "$bundle" && mkdir -p "$bundle" && tar -C "$bundle" -xzf .gpu/bundle.tar.gz || exit 1
source_dir=$(cat "$bundle/source_dir")
if [ ! -e "$source_dir/tests/reference" ]; then
  mkdir -p "$(dirname "$source_dir")" && ln -sfn "$PWD" "$source_dir"
fi
[ -e "$source_dir/tests/reference" ] || echo "warning: no reference files at $source_dir/tests/reference"
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
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# #8's MFU goals count against the datasheet's dense bf16 peak (PaLM's convention).
case "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" in
  *H100*PCIe*) peak=756 ;;
  *H100*NVL*) peak=835 ;;
  *H100* | *H200*) peak=989 ;;
  *A100*) peak=312 ;;
  *) peak="" ;;
esac
peak_flag=${peak:+--peak-tflops $peak}
# Stages (HONE_GPU_STAGES, default "tests curve bench lora8b"): tests, curve
# (200 quickstart steps against the CPU's loss curve), bench (GPT-2 124M,
# Llama 3.2 1B, attention), lora8b (the 8B memory goal), sanitize
# (test_cuda_ops under compute-sanitizer's memcheck and racecheck, where the
# machine has it). A session has 15 minutes of device time, the machine's
# start included: one call of all four, in order of what they tell; a stage
# the call's time did not reach says so, for a second call if time is left.
stages=" ${HONE_GPU_STAGES:-tests curve bench lora8b} "
status=0
# A device fault (an illegal address, a kernel that brought the process down)
# fails every later test of its process, and CUDA reports it at a later call
# than the kernel's; a hang leaves the later tests unrun. After either (an
# exit status other than gtest's 0 and 1, or a fault in the log), the tests
# that did not pass run again, one process each with synchronous launches (a
# fault then named at its kernel), for at most SECONDS in all.
rerun_alone_after_fault() {  # rerun_alone_after_fault BINARY LOG EXIT_STATUS SECONDS
  local binary=$1 log=$2 rc=$3 until=$((SECONDS + $4)) suite name
  local faults='cudaError(IllegalAddress|LaunchFailure|MisalignedAddress|IllegalInstruction|HardwareStackError|Assert)'
  [ "$until" -gt $((budget - 10)) ] && until=$((budget - 10))  # the call's own limit first
  [ -s "$log" ] || return 0                                    # skipped: it never ran
  if [ "$rc" -le 1 ] && ! grep -qE "$faults" "$log"; then return 0; fi
  echo "$(basename "$binary"): a device fault, crash or hang (exit $rc); the tests that did not pass, one process each:"
  "$binary" --gtest_list_tests | while IFS= read -r line; do
    line=${line%%#*} line=${line%"${line##*[! ]}"}
    if [[ $line != " "* ]]; then suite=$line; continue; fi
    name="$suite${line##* }"
    grep -qF "[       OK ] $name " "$log" && continue
    [ "$SECONDS" -ge "$until" ] && { echo "  (no time left for $name and after)"; break; }
    echo "  $name"
    CUDA_LAUNCH_BLOCKING=1 bounded 30 "${log%.log}_alone.log" "$binary" --gtest_filter="$name"
  done
}
if [[ $stages == *" tests "* ]]; then
  for test in test_cuda_ops:240 test_cuda_models:150; do
    limit=${test#*:} test=${test%:*}
    bounded "$limit" "$logs/$test.log" "$bundle/bin/$test" --gtest_output="xml:$logs/$test.xml" "$@"
    rc=$?
    [ "$rc" -eq 0 ] || status=1
    grep -E '^\[  (FAILED|SKIPPED) |relative error|Failure|Expected|Which is|^\[  PASSED|^\[==========\]|^hone: ' \
      "$logs/$test.log"
    rerun_alone_after_fault "$bundle/bin/$test" "$logs/$test.log" "$rc" 90
  done
  # The products again against the CPU: with tuned algorithms (HONE_CUBLASLT_TUNE),
  # and with GELU's kernels after products that fuse the bias alone.
  for mode in "HONE_CUBLASLT_TUNE=on" "HONE_CUBLASLT_EPILOGUES=bias"; do
    log="$logs/test_cuda_ops_$(echo "${mode#HONE_CUBLASLT_}" | tr 'A-Z=' 'a-z_').log"
    bounded 60 "$log" env "$mode" "$bundle/bin/test_cuda_ops" --gtest_filter='*Matmul*:*Linear*' || status=1
    grep -E '^\[  FAILED |^\[  PASSED|^hone: ' "$log"
  done
  # Where cuDNN refused hone's attention graphs, its own log says which operation and why.
  if grep -q "^hone: cuDNN" "$logs"/test_cuda_*.log; then
    CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$logs/cudnn.log" bounded 60 "$logs/cudnn_rerun.log" \
      "$bundle/bin/test_cuda_ops" --gtest_filter='*Cudnn*'
    truncate -s '<15M' "$logs/cudnn.log"
    grep -m 20 -E 'Reason|No viable' "$logs/cudnn.log"
  fi
  # #7's NCCL backend, a world of one (the lent machines have one GPU; two ranks need two).
  HONE_DIST_TIMEOUT=60 bounded 90 "$logs/nccl_collectives.log" "$bundle/bin/nccl_collectives" \
    --gtest_output="xml:$logs/nccl_collectives.xml" || status=1
  grep -E '^\[  (FAILED|SKIPPED) |Failure|^\[  PASSED|^\[==========\]' "$logs/nccl_collectives.log"
  pack
fi
if [[ $stages == *" curve "* ]]; then
  # #8's end-to-end check: the quickstart's first 200 pretraining steps on the
  # GPU follow the CPU's loss curve (run by bundle.sh), within 1.5%.
  curve="$bundle/curve" run_dir=/tmp/hone-curve
  rm -rf "$run_dir"
  bounded 120 "$logs/curve.log" "$bundle/bin/hone" run pretrain --config quickstart max_steps=200 device=cuda \
    "output_dir=$run_dir" "dataset.path=$curve/sotu_text_document" "tokenizer.path=$curve/gpt2-hf" &&
    bounded 20 "$logs/curve_compare.log" python3 tests/gpu/compare_curves.py "$curve/cpu_metrics.jsonl" \
      "$run_dir/metrics.jsonl" || status=1
  [ -f "$logs/curve_compare.log" ] && cat "$logs/curve_compare.log"
  cp "$run_dir/metrics.jsonl" "$logs/curve_cuda_metrics.jsonl" 2>/dev/null
  pack
fi
if [[ $stages == *" bench "* ]]; then
  # End to end: the trainer's step on the GPU.
  bounded 90 "$logs/bench_gpt2.log" "$bundle/bin/hone" bench --model gpt2_124M --batch-size 8 --seq-len 1024 \
    --dtype bf16 --steps 5 --device cuda $peak_flag && tail -1 "$logs/bench_gpt2.log"
  # The same with each product's algorithm the fastest of cuBLASLt's best 8,
  # timed; with the biases alone fused (GELU's kernels after the products); both.
  for modes in "on on" "bias off" "bias on"; do
    read -r epilogues tune <<<"$modes"
    log="$logs/bench_gpt2_epilogues_${epilogues}_tune_$tune.log"
    bounded 90 "$log" env HONE_CUBLASLT_EPILOGUES="$epilogues" HONE_CUBLASLT_TUNE="$tune" "$bundle/bin/hone" bench \
      --model gpt2_124M --batch-size 8 --seq-len 1024 --dtype bf16 --steps 5 --device cuda $peak_flag &&
      echo "  (epilogues $epilogues, tuning $tune) $(tail -1 "$log")"
  done
  # #8's GPT-2 goal names the sequence (1024), not the batch: 8 sequences are
  # 8192 rows, which leave the products' tiles a wave and a half of an H100's
  # SMs (N = 768); llm.c trains this model with 64 a step. Larger batches:
  for batch in 16 32; do
    log="$logs/bench_gpt2_batch_$batch.log"
    bounded 90 "$log" "$bundle/bin/hone" bench --model gpt2_124M --batch-size "$batch" --seq-len 1024 \
      --dtype bf16 --steps 5 --device cuda $peak_flag && echo "  (batch $batch) $(tail -1 "$log")"
  done
  # #8's MFU goal for the Llama 3.2 1B shape at seq 2048.
  bounded 120 "$logs/bench_llama_1b.log" "$bundle/bin/hone" bench --model llama3_2_1B --batch-size 4 --seq-len 2048 \
    --dtype bf16 --steps 5 --device cuda $peak_flag && tail -1 "$logs/bench_llama_1b.log"
  # Where the steps go: each op, and each of its matrix products by shape, timed
  # between events queued with its work (the device is not stopped).
  for shape in "gpt2_124M 8 1024" "llama3_2_1B 4 2048"; do
    read -r model batch seq <<<"$shape"
    HONE_PROFILE=products bounded 90 "$logs/profile_$model.log" "$bundle/bin/hone" bench --model "$model" \
      --batch-size "$batch" --seq-len "$seq" --dtype bf16 --steps 2 --device cuda
    sed -n '/hone profile/,$p' "$logs/profile_$model.log" | head -60
  done
  # Each linear layer's products alone (the output head with packed and padded
  # rows; GPT-2's biases and GELU epilogues), GPT-2's also with tuned algorithms.
  for shape in "gpt2_124M on off" "gpt2_124M on on" "gpt2_124M bias off" "llama3_2_1B on off"; do
    read -r model epilogues tune <<<"$shape"
    log="$logs/bench_linear_${model}_epilogues_${epilogues}_tune_$tune.log"
    bounded 60 "$log" env HONE_CUBLASLT_EPILOGUES="$epilogues" HONE_CUBLASLT_TUNE="$tune" \
      "$bundle/bin/bench_linear" --model "$model" --rows 8192 --device cuda &&
      echo "(epilogues $epilogues, tuning $tune)" && cat "$log"
  done
  # Attention alone: cuDNN's fused kernels (the default) and hone's own.
  for kernels in cudnn hone; do
    for head_dim in 128 64; do
      HONE_CUDA_ATTENTION=$kernels bounded 45 "$logs/bench_attention.log" "$bundle/bin/bench_attention" \
        --device cuda --batch 4 --seq 4096 --heads $((2048 / head_dim)) --kv-heads $((2048 / head_dim)) \
        --head-dim "$head_dim" && echo "  ($kernels, head size $head_dim) $(tail -1 "$logs/bench_attention.log")"
    done
  done
  pack
fi
if [[ $stages == *" sanitize "* ]]; then
  # Out-of-bounds or misaligned accesses (memcheck), then shared-memory races
  # (racecheck), in hone's kernels: its own attention kernels, not cuDNN's; not
  # the test that runs out of memory on purpose (memcheck reports the failed
  # cudaMalloc as an error).
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [ -z "$sanitizer" ]; then
    echo "compute-sanitizer: not found on this machine"
  else
    for tool in memcheck racecheck; do
      HONE_CUDA_ATTENTION=hone bounded 240 "$logs/sanitize_$tool.log" "$sanitizer" --tool "$tool" --error-exitcode 3 \
        "$bundle/bin/test_cuda_ops" --gtest_filter='-*Cudnn*:Cuda.ErrorsNameTheCallAndTheProblem' || status=1
      grep -m 20 -E 'ERROR SUMMARY|RACECHECK SUMMARY|Invalid|hazard|misaligned|^\[  FAILED' "$logs/sanitize_$tool.log"
    done
  fi
  pack
fi
if [[ $stages == *" lora8b "* ]]; then
  # #8's LoRA memory goal (<= 16.0 GiB): Llama 3.1 8B at 2 x 2048, inputs offloaded to the host.
  bounded 420 "$logs/bench_lora_8b.log" "$bundle/bin/hone" bench --model llama3_1_8B --batch-size 2 \
    --seq-len 2048 --dtype bf16 --steps 3 --lora-rank 8 --activation-checkpointing --activation-offloading \
    --device cuda && tail -1 "$logs/bench_lora_8b.log"
  pack
fi
exit "$status"
