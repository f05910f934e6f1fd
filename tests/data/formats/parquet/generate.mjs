// Writes the Parquet fixtures of tests/data/formats/test_parquet.cpp with the
// Rust parquet writer (npm parquet-wasm@0.8.0 and apache-arrow@21.2.0), and the
// rows each must read back as, in expected.json:
//   npm install parquet-wasm@0.8.0 apache-arrow@21.2.0 && node generate.mjs
// Run from this folder; the files are committed, so the tests need neither.
import * as arrow from "apache-arrow";
import * as pq from "parquet-wasm";
import { writeFileSync } from "node:fs";

// Records of an instruct dataset: strings (with nulls and repeats, so
// dictionaries form), integers, floats and booleans.
const words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"];
const records = [];
for (let i = 0; i < 300; i++) {
  records.push({
    instruction: `Say ${words[i % 8]} ${i % 3 === 0 ? "twice" : "once"}.`,
    input: i % 5 === 0 ? null : `context ${i % 7} \u00e9\u4e16`,
    output: `${words[i % 8]} `.repeat(1 + (i % 4)).trim() + (i % 11 === 0 ? "\n" + "long ".repeat(40) : ""),
    id: BigInt(i * 1000003),
    score: i / 8,
    small: i % 13 === 0 ? null : (i % 200) - 100,
    flag: i % 3 === 1,
  });
}
const flat = arrow.tableFromArrays({
  instruction: arrow.vectorFromArray(records.map((r) => r.instruction), new arrow.Utf8()),
  input: arrow.vectorFromArray(records.map((r) => r.input), new arrow.Utf8()),
  output: arrow.vectorFromArray(records.map((r) => r.output), new arrow.Utf8()),
  id: arrow.vectorFromArray(records.map((r) => r.id), new arrow.Int64()),
  score: arrow.vectorFromArray(records.map((r) => r.score), new arrow.Float64()),
  small: arrow.vectorFromArray(records.map((r) => r.small), new arrow.Int32()),
  flag: arrow.vectorFromArray(records.map((r) => r.flag), new arrow.Bool()),
});

// Chats: a list of {role, content} structs (Hugging Face's `messages`), with
// empty and null lists, a list of integers, a struct, and a list of lists.
const Message = new arrow.Struct([
  new arrow.Field("role", new arrow.Utf8(), true),
  new arrow.Field("content", new arrow.Utf8(), true),
]);
const Meta = new arrow.Struct([
  new arrow.Field("source", new arrow.Utf8(), true),
  new arrow.Field("turns", new arrow.Int32(), true),
]);
const chats = [];
for (let i = 0; i < 120; i++) {
  const turns = i % 10 === 9 ? 0 : 1 + (i % 4);
  const messages = [];
  for (let t = 0; t < turns; t++) {
    messages.push({ role: t % 2 === 0 ? "user" : "assistant", content: t === 2 && i % 3 === 0 ? null : `turn ${t} of chat ${i}` });
  }
  chats.push({
    messages: i % 17 === 16 ? null : messages,
    tags: i % 6 === 0 ? null : Array.from({ length: i % 4 }, (_, k) => (k === 1 && i % 5 === 0 ? null : i * 10 + k)),
    meta: i % 7 === 0 ? null : { source: `src${i % 3}`, turns: i % 9 === 0 ? null : turns },
    // Lists of lists: null, empty and null inner lists, null elements.
    grid: i % 5 === 0 ? null : [[i, i + 1], i % 3 === 0 ? [] : [i + 2], i % 4 === 0 ? null : [null, i]],
  });
}
const nested = arrow.tableFromArrays({
  messages: arrow.vectorFromArray(chats.map((c) => c.messages), new arrow.List(new arrow.Field("item", Message, true))),
  tags: arrow.vectorFromArray(chats.map((c) => c.tags), new arrow.List(new arrow.Field("item", new arrow.Int32(), true))),
  meta: arrow.vectorFromArray(chats.map((c) => c.meta), Meta),
  grid: arrow.vectorFromArray(chats.map((c) => c.grid),
    new arrow.List(new arrow.Field("item", new arrow.List(new arrow.Field("item", new arrow.Int32(), true)), true))),
});

// A multiple-choice task as Hugging Face's HellaSwag ships it: labels are strings.
const tasks = Array.from({ length: 20 }, (_, i) => ({
  ctx: `Context ${i} of the task`,
  endings: ["a", "b", "c", "d"].map((x) => ` ending ${x}${i}`),
  label: String(i % 4),
}));
const hellaswag = arrow.tableFromArrays({
  ctx: arrow.vectorFromArray(tasks.map((t) => t.ctx), new arrow.Utf8()),
  endings: arrow.vectorFromArray(tasks.map((t) => t.endings), new arrow.List(new arrow.Field("item", new arrow.Utf8(), true))),
  label: arrow.vectorFromArray(tasks.map((t) => t.label), new arrow.Utf8()),
});

