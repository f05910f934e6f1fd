// npm tiktoken (OpenAI's Rust tiktoken compiled to WASM) on the same documents,
// timed the same way as bench_tokenizers: each run a fresh encoder, the median.
//   node tiktoken_bench.cjs CACHE gpt2|llama3 CORPUS_DIR RUNS
const fs = require("fs");
const path = require("path");
const [cache, which, corpus, runsArg] = process.argv.slice(2);
const { get_encoding, Tiktoken } = require(path.join(cache, "npm/tiktoken-1.0.22/package/tiktoken.cjs"));
const runs = Number(runsArg ?? 5);
const files = fs.readdirSync(corpus).filter((f) => f.endsWith(".txt")).sort();
const documents = files.map((f) => fs.readFileSync(path.join(corpus, f), "utf8"));
const bytes = files.reduce((n, f) => n + fs.statSync(path.join(corpus, f)).size, 0);

function encoder() {
  if (which === "gpt2") return get_encoding("gpt2");
  // Meta's Llama 3 tokenizer: its rank file, pattern and special tokens.
  const ranks = fs.readFileSync(path.join(cache, "tokenizers/llama3/tokenizer.model"), "utf8");
  const json = JSON.parse(fs.readFileSync(path.join(cache, "tokenizers/llama3/tokenizer.json"), "utf8"));
  const specials = Object.fromEntries(json.added_tokens.map((t) => [t.content, t.id]));
  const pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  return new Tiktoken(ranks, specials, pattern);
}

const seconds = [];
let tokens = 0;
for (let r = 0; r < runs; r++) {
  const enc = encoder();
  tokens = 0;
  const start = process.hrtime.bigint();
  for (const d of documents) tokens += enc.encode_ordinary(d).length;
  seconds.push(Number(process.hrtime.bigint() - start) / 1e9);
  enc.free();
}
seconds.sort((a, b) => a - b);
const median = seconds[Math.floor(seconds.length / 2)];
console.log(JSON.stringify({ implementation: "npm tiktoken 1.0.22", tokenizer: which, documents: documents.length, bytes,
                             tokens, runs, median_s: Number(median.toFixed(4)), mb_per_s: Number((bytes / 1e6 / median).toFixed(2)) }));
