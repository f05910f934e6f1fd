// The summarization pairs (scripts/make-summaries.py) as one Snappy Parquet file,
// as Hugging Face datasets ship them, for the preprocess figures of
// docs/benchmarks.md ("Parquet input"). Node finds the packages beside the
// script, so copy it into a folder where they are installed:
//   mkdir /tmp/pq && cp bench/parquet/summaries.mjs /tmp/pq && cd /tmp/pq
//   npm install parquet-wasm@0.8.0 apache-arrow@21.2.0
//   node summaries.mjs HONE/.assets/summaries/train.jsonl /tmp/summaries.parquet
import * as arrow from "apache-arrow";
import * as pq from "parquet-wasm";
import { readFileSync, writeFileSync } from "node:fs";
const lines = readFileSync(process.argv[2], "utf8").trim().split("\n").map(JSON.parse);
const t = arrow.tableFromArrays({
  description: arrow.vectorFromArray(lines.map(r => r.description), new arrow.Utf8()),
  summary: arrow.vectorFromArray(lines.map(r => r.summary), new arrow.Utf8()),
});
const props = new pq.WriterPropertiesBuilder().setCompression(pq.Compression.SNAPPY).build();
writeFileSync(process.argv[3], pq.writeParquet(pq.Table.fromIPCStream(arrow.tableToIPC(t, "stream")), props));
console.log(lines.length);
