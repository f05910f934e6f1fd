#include "hone/data/preprocess.hpp"


#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "hone/core/error.hpp"
#include "hone/core/files.hpp"
#include "hone/core/json_text.hpp"
#include "hone/data/formats/inputs.hpp"
#include "hone/data/formats/megatron.hpp"
#include "hone/data/formats/ordered_sink.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone::data {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kTypes =
    "GPT2BPETokenizer, HuggingFaceTokenizer, Llama2Tokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer, "
    "TikTokenizer or NullTokenizer";

// Megatron's NullTokenizer, for text that is already token ids: "12 7 40" is
// [12, 7, 40]. Ids must be below `ids`; EOD is `ids` itself (one past them).
class IdListTokenizer final : public Tokenizer {
 public:
  explicit IdListTokenizer(int32_t ids) : ids_(ids) { eos_id_ = ids; }
  void encode_into(std::string_view text, std::vector<int32_t>& out, SpecialTokens) const override {
    size_t at = 0;
    while ((at = text.find_first_not_of(" \t\r\n", at)) != std::string_view::npos) {
      const size_t end = std::min(text.find_first_of(" \t\r\n", at), text.size());
      const std::string_view word = text.substr(at, end - at);
      int64_t id = -1;
      const auto [last, error] = std::from_chars(word.data(), word.data() + word.size(), id);
      HONE_CHECK(error == std::errc() && last == word.data() + word.size() && id >= 0 && id < ids_,
                 "NullTokenizer: '{}' at character {} is not a token id in [0, {}) (--vocab-size)", word, at, ids_);
      out.push_back(int32_t(id));
      at = end;
    }
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (const int32_t id : ids) {
      HONE_CHECK(id >= 0 && id <= ids_, "token id {} is outside [0, {}]", id, ids_);
      if (!text.empty()) text += ' ';
      text += std::to_string(id);
    }
    return text;
  }
  int32_t vocab_size() const override { return ids_ + 1; }
  std::string_view kind() const override { return "null"; }

 private:
  int32_t ids_;
};

bool is_sentencepiece_type(std::string_view type) {
  return type == "Llama2Tokenizer" || type == "SentencePieceTokenizer" || type == "GPTSentencePieceTokenizer";
}

std::string_view describe_kind(std::string_view kind) {
  if (kind == "gpt2-bpe") return "GPT-2 BPE files (encoder.json + vocab.bpe, or vocab.json + merges.txt)";
  if (kind == "hf-tokenizer-json") return "a Hugging Face tokenizer.json";
  if (kind == "sentencepiece") return "a SentencePiece .model";
  return "a tiktoken rank file";
}

// Megatron's TikTokenizer reads its own vocabulary format (a JSON list of
// {rank, token_bytes, token_str} with 1000 special ids in front), not tiktoken's.
bool is_megatron_tiktoken_list(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  const std::string head = read_file(path).substr(0, 64);
  const size_t first = head.find_first_not_of(" \t\r\n");
  return first != std::string::npos && head[first] == '[';
}

