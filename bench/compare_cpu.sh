#!/usr/bin/env bash
# The CPU training-speed comparison of docs/benchmarks.md: hone bench against
# PyTorch (Debian's python3-torch, the same model shapes, AdamW and clipping).
# A shared host moves whole-step times by tens of percent within minutes, so
# the two run in pairs, one right after the other (which goes first alternates
# by round), and the summary gives the median of the pairs' ratios.
#
#   bash bench/compare_cpu.sh [STEPS] [THREADS] [ROUNDS]
# Needs build/bin/hone and /usr/bin/python3 with torch (apt-get install python3-torch).
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-10}"
threads="${2:-2}"
rounds="${3:-3}"
hone=build/bin/hone
torch="/usr/bin/python3 bench/pytorch/train_step.py"
cases=("llama_125M 4 256 fp32" "llama_125M 4 256 bf16" "gpt2_124M 4 64 fp32")

run() {  # impl model batch seq dtype: prints one JSON line
  local impl="$1" model="$2" batch="$3" seq="$4" dtype="$5"
  local args=(--model "$model" --batch-size "$batch" --seq-len "$seq" --dtype "$dtype" --steps "$steps" --threads "$threads")
  if [ "$impl" = hone ]; then
    $hone bench "${args[@]}" 2>/dev/null | tail -n 1
  else
    $torch "${args[@]}" | tail -n 1
  fi
}

# Time the host gave to other guests (steal), in jiffies, from /proc/stat.
steal() { awk '/^cpu /{print $9}' /proc/stat; }

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
steal_start="$(steal)"
start="$(date +%s)"
for ((round = 1; round <= rounds; ++round)); do
  for case in "${cases[@]}"; do
    read -r model batch seq dtype <<<"$case"
    if ((round % 2)); then
      h="$(run hone "$model" "$batch" "$seq" "$dtype")"; t="$(run torch "$model" "$batch" "$seq" "$dtype")"
    else
      t="$(run torch "$model" "$batch" "$seq" "$dtype")"; h="$(run hone "$model" "$batch" "$seq" "$dtype")"
    fi
    printf '%s\t%s\t%s\n' "$round" "$h" "$t" >>"$results"
  done
done
elapsed=$(($(date +%s) - start))
steal_pct="$(awk -v s="$(($(steal) - steal_start))" -v e="$elapsed" -v n="$(nproc)" \
  -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (e > 0 ? 100 * s / (hz * e * n) : 0) }')"

/usr/bin/python3 - "$results" "$steal_pct" <<'PY'
import json, statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
print("%-5s %-12s %-6s %-8s %12s %12s %7s %8s" % ("round", "model", "dtype", "shape", "hone tok/s", "torch tok/s",
                                                   "ratio", "hone MFU"))
cases = {}
for r, h, t in rows:
    h, t = json.loads(h), json.loads(t)
    key = (h["model"], h["dtype"], "%dx%d" % (h["batch_size"], h["seq_len"]))
    ratio = h["tokens_per_sec"] / t["tokens_per_sec"]
    cases.setdefault(key, []).append((h["tokens_per_sec"], t["tokens_per_sec"], ratio, h["mfu"]))
    print("%-5s %-12s %-6s %-8s %12.0f %12.0f %6.2fx %7.1f%%" % (r, *key, h["tokens_per_sec"], t["tokens_per_sec"],
                                                               ratio, 100 * h["mfu"]))
print("\nmedian over rounds (ratio: median of the rounds' ratios, range in brackets); steal time %s%%" % sys.argv[2])
for key, runs in cases.items():
    med = [statistics.median(column) for column in zip(*runs)]
    ratios = [run[2] for run in runs]
    print("      %-12s %-6s %-8s %12.0f %12.0f %6.2fx %7.1f%%  [%.2fx-%.2fx]" % (*key, med[0], med[1], med[2],
                                                                               100 * med[3], min(ratios), max(ratios)))
PY
