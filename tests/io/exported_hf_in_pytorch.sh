#!/usr/bin/env bash
# Every model fixture, exported by `hone convert --to hf`, loaded by the PyTorch
# implementation of tests/reference/generate_hf.py (written from transformers'
# conventions, independently of hone): its logits must be the source's.
# Skipped (77) where /usr/bin/python3 has no torch (CI); runs where
# python3-torch is installed.
#   exported_hf_in_pytorch.sh HONE_BINARY SOURCE_DIR
set -euo pipefail
hone="$1"
reference="$2/tests/reference"
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "SKIPPED: /usr/bin/python3 has no torch (apt-get install python3-torch)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for fixture in gpt2 llama31_sharded llama32_tied_bf16 llama2_mha_f16 mistral_f16 mpt_bf16 gpt2_pickle \
               llama2_pickle_bf16 llmc_gpt2_fp32.bin llmc_gpt2_bf16.bin llama2c_legacy.bin llama2c_v1.bin \
               meta_llama32_tied meta_llama2 nanogpt_bias.pt nanogpt_compiled.pt; do
  name=${fixture%.bin}
  name=${name%.pt}
  "$hone" convert "$reference/hf/$fixture" "$work/$name" --to hf --dtype fp32 >/dev/null
  /usr/bin/python3 "$reference/generate_hf.py" --check "$work/$name" "$reference/hf/$name.reference.safetensors"
done