// The ids transformers' tokenizer(text) puts around a single text: tokenizer.json's
// post_processor (Llama's BOS; RoBERTa's <s> ... </s>). Megatron's
// HuggingFaceTokenizer encodes with tokenizer(text).input_ids.
void post_processor_ids(const json& node, const std::string& where, const std::string& path, int64_t vocab_size,
                        std::vector<int32_t>& before, std::vector<int32_t>& after) {
  if (node.is_null()) return;
  HONE_CHECK(node.is_object() && node.contains("type") && node["type"].is_string(),
             "{}: key {}: expected an object with a \"type\"", where, path);
  const std::string type = node["type"].get<std::string>();
  const auto token_id = [&](const json& id, const std::string& key) {
    HONE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size,
               "{}: key {}.{}: id {} is not in the tokenizer's vocabulary of {}", where, path, key, id.dump(),
               vocab_size);
    return id.get<int32_t>();
  };
  const auto id_of = [&](const json& pair, const char* key) {
    HONE_CHECK(pair.is_array() && pair.size() == 2 && pair[1].is_number_integer(),
               "{}: key {}.{}: expected [token, id]", where, path, key);
    return token_id(pair[1], key);
  };
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const json& list = node.value("processors", json());
    HONE_CHECK(list.is_array(), "{}: key {}.processors: expected an array", where, path);
    for (size_t i = 0; i < list.size(); ++i)
      post_processor_ids(list[i], where, fmt::format("{}.processors[{}]", path, i), vocab_size, before, after);
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    HONE_CHECK(node.contains("cls") && node.contains("sep"), "{}: key {}: expected cls and sep", where, path);
    before.push_back(id_of(node["cls"], "cls"));
    after.insert(after.begin(), id_of(node["sep"], "sep"));
    return;
  }
  HONE_CHECK(type == "TemplateProcessing", "{}: key {}.type: {} is not supported (expected TemplateProcessing, "
             "RobertaProcessing, BertProcessing, ByteLevel or Sequence)", where, path, type);
  const json& single = node.value("single", json());
  const json& specials = node.value("special_tokens", json::object());
  HONE_CHECK(single.is_array(), "{}: key {}.single: expected an array", where, path);
  bool seen_text = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const json& piece = single[i];
    if (piece.contains("Sequence")) {
      seen_text = true;
      continue;
    }
    const std::string at = fmt::format("{}.single[{}]", path, i);
    const json token = piece.contains("SpecialToken") ? piece["SpecialToken"] : json();
    HONE_CHECK(token.is_object() && token.contains("id") && token["id"].is_string(),
               "{}: key {}: expected {{\"SpecialToken\": {{\"id\": ...}}}} or {{\"Sequence\": ...}}", where, at);
    const std::string name = token["id"].get<std::string>();
    const json entry = specials.is_object() && specials.contains(name) ? specials[name] : json();
    const json ids = entry.is_object() && entry.contains("ids") ? entry["ids"] : json();
    HONE_CHECK(ids.is_array(), "{}: key {}.special_tokens: no ids for {:?}", where, path, name);
    for (const json& id : ids) (seen_text ? after : before).push_back(token_id(id, "special_tokens." + name + ".ids"));
  }
}

// transformers' Llama and Gemma tokenizer classes (Mistral's files name
// LlamaTokenizer) rebuild the post-processor from tokenizer_config.json's
// add_bos_token (default true) and add_eos_token (default false) when they load:
// those replace what tokenizer.json's post_processor puts around a text.
void llama_special_ids(const Tokenizer& tokenizer, const fs::path& config_path, std::vector<int32_t>& before,
                       std::vector<int32_t>& after) {
  if (!fs::is_regular_file(config_path)) return;
  const std::string where = config_path.string();
  const json config = parse_json_text<json>(read_file(where), where);
  if (!config.is_object() || !config.value("tokenizer_class", json()).is_string()) return;
  std::string name = config["tokenizer_class"].get<std::string>();
  if (name.ends_with("Fast")) name.resize(name.size() - 4);
  if (name != "LlamaTokenizer" && name != "CodeLlamaTokenizer" && name != "GemmaTokenizer") return;
  const auto flag = [&](const char* key, bool fallback) {
    const json& value = config.value(key, json());
    HONE_CHECK(value.is_null() || value.is_boolean(), "{}: key {}: expected true or false", where, key);
    return value.is_boolean() ? value.get<bool>() : fallback;
  };
  before.clear();
  after.clear();
  for (const auto& [key, fallback, id, ids] :
       {std::tuple{"add_bos_token", true, tokenizer.bos_id(), &before},
        std::tuple{"add_eos_token", false, tokenizer.eos_id(), &after}}) {
    if (!flag(key, fallback)) continue;
    HONE_CHECK(id.has_value(), "{}: key {} is true, but the tokenizer has no such token", where, key);
    ids->push_back(*id);
  }
}

