// Writes the reference token ids the tokenizer tests compare against, one JSON
// file per tokenizer, from the reference implementations:
//   - npm `tiktoken` (OpenAI's Rust tiktoken compiled to WASM): gpt2, cl100k_base,
//     o200k_base, and Llama 3's tokenizer.model with Meta's pattern and specials;
//   - npm `@lenml/tokenizers` (transformers.js): the tokenizer.json files;
//   - `spm_encode` (Debian sentencepiece): the SentencePiece model, line by line.
//
//   bash scripts/fetch-assets.sh && node tests/data/tokenizers/reference/generate.mjs
//
// The texts: samples of the SOTU speeches and the fortunes (byte ranges of the
// cached files, recorded so the tests cut the same text), stress.txt,
// stress_whitespace.txt (tiktoken only: JavaScript's \s differs there), and a
// short text with special tokens. Every whole SOTU speech and fortunes file is
// also checked, through a count and an FNV-1a hash of its ids.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../../../..");
const cache = process.env.HONE_CACHE ?? path.join(repo, ".assets");
const { get_encoding, Tiktoken } = require(path.join(cache, "npm/tiktoken-1.0.22/package/tiktoken.cjs"));
const { TokenizerLoader } = require(path.join(cache, "npm/@lenml_tokenizers-3.7.2/package/dist/main.js"));

const decoder = new TextDecoder("utf-8"); // invalid UTF-8 -> U+FFFD, as hone does
const readText = (file) => decoder.decode(fs.readFileSync(file));

// ---- texts ----
const corpusFiles = (dir) =>
  fs.readdirSync(path.join(cache, "corpora", dir)).filter((f) => !f.startsWith(".")).sort().map((f) => `${dir}/${f}`);
const sotuFiles = corpusFiles("sotu");
const fortuneFiles = corpusFiles("fortunes");
const bytesOf = (rel) => fs.readFileSync(path.join(cache, "corpora", rel));

// A range ending and starting at ASCII spaces or newlines, so never inside a character.
function sotuRange(rel) {
  const b = bytesOf(rel);
  const offset = b.indexOf(0x20, Math.floor(b.length / 3)) + 1;
  const end = b.lastIndexOf(0x20, Math.min(b.length - 1, offset + 1000));
  return { file: rel, offset, length: end - offset };
}
// The 4th fortune of a file (or its last), from one "%\n" separator to the next.
function fortuneRange(rel) {
  const b = bytesOf(rel);
  const seps = [0];
  for (let i = b.indexOf("\n%\n"); i >= 0; i = b.indexOf("\n%\n", i + 1)) seps.push(i + 3);
  seps.push(b.length);
  const first = Math.min(3, seps.length - 2);
  const last = first + 1;
  return { file: rel, offset: seps[first], length: seps[last] - seps[first] };
}
const sample = (ranges) => ({
  ranges,
  text: decoder.decode(Buffer.concat(ranges.map((r) => bytesOf(r.file).subarray(r.offset, r.offset + r.length)))),
});
const samples = {
  sotu_sample: sample(sotuFiles.filter((_, i) => i % 40 === 0).map(sotuRange)),
  fortunes_sample: sample(fortuneFiles.filter((_, i) => i % 3 === 0).map(fortuneRange)),
  stress: { file: "tests/data/tokenizers/stress.txt", text: readText(path.join(here, "../stress.txt")) },
};
const whitespaceStress = {
  file: "tests/data/tokenizers/stress_whitespace.txt",
  text: readText(path.join(here, "../stress_whitespace.txt")),
};
const specialText = (specials) =>
  `Start${specials[0]}middle ${specials.join(" ")}\n${specials[specials.length - 1]}end ${specials[0]}${specials[0]}`;

// ---- hashing: FNV-1a 32 over the ids as little-endian u32 ----
function fnv(ids) {
  let h = 0x811c9dc5;
  for (const id of ids) {
    for (let k = 0; k < 4; k++) {
      h ^= (id >>> (8 * k)) & 0xff;
      h = Math.imul(h, 0x01000193) >>> 0;
    }
  }
  return h.toString(16).padStart(8, "0");
}