// Hugging Face's ARC (choices a struct of two lists, answerKey a letter or digit)
// and MMLU (choices a list, answer an integer).
const arc = Array.from({ length: 6 }, (_, i) => ({
  question: `Which of these is item ${i}?`,
  choices: { text: ["red", "green", "blue", "gold"].slice(0, 3 + (i % 2)).map((c) => `${c} ${i}`),
             label: (i === 5 ? ["1", "2", "3", "4"] : ["A", "B", "C", "D"]).slice(0, 3 + (i % 2)) },
  answerKey: i === 5 ? "2" : "ABC"[i % 3],
}));
const arcTable = arrow.tableFromArrays({
  question: arrow.vectorFromArray(arc.map((r) => r.question), new arrow.Utf8()),
  choices: arrow.vectorFromArray(arc.map((r) => r.choices), new arrow.Struct([
    new arrow.Field("text", new arrow.List(new arrow.Field("item", new arrow.Utf8(), true)), true),
    new arrow.Field("label", new arrow.List(new arrow.Field("item", new arrow.Utf8(), true)), true),
  ])),
  answerKey: arrow.vectorFromArray(arc.map((r) => r.answerKey), new arrow.Utf8()),
});
const mmlu = Array.from({ length: 6 }, (_, i) => ({
  question: ` What is ${i} + ${i}? `,
  subject: i % 2 ? "high_school_mathematics" : "astronomy",
  choices: [0, 1, 2, 3].map((k) => String(2 * i + k - 1)),
  answer: BigInt(1),
}));
const mmluTable = arrow.tableFromArrays({
  question: arrow.vectorFromArray(mmlu.map((r) => r.question), new arrow.Utf8()),
  subject: arrow.vectorFromArray(mmlu.map((r) => r.subject), new arrow.Utf8()),
  choices: arrow.vectorFromArray(mmlu.map((r) => r.choices), new arrow.List(new arrow.Field("item", new arrow.Utf8(), true))),
  answer: arrow.vectorFromArray(mmlu.map((r) => r.answer), new arrow.Int64()),
});

function write(name, table, configure) {
  let props = new pq.WriterPropertiesBuilder().setMaxRowGroupSize(128).setDataPageSizeLimit(512);
  props = configure(props);
  const bytes = pq.writeParquet(pq.Table.fromIPCStream(arrow.tableToIPC(table, "stream")), props.build());
  writeFileSync(name, bytes);
}
// pyarrow's defaults (dictionaries, v1 pages, snappy), then the other codecs, page
// versions and encodings hone reads.
write("snappy_v1.parquet", flat, (p) => p.setCompression(pq.Compression.SNAPPY));
write("zstd_v2.parquet", flat, (p) => p.setCompression(pq.Compression.ZSTD).setWriterVersion(pq.WriterVersion.V2));
write("gzip_plain.parquet", flat, (p) => p.setCompression(pq.Compression.GZIP).setDictionaryEnabled(false));
write("delta_v2.parquet", flat, (p) =>
  p.setCompression(pq.Compression.UNCOMPRESSED).setWriterVersion(pq.WriterVersion.V2).setDictionaryEnabled(false)
    .setColumnEncoding("instruction", pq.Encoding.DELTA_BYTE_ARRAY)
    .setColumnEncoding("output", pq.Encoding.DELTA_LENGTH_BYTE_ARRAY)
    .setColumnEncoding("id", pq.Encoding.DELTA_BINARY_PACKED)
    .setColumnEncoding("small", pq.Encoding.DELTA_BINARY_PACKED));
write("chats.parquet", nested, (p) => p.setCompression(pq.Compression.SNAPPY));
write("lz4.parquet", flat, (p) => p.setCompression(pq.Compression.LZ4_RAW));
write("hellaswag.parquet", hellaswag, (p) => p.setCompression(pq.Compression.SNAPPY));
write("arc.parquet", arcTable, (p) => p.setCompression(pq.Compression.SNAPPY));
write("mmlu.parquet", mmluTable, (p) => p.setCompression(pq.Compression.SNAPPY));

const drop = (o) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null));
const json = (v) => JSON.parse(JSON.stringify(v, (_, x) => (typeof x === "bigint" ? Number(x) : x)));
writeFileSync("expected.json", JSON.stringify({
  records: json(records.map(drop)),
  tasks,
  arc,
  mmlu: json(mmlu),
  chats: json(chats.map((c) => drop({
    messages: c.messages && c.messages.map(drop),
    tags: c.tags,
    meta: c.meta && drop(c.meta),
    grid: c.grid,
  }))),
}, null, 0) + "\n");

// Seeds of the fuzz target (tests/data/formats/fuzz/fuzz_parquet.cpp): a few rows
// each, under its 4096-byte inputs.
const seeds = "../fuzz/seeds/parquet/";
const few = (table, n) => table.slice(0, n);
write(seeds + "snappy_v1.parquet", few(flat, 6), (p) => p.setCompression(pq.Compression.SNAPPY));
write(seeds + "zstd_v2.parquet", few(flat, 6), (p) => p.setCompression(pq.Compression.ZSTD).setWriterVersion(pq.WriterVersion.V2));
write(seeds + "delta_v2.parquet", few(flat, 6), (p) =>
  p.setWriterVersion(pq.WriterVersion.V2).setDictionaryEnabled(false)
    .setColumnEncoding("instruction", pq.Encoding.DELTA_BYTE_ARRAY)
    .setColumnEncoding("output", pq.Encoding.DELTA_LENGTH_BYTE_ARRAY)
    .setColumnEncoding("id", pq.Encoding.DELTA_BINARY_PACKED));
write(seeds + "chats.parquet", few(nested, 12), (p) => p);
write(seeds + "arc.parquet", arcTable, (p) => p);