// LLM Foundry's ConcatTokensDataset as a writer: the documents' tokens one after
// another, cut into samples of exactly `length` tokens for `out`; the tokens
// after the last whole sample are dropped.
class ConcatenatingWriter final : public TokenWriter {
 public:
  ConcatenatingWriter(TokenWriter& out, int64_t length, bool wrap) : out_(out), length_(size_t(length)), wrap_(wrap) {}

  void add_document(std::span<const int32_t> tokens, std::span<const int32_t> /*sequence_lengths*/) override {
    buffer_.insert(buffer_.end(), tokens.begin(), tokens.end());
    size_t start = 0;
    while (buffer_.size() - start >= length_) {
      out_.add_document(std::span(buffer_).subspan(start, length_));
      ++samples_;
      start += length_;
      if (!wrap_) {  // the rest of this document goes
        dropped_ += buffer_.size() - start;
        start = buffer_.size();
      }
    }
    buffer_.erase(buffer_.begin(), buffer_.begin() + std::ptrdiff_t(start));
  }
  void finish() override {
    dropped_ += buffer_.size();
    buffer_.clear();
    out_.finish();
  }
  uint64_t samples() const { return samples_; }
  uint64_t dropped() const { return dropped_; }

 private:
  TokenWriter& out_;
  size_t length_;
  bool wrap_;
  std::vector<int32_t> buffer_;
  uint64_t samples_ = 0, dropped_ = 0;
};

}  // namespace

void PreprocessTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  out.insert(out.end(), before.begin(), before.end());
  tokenizer->encode_into(text, out, special);
  out.insert(out.end(), after.begin(), after.end());
}