// ---- the reference tokenizers ----
function tiktokenRef(enc, specials) {
  return {
    source: "npm tiktoken 1.0.22",
    mode: "as_text",
    encode: (text) => Array.from(enc.encode_ordinary(text)),
    encodeSpecial: (text) => Array.from(enc.encode(text, "all")),
    specials,
  };
}
function lenmlRef(dir, specials) {
  const json = JSON.parse(fs.readFileSync(path.join(cache, "tokenizers", dir, "tokenizer.json"), "utf8"));
  const config = JSON.parse(fs.readFileSync(path.join(cache, "tokenizers", dir, "tokenizer_config.json"), "utf8"));
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
  const encode = (text) => tok.encode(text, { add_special_tokens: false });
  return { source: "npm @lenml/tokenizers 3.7.2", mode: "recognize", encode, encodeSpecial: encode, specials };
}
function spmRef(model) {
  // spm_encode reads one sentence per line: the tests encode line by line too.
  const encode = (text) => {
    const out = execFileSync("spm_encode", [`--model=${model}`, "--output_format=id"], {
      input: Buffer.from(text, "utf8"),
      maxBuffer: 1 << 30,
    }).toString();
    return out.split("\n").filter((l) => l.length > 0).flatMap((l) => l.trim().split(/\s+/).filter((x) => x).map(Number));
  };
  return { source: "spm_encode (Debian sentencepiece 0.1.97)", mode: "as_text_per_line", encode, specials: [] };
}

const llama3Ranks = fs.readFileSync(path.join(cache, "tokenizers/llama3/tokenizer.model"), "utf8");
const llama3Json = JSON.parse(fs.readFileSync(path.join(cache, "tokenizers/llama3/tokenizer.json"), "utf8"));
const llama3Specials = Object.fromEntries(llama3Json.added_tokens.map((t) => [t.content, t.id]));
const llama3Pattern =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// tiktoken's rank-file text with the line format the WASM build parses.
const llama3Enc = new Tiktoken(llama3Ranks, llama3Specials, llama3Pattern);

const refs = {
  gpt2: tiktokenRef(get_encoding("gpt2"), ["<|endoftext|>"]),
  cl100k_base: tiktokenRef(get_encoding("cl100k_base"), ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|endofprompt|>"]),
  o200k_base: tiktokenRef(get_encoding("o200k_base"), ["<|endoftext|>", "<|endofprompt|>"]),
  llama3: tiktokenRef(llama3Enc, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|reserved_special_token_7|>"]),
  "llama3-hf": lenmlRef("llama3", ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>"]),
  mistral: lenmlRef("mistral", ["<s>", "</s>", "<unk>"]),
  qwen3: lenmlRef("qwen3", ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "<|fim_prefix|>"]),
  spm: spmRef(path.join(cache, "tokenizers/spm/sotu.model")),
};

const only = process.argv.slice(2);
for (const [name, ref] of Object.entries(refs)) {
  if (only.length && !only.includes(name)) continue;
  const started = Date.now();
  const out = { tokenizer: name, source: ref.source, mode: ref.mode, texts: {}, corpus: {} };
  const texts = { ...samples };
  if (ref.source.includes("tiktoken")) texts.stress_whitespace = whitespaceStress;
  for (const [key, s] of Object.entries(texts)) {
    const entry = s.ranges ? { ranges: s.ranges } : { file: s.file };
    out.texts[key] = { ...entry, ids: ref.encode(s.text) };
  }
  if (ref.specials.length) {
    const text = specialText(ref.specials);
    out.texts.special = { text, special: true, ids: ref.encodeSpecial(text) };
    if (ref.mode === "as_text") out.texts.special_as_text = { text, ids: ref.encode(text) };
  }
  // libsentencepiece is slow (about 1.5 MB/s) and is itself the reference: a
  // quarter of the speeches is enough to check the wrapper.
  const speeches = ref.mode === "as_text_per_line" ? sotuFiles.filter((_, i) => i % 4 === 0) : sotuFiles;
  for (const rel of [...speeches, ...fortuneFiles]) {
    const ids = ref.encode(decoder.decode(bytesOf(rel)));
    out.corpus[rel] = [ids.length, fnv(ids)];
  }
  // Compact, one text per line, so that the files stay small and diffable.
  const lines = [
    "{",
    ` "tokenizer": ${JSON.stringify(out.tokenizer)}, "source": ${JSON.stringify(out.source)}, "mode": ${JSON.stringify(out.mode)},`,
    ' "texts": {',
    Object.entries(out.texts).map(([k, v]) => `  ${JSON.stringify(k)}: ${JSON.stringify(v)}`).join(",\n"),
    " },",
    ' "corpus": {',
    Object.entries(out.corpus).map(([k, v]) => `  ${JSON.stringify(k)}: ${JSON.stringify(v)}`).join(",\n"),
    " }",
    "}",
  ];
  fs.writeFileSync(path.join(here, `${name}.json`), lines.join("\n") + "\n");
  console.log(`${name}: ${((Date.now() - started) / 1000).toFixed(1)} s`);
}
