// hone preprocess --input PATH... --output-prefix PREFIX [--json-keys KEY...] --tokenizer-type TYPE
//   (--vocab-file F --merge-file F | --tokenizer-model FILE_OR_DIR) [--append-eod] [--workers N]
//   [--split-sentences [--keep-newlines]] [--format megatron|mds] [--mds-...] [--concat-tokens N [--no-wrap]]
// The flags of Megatron-LM's tools/preprocess_data.py, so existing data scripts run unchanged.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "hone/cli/commands.hpp"
#include "hone/core/progress_line.hpp"
#include "hone/core/error.hpp"
#include "hone/core/stop_signals.hpp"
#include "hone/core/text.hpp"
#include "hone/data/preprocess.hpp"
#include "hone/train/metrics.hpp"

namespace hone::cli {
namespace {

std::string with_commas(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

double per_second(double amount, double seconds) { return seconds > 0 ? amount / seconds : 0.0; }

}  // namespace

Command add_preprocess(CLI::App& app) {
  struct Args {
    std::vector<std::string> inputs, json_keys{"text"}, mds_hashes;
    std::string output_prefix, tokenizer_type, vocab_file, merge_file, tokenizer_model, lang = "english";
    int64_t vocab_size = 0;
    std::string dataset_impl = "mmap", format = "megatron", mds_compression, mds_size_limit = "64mb",
                mds_dtype = "int32";
    bool split_sentences = false, keep_newlines = false, append_eod = false, keep_sequential = false, no_wrap = false,
         no_special_tokens = false, trust_remote_code = false, no_use_fast = false;
    int64_t concat_tokens = 0;
    unsigned workers = std::max(1u, std::thread::hardware_concurrency());
    unsigned partitions = 1;
    uint64_t log_interval = 1000;  // Megatron's
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "preprocess",
      "Tokenize JSONL, Parquet, text or MDS text shards into a Megatron indexed dataset "
      "(PREFIX_KEY_document.bin/.idx) or MDS shards; takes the flags of Megatron-LM's tools/preprocess_data.py");
  sub->add_option("--input", a->inputs,
                  "JSONL files (.jsonl, .json, .ndjson), Parquet files, MDS text shard folders (index.json), text "
                  "files (one document each), folders or glob patterns; gzip and zstd are read as they come")
      ->required();
  sub->add_option("--output-prefix", a->output_prefix,
                  "Megatron: writes PREFIX_KEY_document.bin/.idx; MDS: the folder PREFIX (PREFIX_KEY for several keys)")
      ->required();
  sub->add_option("--json-keys", a->json_keys, "JSON keys to tokenize, one output each")->capture_default_str();
  sub->add_option("--tokenizer-type", a->tokenizer_type,
                  "GPT2BPETokenizer, HuggingFaceTokenizer, Llama2Tokenizer, SentencePieceTokenizer, "
                  "GPTSentencePieceTokenizer, TikTokenizer or NullTokenizer (default: from the tokenizer file)");
  // --vocab: argparse takes any unambiguous prefix, and scripts written for
  // Megatron's preprocess_data.py use this one.
  sub->add_option("--vocab-file,--vocab", a->vocab_file, "GPT2BPETokenizer: encoder.json or vocab.json");
  sub->add_option("--merge-file", a->merge_file, "GPT2BPETokenizer: vocab.bpe or merges.txt");
  sub->add_option("--vocab-size", a->vocab_size, "NullTokenizer: the text holds ids below N; EOD is N");
  sub->add_option("--tokenizer-model", a->tokenizer_model,
                  "The tokenizer file or folder: tokenizer.json, a SentencePiece .model, a tiktoken rank file");
  sub->add_flag("--append-eod", a->append_eod, "End every non-empty document with the EOD token");
  sub->add_flag("--split-sentences", a->split_sentences,
                "One sequence per sentence (a simple rule, not NLTK punkt; see docs/formats.md); "
                "writes PREFIX_KEY_sentence");
  sub->add_flag("--keep-newlines", a->keep_newlines, "With --split-sentences: keep the whitespace between sentences");
  sub->add_option("--workers", a->workers, "Tokenizer threads; the output is the same for any number")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  sub->add_option("--format", a->format, "megatron or mds")
      ->check(CLI::IsMember({"megatron", "mds"}))
      ->capture_default_str();
  sub->add_option("--mds-compression", a->mds_compression, "MDS: zstd or zstd:LEVEL (1..22); default none");
  sub->add_option("--mds-size-limit", a->mds_size_limit, "MDS: shard size limit, bytes or 64mb-style; 0: no limit")
      ->capture_default_str();
  sub->add_option("--mds-hashes", a->mds_hashes, "MDS: xxh32, xxh64, xxh3_64 and/or xxh128")->delimiter(',');
  sub->add_option("--mds-dtype", a->mds_dtype, "MDS: the tokens column as ndarray:int32 or ndarray:uint16")
      ->check(CLI::IsMember({"int32", "uint16"}))
      ->capture_default_str();
  sub->add_option("--concat-tokens,--concat_tokens", a->concat_tokens,
                  "MDS: documents one after another, cut into samples of N tokens (LLM Foundry's --concat_tokens)")
      ->check(positive_count());
  sub->add_flag("--no-wrap,--no_wrap", a->no_wrap,
                "With --concat-tokens: a document's tokens past a full sample are dropped, not carried on");
  // Accepted so Megatron scripts run; they change nothing here (docs/formats.md says why).
  sub->add_option("--dataset-impl", a->dataset_impl, "Accepted for Megatron scripts: mmap is the only format")
      ->check(CLI::IsMember({"mmap"}));
  sub->add_option("--partitions", a->partitions, "Accepted for Megatron scripts; hone writes one output, in order")
      ->check(CLI::Range(1u, 4096u));
  sub->add_flag("--keep-sequential-samples", a->keep_sequential, "Accepted for Megatron scripts; order is always kept");
  sub->add_option("--log-interval", a->log_interval,
                  "Off a terminal, a progress line every N documents, as Megatron prints (on one, a line redrawn in "
                  "place; 0: none)")
      ->capture_default_str();
  sub->add_option("--lang", a->lang, "Accepted for Megatron scripts; the sentence rule is the same for every language");
  sub->add_flag("--tokenizer-hf-no-include-special-tokens", a->no_special_tokens,
                "HuggingFaceTokenizer: no ids around each text (the BOS its tokenizer.json's post-processor adds)");
  sub->add_flag("--trust-remote-code", a->trust_remote_code,
                "Accepted for Megatron scripts; hone runs no tokenizer code of a model's own");
  sub->add_flag("--tokenizer-hf-no-use-fast", a->no_use_fast,
                "Accepted for Megatron scripts; hone has one implementation of each tokenizer");
  // Megatron flags hone does not take, refused with the reason (hidden from --help).
  const auto refuse = [sub](const char* flag, const std::string& why) {
    sub->add_option_function<std::vector<std::string>>(
           flag, [flag, why](const std::vector<std::string>&) { throw CLI::ValidationError(flag, why); })
        ->expected(0, -1)
        ->group("");
  };
  for (const char* flag : {"--tiktoken-pattern", "--tiktoken-num-special-tokens", "--tiktoken-special-tokens"}) {
    refuse(flag,
           "goes with Megatron's own TikTokenizer vocabulary (a JSON list of rank/token_bytes/token_str), which hone "
           "does not read; give a tiktoken rank file as --tokenizer-model (its pattern and special tokens come with "
           "it)");
  }
  for (const char* flag : {"--find-optimal-num-workers", "--workers-to-check", "--max-documents", "--performance-dir"}) {
    refuse(flag, "Megatron's search for the fastest worker count is not in hone: set --workers N (the output is the "
                 "same for any number)");
  }

  return [a] {
    data::PreprocessOptions o;
    o.inputs = a->inputs;
    o.json_keys = a->json_keys;
    o.output_prefix = a->output_prefix;
    o.format = a->format == "mds" ? data::OutputFormat::mds : data::OutputFormat::megatron;
    o.split_sentences = a->split_sentences;
    o.keep_newlines = a->keep_newlines;
    o.append_eod = a->append_eod;
    o.workers = a->workers;
    o.mds.tokens = a->mds_dtype == "uint16" ? data::MdsTokenDType::u16 : data::MdsTokenDType::i32;
    o.concat_tokens = a->concat_tokens;
    o.wrap = !a->no_wrap;
    HONE_CHECK(!a->no_wrap || a->concat_tokens > 0, "--no-wrap goes with --concat-tokens");
    o.mds.compression = a->mds_compression;
    o.mds.size_limit = data::parse_size(a->mds_size_limit, "--mds-size-limit");
    o.mds.hashes = a->mds_hashes;
    std::sort(o.mds.hashes.begin(), o.mds.hashes.end());  // streaming wants them sorted
    o.mds.hashes.erase(std::unique(o.mds.hashes.begin(), o.mds.hashes.end()), o.mds.hashes.end());

    const data::PreprocessTokenizer tokenizer = data::load_preprocess_tokenizer(
        {a->tokenizer_type, a->vocab_file, a->merge_file, a->tokenizer_model, a->vocab_size, !a->no_special_tokens});

    // Ctrl-C or a kill: finish the documents in flight, remove the unfinished outputs.
    catch_stop_signals();

    ProgressLine line;
    const auto progress = [&](const data::PreprocessProgress& p) {
      // How far through the input files, where their sizes are known, and the time left at the pace so far.
      std::string done;
      if (p.input_bytes_total > 0 && p.input_bytes_read > 0) {
        const double fraction = std::min(1.0, double(p.input_bytes_read) / double(p.input_bytes_total));
        done = fmt::format("  {:.0f}%  ETA {}", fraction * 100, format_duration(p.seconds * (1 - fraction) / fraction));
      }
      line.draw(fmt::format("{} docs  {:.1f} MB  {} tokens  {:.0f} docs/s  {:.2f} MB/s{}  {:.0f} s{}",
                            with_commas(p.documents), double(p.bytes) / 1e6, with_commas(p.tokens),
                            per_second(double(p.documents), p.seconds), per_second(double(p.bytes) / 1e6, p.seconds),
                            p.files > 1 ? fmt::format("  file {}/{}", p.file, p.files) : std::string(), p.seconds,
                            done));
    };
    uint64_t next_log = a->log_interval;
    // A log file's: a line at each multiple of --log-interval documents, as Megatron prints (those passed
    // since the last look, each with the rates then).
    const auto log = [&](const data::PreprocessProgress& p) {
      for (; a->log_interval > 0 && next_log <= p.documents; next_log += a->log_interval) {
        fmt::print(stderr, "Processed {} documents ({:.0f} docs/s, {:.2f} MB/s).\n", next_log,
                   per_second(double(p.documents), p.seconds), per_second(double(p.bytes) / 1e6, p.seconds));
      }
    };
    const data::PreprocessResult r = data::preprocess(
        o, tokenizer, line.on_terminal() ? std::function(progress) : std::function(log), 0.25, &stop_requested_flag());
    line.clear();
    if (r.interrupted) {
      fmt::print(stderr, "hone: preprocess stopped by signal {} after {} documents; unfinished outputs removed\n",
                 stop_signal(), r.documents);
      return 128 + stop_signal();
    }
    std::string outputs;
    for (const std::string& out : r.outputs)
      outputs += (outputs.empty() ? "" : ", ") + out + (o.format == data::OutputFormat::megatron ? ".bin/.idx" : "/");
    const std::string packed =
        o.concat_tokens == 0 ? std::string()
                             : fmt::format(" in {} {} of {} ({} {} dropped)", with_commas(r.samples),
                                           plural(int64_t(r.samples), "sample"), o.concat_tokens,
                                           with_commas(r.dropped_tokens), plural(int64_t(r.dropped_tokens), "token"));
    fmt::print("preprocessed {} {}, {} {}{}, {:.1f} MB in {:.2f} s ({:.2f} MB/s, {:.0f} docs/s) -> {}\n",
               with_commas(r.documents), plural(int64_t(r.documents), "document"), with_commas(r.tokens),
               plural(int64_t(r.tokens), "token"), packed, double(r.bytes) / 1e6, r.seconds,
               per_second(double(r.bytes) / 1e6, r.seconds), per_second(double(r.documents), r.seconds), outputs);
    return 0;
  };
}

}  // namespace hone::cli