PreprocessTokenizer load_preprocess_tokenizer(const TokenizerFiles& files) {
  PreprocessTokenizer t;
  std::string type = files.type;
  HONE_CHECK(type.empty() || type == "GPT2BPETokenizer" || type == "HuggingFaceTokenizer" || type == "TikTokenizer" ||
                 type == "NullTokenizer" || is_sentencepiece_type(type),
             "--tokenizer-type {}: not supported by hone (expected {})", type, kTypes);
  HONE_CHECK((type == "NullTokenizer") == (files.vocab_size > 0),
             "--vocab-size goes with --tokenizer-type NullTokenizer, and NullTokenizer needs it (ids 0..N-1; EOD is N)");
  if (type == "NullTokenizer") {
    HONE_CHECK(files.vocab_file.empty() && files.merge_file.empty() && files.tokenizer_model.empty(),
               "NullTokenizer reads no tokenizer files: the text is already token ids");
    HONE_CHECK(files.vocab_size < INT32_MAX, "--vocab-size {} is too large", files.vocab_size);
    t.tokenizer = std::make_unique<IdListTokenizer>(int32_t(files.vocab_size));
    t.source = "NullTokenizer";
    t.type = type;
    t.eod = int32_t(files.vocab_size);
    return t;
  }
  const bool gpt2_files = !files.vocab_file.empty() || !files.merge_file.empty();
  if (gpt2_files) {
    HONE_CHECK(type == "GPT2BPETokenizer" || type.empty(),
               "--vocab-file and --merge-file go with --tokenizer-type GPT2BPETokenizer; {} reads --tokenizer-model",
               type);
    HONE_CHECK(!files.vocab_file.empty() && !files.merge_file.empty(),
               "GPT2BPETokenizer needs both --vocab-file (encoder.json or vocab.json) and --merge-file (vocab.bpe or "
               "merges.txt)");
    HONE_CHECK(files.tokenizer_model.empty(), "give either --tokenizer-model or --vocab-file with --merge-file, not both");
    t.tokenizer = load_gpt2_bpe(read_file(files.vocab_file), files.vocab_file, read_file(files.merge_file),
                                files.merge_file);
    t.source = files.vocab_file;
  } else {
    HONE_CHECK(!files.tokenizer_model.empty(),
               "no tokenizer given: expected --tokenizer-model FILE_OR_FOLDER, or --tokenizer-type GPT2BPETokenizer "
               "with --vocab-file and --merge-file");
    HONE_CHECK(type != "TikTokenizer" || !is_megatron_tiktoken_list(files.tokenizer_model),
               "{}: a JSON list is Megatron's own TikTokenizer vocabulary (rank, token_bytes, token_str, with special "
               "ids in front), which hone does not read; expected a tiktoken rank file such as cl100k_base.tiktoken "
               "or Llama 3's tokenizer.model",
               files.tokenizer_model);
    t.tokenizer = load_tokenizer(files.tokenizer_model);
    t.source = files.tokenizer_model;
  }
  const std::string kind(t.tokenizer->kind());
  if (type.empty()) {
    type = kind == "gpt2-bpe"            ? "GPT2BPETokenizer"
           : kind == "hf-tokenizer-json" ? "HuggingFaceTokenizer"
           : kind == "sentencepiece"     ? "Llama2Tokenizer"
                                         : "TikTokenizer";
  }
  t.type = type;
  // The files each type reads in Megatron (AutoTokenizer also loads vocab.json + merges.txt).
  const bool fits = type == "GPT2BPETokenizer"       ? kind == "gpt2-bpe"
                    : type == "HuggingFaceTokenizer" ? kind == "hf-tokenizer-json" || kind == "gpt2-bpe"
                    : type == "TikTokenizer"         ? kind == "tiktoken"
                                                     : kind == "sentencepiece";
  const std::string_view expected = type == "GPT2BPETokenizer"       ? describe_kind("gpt2-bpe")
                                    : type == "HuggingFaceTokenizer" ? describe_kind("hf-tokenizer-json")
                                    : type == "TikTokenizer"         ? describe_kind("tiktoken")
                                                                     : describe_kind("sentencepiece");
  HONE_CHECK(fits, "{}: --tokenizer-type {} expects {}, but this is {}", t.source, type, expected, describe_kind(kind));

  // What Megatron's tokenizer of each type does (megatron/core/tokenizers): the
  // HF-based ones (GPT2BPETokenizer is transformers' GPT-2 tokenizer) and tiktoken
  // (allowed_special="all") turn special tokens written in the text into their ids;
  // SentencePiece does not. EOD is <|endoftext|> for GPT-2, else the EOS token.
  if (type == "GPT2BPETokenizer") {
    t.special = SpecialTokens::recognize;
    t.eod = t.tokenizer->special_token_id("<|endoftext|>");
  } else if (type == "HuggingFaceTokenizer") {
    t.special = SpecialTokens::recognize;
    t.eod = t.tokenizer->eos_id();
    if (kind == "hf-tokenizer-json") {
      const fs::path model(files.tokenizer_model);
      const std::string file = (fs::is_directory(model) ? model / "tokenizer.json" : model).string();
      const json j = parse_json_text<json>(read_file(file), file);
      if (j.is_object() && j.contains("post_processor"))
        post_processor_ids(j["post_processor"], file, "post_processor", t.tokenizer->vocab_size(), t.before, t.after);
      llama_special_ids(*t.tokenizer, fs::path(file).parent_path() / "tokenizer_config.json", t.before, t.after);
    }
    if (!files.include_special_tokens) t.before.clear(), t.after.clear();
  } else if (type == "TikTokenizer") {
    t.special = SpecialTokens::recognize;
    t.eod = t.tokenizer->eos_id();
  } else {
    t.special = SpecialTokens::as_text;
    t.eod = t.tokenizer->eos_id();
  }
  return t;
}

std::vector<std::string> preprocess_outputs(const PreprocessOptions& options) {
  std::vector<std::string> out;
  std::string base = options.output_prefix;
  if (options.format == OutputFormat::mds)
    while (base.size() > 1 && base.back() == '/') base.pop_back();
  for (const std::string& key : options.json_keys) {
    if (options.format == OutputFormat::megatron)
      out.push_back(megatron_output_prefix(base, key, options.split_sentences));
    else
      out.push_back(options.json_keys.size() == 1 ? base : base + "_" + key);
  }
  return out;
}

