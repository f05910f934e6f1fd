#!/usr/bin/env bash
# The CPU training-speed comparison of docs/benchmarks.md: hone bench against
# PyTorch (Debian's python3-torch, the same model shapes, AdamW and clipping) in
# one run, alternating the two so that both see the same machine state.
#
#   bash bench/compare_cpu.sh [STEPS] [THREADS]
# Needs build/bin/hone and /usr/bin/python3 with torch (apt-get install python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-10}"
threads="${2:-2}"
hone=build/bin/hone
torch="/usr/bin/python3 bench/pytorch/train_step.py"

run() {  # impl model batch seq dtype extra...
  local impl="$1" model="$2" batch="$3" seq="$4" dtype="$5"
  shift 5
  if [ "$impl" = hone ]; then
    $hone bench --model "$model" --batch-size "$batch" --seq-len "$seq" --dtype "$dtype" --steps "$steps" \
      --threads "$threads" "$@" 2>/dev/null | tail -n 1
  else
    $torch --model "$model" --batch-size "$batch" --seq-len "$seq" --dtype "$dtype" --steps "$steps" \
      --threads "$threads" | tail -n 1
  fi
}

printf '%-12s %-6s %-10s %14s %14s %8s %7s\n' model dtype shape "hone tok/s" "torch tok/s" ratio "hone MFU"
for case in "llama_125M 4 256 fp32" "llama_125M 4 256 bf16" "gpt2_124M 4 64 fp32"; do
  read -r model batch seq dtype <<<"$case"
  h="$(run hone "$model" "$batch" "$seq" "$dtype")"
  t="$(run torch "$model" "$batch" "$seq" "$dtype")"
  /usr/bin/python3 -c "
import json, sys
h, t = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print('%-12s %-6s %-10s %14.0f %14.0f %7.2fx %6.1f%%' % (h['model'], h['dtype'], '%dx%d' % (h['batch_size'], h['seq_len']),
      h['tokens_per_sec'], t['tokens_per_sec'], h['tokens_per_sec'] / t['tokens_per_sec'], 100 * h['mfu']))
" "$h" "$t"
done
