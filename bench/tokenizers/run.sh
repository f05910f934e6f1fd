#!/usr/bin/env bash
# Tokenizer throughput, one core: hone and npm tiktoken on the SOTU corpus, each
# speech encoded as one document, GPT-2 and Llama 3 tokenizers, in the same run.
#   bash bench/tokenizers/run.sh [BUILD_DIR] [RUNS]
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$repo/build}"
runs="${2:-5}"
cache="$(bash "$repo/scripts/fetch-assets.sh" | tail -1)"
corpus="$cache/corpora/sotu"
tok="$cache/tokenizers"
pin="taskset -c 0"  # one core for both
command -v taskset >/dev/null || pin=""
$pin "$build/bin/bench_tokenizers" --tokenizer "$tok/gpt2" --name "gpt2 (encoder.json + vocab.bpe)" --corpus "$corpus" --runs "$runs"
$pin node "$repo/bench/tokenizers/tiktoken_bench.cjs" "$cache" gpt2 "$corpus" "$runs"
$pin "$build/bin/bench_tokenizers" --tokenizer "$tok/llama3/tokenizer.json" --name "llama3 (tokenizer.json)" --corpus "$corpus" --runs "$runs"
$pin "$build/bin/bench_tokenizers" --tokenizer "$tok/llama3/tokenizer.model" --name "llama3 (tokenizer.model)" --corpus "$corpus" --runs "$runs"
$pin node "$repo/bench/tokenizers/tiktoken_bench.cjs" "$cache" llama3 "$corpus" "$runs"
