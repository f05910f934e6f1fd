#include "hone/data/tokenizers/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include "hone/core/error.hpp"
#include "hone/core/files.hpp"
#include "hone/core/json_text.hpp"
#include "hone/data/tokenizers/loaders.hpp"

namespace hone {
namespace fs = std::filesystem;

std::optional<int32_t> Tokenizer::special_token_id(std::string_view text) const {
  for (const auto& [t, id] : special_tokens_)
    if (t == text) return id;
  return std::nullopt;
}

namespace {

constexpr std::string_view kExpected =
    "expected a Hugging Face tokenizer.json, a tiktoken rank file or tokenizer.model, a SentencePiece .model, "
    "the npm tiktoken encoders/*.json, GPT-2's encoder.json + vocab.bpe, vocab.json + merges.txt, or nanoGPT's "
    "meta.pkl";

std::string sibling_text(const fs::path& file, const char* name) {
  const fs::path p = file.parent_path() / name;
  return fs::is_regular_file(p) ? read_file(p.string()) : std::string();
}

// The other half of a GPT-2 vocabulary/merges pair next to `file`.
fs::path partner(const fs::path& file, std::initializer_list<const char*> names, const char* what) {
  for (const char* n : names) {
    const fs::path p = file.parent_path() / n;
    if (fs::is_regular_file(p)) return p;
  }
  std::string list;
  for (const char* n : names) list += (list.empty() ? "" : " or ") + std::string(n);
  fail("{}: a GPT-2 {} needs {} in the same folder", file.string(), what, list);
}

std::unique_ptr<Tokenizer> load_gpt2_files(const fs::path& vocab, const fs::path& merges) {
  return load_gpt2_bpe(read_file(vocab.string()), vocab.string(), read_file(merges.string()), merges.string());
}

// What the top level of a JSON object tells about the kind of file, read without
// building the document (tokenizer.json files run to tens of megabytes).
struct JsonShape {
  bool object = false, has_model = false, has_bpe_ranks = false, first_value_is_integer = false;
  size_t keys = 0;
};

class ShapeReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit ShapeReader(JsonShape& shape) : shape_(shape) {}
  bool null() override { return scalar(false); }
  bool boolean(bool) override { return scalar(false); }
  bool number_integer(number_integer_t) override { return scalar(true); }
  bool number_unsigned(number_unsigned_t) override { return scalar(true); }
  bool number_float(number_float_t, const string_t&) override { return scalar(false); }
  bool string(string_t&) override {
    // tiktoken's bpe_ranks is a string; GPT-2 vocabularies have "model" or "bpe_ranks" tokens too.
    if (depth_ == 1 && key_ == "bpe_ranks") shape_.has_bpe_ranks = true;
    return scalar(false) && !shape_.has_bpe_ranks;
  }
  bool binary(binary_t&) override { return scalar(false); }
  bool start_object(std::size_t) override {
    if (depth_ == 0) shape_.object = true;
    if (depth_ == 1 && key_ == "model") shape_.has_model = true;
    return open() && !shape_.has_model;  // decided: stop reading
  }
  bool key(string_t& key) override {
    if (depth_ != 1) return true;
    ++shape_.keys;
    key_ = key;
    return true;
  }
  bool end_object() override { return --depth_, true; }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return --depth_, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool scalar(bool integer) {
    if (depth_ == 1 && shape_.keys == 1) shape_.first_value_is_integer = integer;
    return true;
  }
  bool open() {
    if (depth_ == 1 && shape_.keys == 1) shape_.first_value_is_integer = false;
    ++depth_;
    return true;
  }
  JsonShape& shape_;
  int depth_ = 0;
  std::string key_;  // the last key at the top level
};

std::unique_ptr<Tokenizer> load_file(const fs::path& path) {
  const std::string name = path.filename().string();
  if (name == "vocab.bpe" || name == "merges.txt")
    return load_gpt2_files(partner(path, {"encoder.json", "vocab.json"}, "merges file"), path);
  const std::string content = read_file(path.string());
  const std::string where = path.string();
  size_t first = 0;
  while (first < content.size() && std::isspace(static_cast<unsigned char>(content[first]))) ++first;
  if (first < content.size() && content[first] == '{') {
    // A JSON object: tell the kinds apart by their keys.
    JsonShape shape;
    ShapeReader reader(shape);
    nlohmann::json::sax_parse(content.begin(), content.end(), &reader);
    if (shape.has_model) return load_tokenizer_json(content, where, sibling_text(path, "tokenizer_config.json"));
    if (shape.has_bpe_ranks) return load_tiktoken_json(content, where);
    // GPT-2's encoder.json (HF: vocab.json): token -> id for at least the 256 bytes.
    if (shape.object && shape.first_value_is_integer &&
        (name == "encoder.json" || name == "vocab.json" || shape.keys >= 256))
      return load_gpt2_files(path, partner(path, {"vocab.bpe", "merges.txt"}, "vocabulary"));
    parse_json_text<nlohmann::json>(content, where);  // a syntax error is reported as such
    fail("{}: a JSON file that is no tokenizer: {}", where, kExpected);
  }
  // A pickle (protocol 2 and later) starts with PROTO: nanoGPT's meta.pkl.
  if (!content.empty() && static_cast<unsigned char>(content[0]) == 0x80) return load_nanogpt_meta(content, where);
  HONE_CHECK(content.empty() || !path.string().ends_with(".pkl"), "{}: a pickle of protocol 0 or 1 (it does not "
             "start with PROTO): hone reads protocol 2 and later, Python 3's default (pickle.dump(meta, f))", where);
  // A serialized SentencePiece ModelProto starts with field 1 (pieces), wire type 2.
  if (!content.empty() && content[0] == 0x0A) return load_sentencepiece(content, where);
  if (first == content.size()) fail("{}: empty file ({})", where, kExpected);
  const size_t line_end = content.find('\n');
  const std::string_view line = std::string_view(content).substr(0, line_end);
  const size_t space = line.find(' ');
  const bool looks_like_ranks = space != std::string_view::npos && space > 0 &&
                                line.find_first_not_of("0123456789\r", space + 1) == std::string_view::npos;
  if (!looks_like_ranks)
    fail("{}:1: not a tokenizer file ({}); the first line is {:?}", where, kExpected,
         std::string(line.substr(0, 60)));
  return load_tiktoken_ranks(content, where, sibling_text(path, "tokenizer_config.json"));
}

}  // namespace

