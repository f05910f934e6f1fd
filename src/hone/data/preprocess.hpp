#pragma once
// `hone preprocess`: text or JSONL in, a tokenized Megatron indexed dataset or MDS
// shards out, with the semantics of Megatron-LM's tools/preprocess_data.py (which
// ids a tokenizer type adds, which id is EOD, how outputs are named). Documents are
// tokenized by a pool of threads and written in input order, so the output is the
// same for any number of workers. docs/formats.md describes the command.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hone/data/formats/mds.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"

namespace hone::data {

// The tokenizer files as preprocess_data.py's flags name them.
struct TokenizerFiles {
  // GPT2BPETokenizer, HuggingFaceTokenizer, Llama2Tokenizer, SentencePieceTokenizer,
  // GPTSentencePieceTokenizer, TikTokenizer or NullTokenizer (the text is already
  // ids, written as decimal numbers between spaces); empty: decided by the file's kind.
  std::string type;
  std::string vocab_file, merge_file;  // GPT2BPETokenizer
  std::string tokenizer_model;         // a file or folder, for the other types
  int64_t vocab_size = 0;              // NullTokenizer: ids below it; EOD is vocab_size
  // HuggingFaceTokenizer: the ids its post-processor puts around a text (BOS);
  // false is Megatron's --tokenizer-hf-no-include-special-tokens.
  bool include_special_tokens = true;
};

// A tokenizer set up as Megatron's build_tokenizer() sets up each type.
struct PreprocessTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string source;  // the file or folder, for messages
  std::string type;    // the Megatron type it behaves as
  SpecialTokens special = SpecialTokens::as_text;
  std::vector<int32_t> before, after;  // ids around every text (a tokenizer.json post-processor)
  std::optional<int32_t> eod;

  // Appends before + the ids of `text` + after to `out`.
  void encode(std::string_view text, std::vector<int32_t>& out) const;
};

// Loads the tokenizer; a file of the wrong kind for `type` is an error naming it.
PreprocessTokenizer load_preprocess_tokenizer(const TokenizerFiles& files);

enum class OutputFormat { megatron, mds };

struct PreprocessOptions {
  std::vector<std::string> inputs;  // files, folders or glob patterns
  std::vector<std::string> json_keys{"text"};
  std::string output_prefix;
  OutputFormat format = OutputFormat::megatron;
  bool split_sentences = false, keep_newlines = false, append_eod = false;
  unsigned workers = 1;
  // MDS only; MdsWriterOptions::vocab_size is taken from the tokenizer.
  MdsWriterOptions mds;
  // MDS only: the documents' tokens one after another, cut into samples of
  // exactly this many (LLM Foundry's --concat_tokens); 0: a sample per document.
  int64_t concat_tokens = 0;
  // With concat_tokens: a document's tokens past a full sample start the next
  // (false: they are dropped, LLM Foundry's --no_wrap).
  bool wrap = true;
};

// What the outputs are called: Megatron prefixes (PREFIX_KEY_document, without
// .bin/.idx) or MDS folders (PREFIX, or PREFIX_KEY for several keys).
std::vector<std::string> preprocess_outputs(const PreprocessOptions& options);

struct PreprocessProgress {
  uint64_t documents = 0;
  uint64_t tokens = 0;  // over all keys, EOD included
  uint64_t bytes = 0;   // UTF-8 bytes of the text tokenized (the selected keys' values)
  double seconds = 0;
  size_t file = 0, files = 0;  // the input file being read (1-based) and the count
  // The input files' bytes as stored (compressed ones compressed), read and in
  // all; the total is 0 where it is not known (a pipe, an MDS folder).
  uint64_t input_bytes_read = 0, input_bytes_total = 0;
};

struct PreprocessResult : PreprocessProgress {
  std::vector<std::string> outputs;
  // With concat_tokens, over all outputs: the samples written, and the tokens
  // dropped (after the last whole sample, or by no wrap).
  uint64_t samples = 0, dropped_tokens = 0;
  bool interrupted = false;  // `stop` was set: nothing was written
};

// Runs the whole job. `on_progress` is called on the calling thread about every
// `progress_interval` seconds; `stop`, when set (by a signal handler), ends the
// run after the documents in flight and removes every output. Errors throw
// hone::Error naming the file and line, and leave no output.
PreprocessResult preprocess(const PreprocessOptions& options, const PreprocessTokenizer& tokenizer,
                            const std::function<void(const PreprocessProgress&)>& on_progress = {},
                            double progress_interval = 0.25, const std::atomic<bool>* stop = nullptr);

// --split-sentences. Megatron uses NLTK's punkt model; hone uses a plain rule: a
// sentence ends after '.', '!' or '?' (and closing quotes or brackets) followed
// by whitespace. The whitespace between sentences is dropped, or with
// `keep_newlines` kept at the end of the sentence before it; the last sentence
// loses trailing whitespace (as punkt does).
std::vector<std::string_view> split_sentences(std::string_view text, bool keep_newlines);

// Streaming's size strings: "67108864", "64mb", "1.5gb", and nccl-tests' "64M" (k, m, g, t,
// with or without b, in either case: powers of 1024).
uint64_t parse_size(std::string_view text, std::string_view what);

}  // namespace hone::data
