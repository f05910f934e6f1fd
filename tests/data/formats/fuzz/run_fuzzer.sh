#!/bin/sh
# Runs one libFuzzer target for a few seconds, starting from its seed corpus.
# New inputs go to WORK_DIR/corpus, crashing ones to WORK_DIR/crashes/ (rerun a
# crash with: FUZZER WORK_DIR/crashes/crash-...). A dictionary SEED_DIR.dict is used when present.
# Usage: run_fuzzer.sh FUZZER SEED_DIR WORK_DIR SECONDS
set -eu
fuzzer=$1 seeds=$2 work=$3 seconds=$4
rm -rf "$work"
mkdir -p "$work/corpus" "$work/crashes"
set -- -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$work/crashes/"
[ -f "$seeds.dict" ] && set -- "$@" -dict="$seeds.dict"
exec "$fuzzer" "$@" "$work/corpus" "$seeds"