std::vector<std::string_view> split_sentences(std::string_view text, bool keep_newlines) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  const auto ends = [](char c) { return c == '.' || c == '!' || c == '?'; };
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!ends(text[i])) continue;
    size_t end = i + 1;
    while (end < text.size() && ends(text[end])) ++end;  // "?!", "..."
    while (end < text.size() && std::string_view("\"')]}").find(text[end]) != std::string_view::npos) ++end;
    i = end - 1;
    if (end == text.size() || !space(text[end])) continue;
    size_t next = end;
    while (next < text.size() && space(text[next])) ++next;
    if (next == text.size()) break;  // only whitespace follows: the last sentence
    out.push_back(text.substr(start, (keep_newlines ? next : end) - start));
    start = next;
    i = next - 1;
  }
  size_t last = text.size();
  while (last > start && space(text[last - 1])) --last;
  if (last > start) out.push_back(text.substr(start, last - start));
  return out;
}

uint64_t parse_size(std::string_view text, std::string_view what) {
  std::string s;
  for (const char c : text)
    if (c != ' ') s += char(std::tolower(static_cast<unsigned char>(c)));
  uint64_t unit = 1;
  if (s.ends_with('b') && s.size() > 1 && std::isalpha(static_cast<unsigned char>(s[s.size() - 2]))) s.pop_back();
  for (const auto& [suffix, bytes] : {std::pair{'k', uint64_t(1) << 10}, std::pair{'m', uint64_t(1) << 20},
                                      std::pair{'g', uint64_t(1) << 30}, std::pair{'t', uint64_t(1) << 40}}) {
    if (s.ends_with(suffix)) {
      unit = bytes;
      s.pop_back();
      break;
    }
  }
  double value = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  const double bytes = value * double(unit);
  HONE_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty() && bytes >= 0 && bytes < 0x1p63,
             "{} {:?}: expected a size in bytes such as 67108864, 64mb, 64M or 1.5gb", what, std::string(text));
  return uint64_t(std::llround(bytes));
}

