#!/usr/bin/env bash
# The README's second walkthrough: LoRA-fine-tune the quickstart's model to write
# one-line summaries of Debian package descriptions, then summarize five
# descriptions it never saw. Runs the quickstart first when its model is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f runs/quickstart/latest ] || bash scripts/quickstart.sh
cache="$(bash scripts/fetch-assets.sh | tail -n 1)"
hone=build/bin/hone

/usr/bin/python3 scripts/make-summaries.py "$cache/summaries"
$hone run lora_finetune --config summarize_lora "dataset.path=$cache/summaries/train.jsonl" \
  "tokenizer.path=$cache/tokenizers/gpt2"

head -n 5 "$cache/summaries/heldout.txt" > "$cache/summaries/demo_prompts.txt"
echo
echo "Summaries of five held-out descriptions:"
$hone run generate checkpoint.path=runs/quickstart lora.adapter=runs/summarize_lora \
  "tokenizer.path=$cache/tokenizers/gpt2" "prompts_file=$cache/summaries/demo_prompts.txt" template=summarize \
  temperature=0 max_new_tokens=24
echo "The packages' own summaries:"
/usr/bin/python3 -c "
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    if i == 5:
        break
    print('[%d] %s' % (i, json.loads(line)['summary']))
" "$cache/summaries/heldout.jsonl"
