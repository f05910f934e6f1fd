#!/usr/bin/env bash
# The quickstart's data: fetches GPT-2's tokenizer and the State of the Union
# speeches (scripts/fetch-assets.sh) and tokenizes them into the Megatron
# dataset <cache>/quickstart/sotu_text_document. Takes hone's binary (default
# build/bin/hone); prints the cache directory on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
hone=${1:-build/bin/hone}
cache="$(bash scripts/fetch-assets.sh | tail -n 1)"
"$hone" preprocess --input "$cache/corpora/sotu" --output-prefix "$cache/quickstart/sotu" --json-keys text \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$cache/tokenizers/gpt2/encoder.json" \
  --merge-file "$cache/tokenizers/gpt2/vocab.bpe" --append-eod --workers 2 >&2
echo "$cache"