std::vector<fs::path> tokenizer_files_in(const fs::path& dir) {
  const auto has = [&](const char* name) { return fs::is_regular_file(dir / name); };
  if (has("tokenizer.json")) return {dir / "tokenizer.json"};
  if (has("tokenizer.model")) return {dir / "tokenizer.model"};
  if (has("encoder.json") && has("vocab.bpe")) return {dir / "encoder.json", dir / "vocab.bpe"};
  if (has("vocab.json") && has("merges.txt")) return {dir / "vocab.json", dir / "merges.txt"};
  // Meta's tiktoken file where Meta's Hugging Face repos keep it (and hone's exports).
  if (has("original/tokenizer.model")) return {dir / "original" / "tokenizer.model"};
  if (has("meta.pkl")) return {dir / "meta.pkl"};  // nanoGPT's character vocabulary
  return {};
}

void check_fits_vocabulary(const Tokenizer& tokenizer, int64_t vocab_size, std::string_view where) {
  HONE_CHECK(tokenizer.vocab_size() <= vocab_size, "{}: the tokenizer has {} tokens, more than the model's vocabulary of {}",
             where, tokenizer.vocab_size(), vocab_size);
}

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::vector<fs::path> files = tokenizer_files_in(path);
    if (files.size() == 1) return load_file(files[0]);
    if (files.size() == 2) return load_gpt2_files(files[0], files[1]);
    fail("{}: no tokenizer in this folder: expected tokenizer.json, tokenizer.model, encoder.json + vocab.bpe, "
         "vocab.json + merges.txt, original/tokenizer.model, or nanoGPT's meta.pkl",
         path.string());
  }
  HONE_CHECK(fs::exists(path, ec), "{}: no such file or folder (expected a tokenizer file or a folder holding one)",
             path.string());
  return load_file(path);
}

}  // namespace hone