PreprocessResult preprocess(const PreprocessOptions& options, const PreprocessTokenizer& tokenizer,
                            const std::function<void(const PreprocessProgress&)>& on_progress,
                            double progress_interval, const std::atomic<bool>* stop) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto& keys = options.json_keys;
  const bool mds = options.format == OutputFormat::mds;
  HONE_CHECK(options.workers >= 1, "--workers 0: expected at least 1");
  HONE_CHECK(!options.output_prefix.empty(), "--output-prefix is empty");
  for (size_t i = 0; i < keys.size(); ++i)
    HONE_CHECK(std::find(keys.begin(), keys.begin() + i, keys[i]) == keys.begin() + i,
               "--json-keys: {:?} appears twice", keys[i]);
  HONE_CHECK(options.concat_tokens == 0 || mds,
             "--concat-tokens: MDS output packs its samples (--format mds); a Megatron dataset is packed when "
             "training reads it, into sequences of its seq_len");
  HONE_CHECK(options.concat_tokens >= 0, "--concat-tokens {}: expected a positive count", options.concat_tokens);
  HONE_CHECK(options.concat_tokens == 0 || options.append_eod || !tokenizer.after.empty() || !tokenizer.before.empty(),
             "--concat-tokens without --append-eod: {} adds nothing around a text, so the documents would run into "
             "each other",
             tokenizer.source);
  HONE_CHECK(!(options.split_sentences && mds),
             "--split-sentences: an MDS sample is a whole document, so sentence boundaries need --format megatron");
  HONE_CHECK(!options.append_eod || tokenizer.eod, "{}: --append-eod needs an end-of-document token and {} has none",
             tokenizer.source, tokenizer.type);
  const auto vocab = uint64_t(tokenizer.tokenizer->vocab_size());
  HONE_CHECK(!mds || options.mds.tokens != MdsTokenDType::u16 || vocab <= 65536,
             "{}: a vocabulary of {} tokens does not fit --mds-dtype uint16 (ids 0..65535); use int32",
             tokenizer.source, vocab);

  HONE_CHECK(!options.inputs.empty(),
             "no --input given: expected JSONL, Parquet or text files, folders or glob patterns");
  DocumentReader reader(options.inputs, keys);
  const std::vector<std::string>& files = reader.files();
  PreprocessResult result;
  result.outputs = preprocess_outputs(options);
  result.files = files.size();
  // The output's folder is made if missing, and removed again if the run fails.
  NewFolders new_folders;
  for (const std::string& output : result.outputs) {
    const std::filesystem::path parent = std::filesystem::path(output).parent_path();
    if (!parent.empty()) new_folders.create("--output-prefix", parent.string());
  }

  // Writers first, then the sinks that feed them, then the threads: destroyed in
  // reverse, so an unfinished run removes its files after every thread has stopped.
  std::vector<std::unique_ptr<TokenWriter>> writers;
  std::vector<std::unique_ptr<ConcatenatingWriter>> packers;  // with concat_tokens, between the two
  std::vector<std::unique_ptr<OrderedDocumentSink>> sinks;
  for (const std::string& output : result.outputs) {
    if (mds) {
      MdsWriterOptions mds_options = options.mds;
      mds_options.vocab_size = vocab;
      writers.push_back(std::make_unique<MdsWriter>(output, mds_options));
    } else {
      writers.push_back(std::make_unique<MegatronWriter>(output, megatron_dtype_for_vocab(vocab), vocab));
    }
    if (options.concat_tokens > 0) {
      packers.push_back(std::make_unique<ConcatenatingWriter>(*writers.back(), options.concat_tokens, options.wrap));
    }
    TokenWriter& writer = options.concat_tokens > 0 ? *packers.back() : *writers.back();
    sinks.push_back(std::make_unique<OrderedDocumentSink>(writer, 16 * size_t(options.workers)));
  }

  std::mutex read_mutex;  // the reader and the document counter
  uint64_t next_document = 0;
  bool reading_done = false;
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;
  uint64_t error_document = std::numeric_limits<uint64_t>::max();
  std::atomic<uint64_t> documents{0}, tokens{0}, bytes{0};
  std::atomic<size_t> current_file{0};
  std::atomic<uint64_t> input_bytes_read{0};
  std::mutex done_mutex;
  std::condition_variable done_cv;
  unsigned running = options.workers;

  // The error of the earliest document wins, so a run fails the same way for any worker count.
  const auto record = [&](uint64_t document, std::exception_ptr e) {
    std::lock_guard lock(error_mutex);
    if (document < error_document) {
      error_document = document;
      error = std::move(e);
    }
    failed = true;
  };

  const auto work = [&] {
    std::string line;
    TextDocument document;
    const std::string& origin = document.origin;
    std::vector<std::string>& fields = document.fields;
    bool is_jsonl_line = false;
    while (true) {
      uint64_t index;
      {
        std::lock_guard lock(read_mutex);
        if (reading_done || failed || (stop && *stop)) break;
        try {
          if (!reader.next_unparsed(document, line, is_jsonl_line)) {
            reading_done = true;
            break;
          }
        } catch (...) {
          record(next_document, std::current_exception());
          break;
        }
        index = next_document++;
        current_file = reader.file();
        input_bytes_read = reader.bytes_read();
      }
      // Every sink must get this document, even after an error, or the workers
      // waiting for it in later sinks would wait forever.
      std::exception_ptr doc_error;
      try {
        if (is_jsonl_line) parse_jsonl_line(line, keys, origin, fields);
      } catch (...) {
        doc_error = std::current_exception();
      }
      uint64_t doc_tokens = 0, doc_bytes = 0;
      for (size_t k = 0; k < sinks.size(); ++k) {
        std::vector<int32_t> ids, lengths;
        if (!doc_error) {
          try {
            const std::string& text = fields[k];
            // A text file's or a shard's bytes (a JSON line's the parser has checked): Megatron reads inputs as
            // UTF-8 and stops at a byte that is none.
            const size_t valid = is_jsonl_line ? text.size() : utf8::valid_prefix(text);
            HONE_CHECK(valid == text.size(),
                       "byte {} is not UTF-8 (0x{:02x}): the text is in another encoding (Latin-1, cp1252?); convert "
                       "it to UTF-8 first (iconv -f LATIN1 -t UTF-8)",
                       valid, static_cast<unsigned char>(text[valid]));
            if (options.split_sentences) {
              for (const std::string_view sentence : split_sentences(text, options.keep_newlines)) {
                const size_t before = ids.size();
                tokenizer.encode(sentence, ids);
                if (ids.size() > before) lengths.push_back(int32_t(ids.size() - before));
              }
            } else {
              tokenizer.encode(text, ids);
            }
            // As Megatron: EOD ends a document that has tokens, inside its last sequence.
            if (options.append_eod && !ids.empty()) {
              ids.push_back(*tokenizer.eod);
              if (!lengths.empty()) ++lengths.back();
            }
            doc_tokens += ids.size();
            doc_bytes += text.size();
          } catch (const Error& e) {  // a text the tokenizer refuses (NullTokenizer): name the document
            doc_error = std::make_exception_ptr(Error(fmt::format("{}: {}", origin, e.what())));
          } catch (...) {
            doc_error = std::current_exception();
          }
          if (doc_error) {
            ids.clear();
            lengths.clear();
          }
        }
        try {
          sinks[k]->submit(index, std::move(ids), std::move(lengths));
        } catch (...) {
          if (!doc_error) doc_error = std::current_exception();
        }
      }
      if (doc_error) {
        record(index, doc_error);
        break;
      }
      tokens += doc_tokens;
      bytes += doc_bytes;
      ++documents;
    }
    std::lock_guard lock(done_mutex);
    --running;
    done_cv.notify_all();
  };

  const auto snapshot = [&] {
    PreprocessProgress p;
    p.documents = documents;
    p.tokens = tokens;
    p.bytes = bytes;
    p.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    p.file = current_file;
    p.files = files.size();
    p.input_bytes_read = input_bytes_read;
    p.input_bytes_total = reader.bytes_total();
    return p;
  };

  {
    std::vector<std::jthread> threads;
    try {
      for (unsigned w = 0; w < options.workers; ++w) threads.emplace_back(work);
    } catch (...) {
      failed = true;  // the threads started stop at their next document; jthread joins them
      std::lock_guard lock(done_mutex);
      running -= options.workers - unsigned(threads.size());
      record(0, std::current_exception());
    }
    std::unique_lock lock(done_mutex);
    const auto interval = std::chrono::duration<double>(progress_interval);
    while (!done_cv.wait_for(lock, interval, [&] { return running == 0; })) {
      if (on_progress) {
        lock.unlock();
        on_progress(snapshot());
        lock.lock();
      }
    }
  }
  if (on_progress && !error && !(stop && *stop)) on_progress(snapshot());  // the last, however short the run
  if (error) std::rethrow_exception(error);
  if (stop && *stop) {
    static_cast<PreprocessProgress&>(result) = snapshot();
    result.interrupted = true;
    new_folders.discard();
    return result;  // the writers, destroyed unfinished, remove their files, then the folders made for them go
  }
  // A dataset of no tokens trains nothing: the input is not what was meant.
  HONE_CHECK(tokens > 0, "{}: {}", fmt::join(options.inputs, " "),
             documents == 0 ? std::string("no documents in the input")
                            : fmt::format("{} {}, all empty: no tokens to write", uint64_t(documents),
                                          documents == 1 ? "document" : "documents"));
  for (auto& sink : sinks) sink->finish();
  for (const auto& packer : packers) {
    result.samples += packer->samples();
    result.dropped_tokens += packer->dropped();
  }
  static_cast<PreprocessProgress&>(result) = snapshot();
  result.file = files.size();
  return result;
}

}  // namespace hone::data
