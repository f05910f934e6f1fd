// Hugging Face tokenizer.json with a BPE model: byte-level (GPT-2, Llama 3, Qwen)
// or SentencePiece-style over characters with byte fallback (Llama 2, Mistral).
// Parts of the pipeline this loader does not implement are refused by name,
// never silently ignored.
#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "hone/core/error.hpp"
#include "hone/core/json_text.hpp"
#include "hone/core/text.hpp"
#include "hone/data/tokenizers/bpe_tokenizer.hpp"
#include "hone/data/tokenizers/loaders.hpp"

namespace hone {
namespace {

using nlohmann::json;

struct Context {
  std::string_view name;

  [[noreturn]] void unsupported(const std::string& key, const json& value, std::string_view expected) const {
    fail("{}: key {}: unsupported value {} (expected {})", name, key, value.dump().substr(0, 120), expected);
  }
  const json& get(const json& object, const std::string& path, const char* key) const {
    const auto it = object.find(key);
    HONE_CHECK(it != object.end(), "{}: key {}.{} is missing", name, path, key);
    return *it;
  }
  std::string string(const json& object, const std::string& path, const char* key) const {
    const json& v = get(object, path, key);
    HONE_CHECK(v.is_string(), "{}: key {}.{}: expected a string, got {}", name, path, key, v.dump().substr(0, 80));
    return v.get<std::string>();
  }
  bool boolean(const json& object, const std::string& path, const char* key, bool fallback) const {
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    HONE_CHECK(it->is_boolean(), "{}: key {}.{}: expected true or false, got {}", name, path, key, it->dump());
    return it->get<bool>();
  }
  std::string type(const json& object, const std::string& path) const {
    HONE_CHECK(object.is_object(), "{}: key {}: expected an object, got {}", name, path, object.dump().substr(0, 80));
    return string(object, path, "type");
  }
};

// The pieces of a Sequence (or the object itself).
std::vector<std::pair<const json*, std::string>> flatten(const json& node, const std::string& path,
                                                         const char* list_key, const Context& c) {
  std::vector<std::pair<const json*, std::string>> out;
  if (node.is_null()) return out;
  if (c.type(node, path) != "Sequence") {
    out.emplace_back(&node, path);
    return out;
  }
  const json& items = c.get(node, path, list_key);
  HONE_CHECK(items.is_array(), "{}: key {}.{}: expected an array", c.name, path, list_key);
  for (size_t i = 0; i < items.size(); ++i) {
    auto inner = flatten(items[i], fmt::format("{}.{}[{}]", path, list_key, i), list_key, c);
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

std::string escape_regex(std::string_view s) {
  std::string out;
  for (const char ch : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string_view::npos) out += '\\';
    out += ch;
  }
  return out;
}

// The string a "pattern" object ({"String": ...} or {"Regex": ...}) matches, as a regex.
std::string pattern_regex(const json& pattern, const std::string& path, const Context& c) {
  HONE_CHECK(pattern.is_object(), "{}: key {}: expected {{\"Regex\": ...}} or {{\"String\": ...}}", c.name, path);
  if (pattern.contains("Regex")) return c.string(pattern, path, "Regex");
  return escape_regex(c.string(pattern, path, "String"));
}

void load_normalizers(const json& root, BpeTokenizer& t, const Context& c) {
  const auto it = root.find("normalizer");
  if (it == root.end()) return;
  for (const auto& [node, path] : flatten(*it, "normalizer", "normalizers", c)) {
    const std::string type = c.type(*node, path);
    if (type == "NFC") {
      t.normalizers.push_back({Normalizer::Type::nfc, "", ""});
    } else if (type == "Prepend") {
      t.normalizers.push_back({Normalizer::Type::prepend, "", c.string(*node, path, "prepend")});
    } else if (type == "Replace") {
      const json& pattern = c.get(*node, path, "pattern");
      if (!pattern.is_object() || !pattern.contains("String"))
        c.unsupported(path + ".pattern", pattern, "{\"String\": ...}");
      t.normalizers.push_back(
          {Normalizer::Type::replace, c.string(pattern, path + ".pattern", "String"), c.string(*node, path, "content")});
    } else {
      c.unsupported(path + ".type", type, "NFC, Prepend, Replace or a Sequence of them");
    }
  }
}

// Metaspace's options as tokenizers 0.13 to 0.21 write them: prepend_scheme, or
// before it add_prefix_space (true: always).
BpeTokenizer::Metaspace metaspace_options(const json& node, const std::string& path, const Context& c) {
  BpeTokenizer::Metaspace m;
  m.replacement = c.string(node, path, "replacement");
  if (m.replacement.empty()) c.unsupported(path + ".replacement", "", "one character");
  if (node.contains("prepend_scheme")) {
    const std::string scheme = c.string(node, path, "prepend_scheme");
    if (scheme == "always") m.prepend = BpeTokenizer::Metaspace::Prepend::always;
    else if (scheme == "first") m.prepend = BpeTokenizer::Metaspace::Prepend::first;
    else if (scheme == "never") m.prepend = BpeTokenizer::Metaspace::Prepend::never;
    else c.unsupported(path + ".prepend_scheme", scheme, "always, first or never");
  } else if (!c.boolean(node, path, "add_prefix_space", true)) {
    m.prepend = BpeTokenizer::Metaspace::Prepend::never;
  }
  m.split = c.boolean(node, path, "split", true);
  return m;
}

// Returns whether the pre-tokenizer works on GPT-2's byte-level alphabet.
bool load_pre_tokenizer(const json& root, BpeTokenizer& t, const Context& c) {
  const auto it = root.find("pre_tokenizer");
  if (it == root.end()) return false;
  const auto steps = flatten(*it, "pre_tokenizer", "pretokenizers", c);
  bool byte_level = false;
  std::string regex;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [node, path] = steps[i];
    const std::string type = c.type(*node, path);
    if (type == "Split") {
      const std::string behavior = c.string(*node, path, "behavior");
      if (behavior != "Isolated") c.unsupported(path + ".behavior", behavior, "\"Isolated\"");
      if (c.boolean(*node, path, "invert", false)) c.unsupported(path + ".invert", true, "false");
      if (!regex.empty()) c.unsupported(path, *node, "a single Split");
      regex = pattern_regex(c.get(*node, path, "pattern"), path + ".pattern", c);
    } else if (type == "ByteLevel") {
      byte_level = true;
      if (c.boolean(*node, path, "use_regex", true)) {
        if (!regex.empty()) c.unsupported(path + ".use_regex", true, "false after a Split");
        regex = std::string(kGpt2Pattern);
      }
      if (c.boolean(*node, path, "add_prefix_space", false)) {
        // Applied to each piece of an earlier split it would change them all; only
        // GPT-2's lone ByteLevel uses it.
        if (steps.size() != 1) c.unsupported(path + ".add_prefix_space", true, "false inside a Sequence");
        t.prefix_space = true;
      }
    } else if (type == "Metaspace") {
      if (steps.size() != 1) c.unsupported(path, *node, "Metaspace as the only pre-tokenizer");
      t.metaspace = metaspace_options(*node, path, c);
    } else {
      c.unsupported(path + ".type", type, "Split, ByteLevel, Metaspace or a Sequence of them");
    }
  }
  if (!regex.empty()) t.split = std::make_unique<SplitRegex>(regex, fmt::format("{}: pre_tokenizer", c.name));
  return byte_level;
}

void load_decoder(const json& root, BpeTokenizer& t, bool byte_level, const Context& c) {
  // Token-level steps (Replace, ByteFallback, ByteLevel) are applied to each
  // token's text once, here; Strip after Fuse acts on the joined text.
  std::vector<std::pair<std::string, std::string>>& replaces = t.decode_replaces;
  bool byte_fallback = false, fused = false;
  const auto it = root.find("decoder");
  if (it == root.end() || it->is_null()) t.token_separator = " ";  // as Hugging Face decodes without a decoder
  if (it != root.end()) {
    for (const auto& [node, path] : flatten(*it, "decoder", "decoders", c)) {
      const std::string type = c.type(*node, path);
      if (type == "ByteLevel") {
        if (!byte_level) c.unsupported(path, *node, "a ByteLevel decoder only with a ByteLevel pre-tokenizer");
      } else if (type == "Replace") {
        const json& pattern = c.get(*node, path, "pattern");
        if (!pattern.is_object() || !pattern.contains("String"))
          c.unsupported(path + ".pattern", pattern, "{\"String\": ...}");
        replaces.emplace_back(c.string(pattern, path + ".pattern", "String"), c.string(*node, path, "content"));
      } else if (type == "Metaspace") {
        const auto m = metaspace_options(*node, path, c);
        replaces.emplace_back(m.replacement, " ");
        if (m.prepend != BpeTokenizer::Metaspace::Prepend::never) t.strip_leading_spaces = 1;
      } else if (type == "ByteFallback") {
        byte_fallback = true;
      } else if (type == "Fuse") {
        fused = true;
      } else if (type == "Strip") {
        const std::string content = c.string(*node, path, "content");
        const json& start = c.get(*node, path, "start");
        const json& stop = c.get(*node, path, "stop");
        if (content != " " || !fused || !start.is_number_integer() || start.get<int64_t>() < 0 || stop != 0)
          c.unsupported(path, *node, "Strip of \" \" from the start, after Fuse");
        t.strip_leading_spaces = start.get<int>();
      } else {
        c.unsupported(path + ".type", type,
                      "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip or a Sequence of them");
      }
    }
  }
  t.decoded_.assign(size_t(t.model.size()), std::string());
  t.byte_token_.assign(size_t(t.model.size()), false);
  for (int32_t id = 0; id < t.model.size(); ++id) {
    if (!t.model.has_token(id)) continue;
    std::string text = t.model.token(id);  // byte-level tokens are already bytes
    if (byte_fallback && text.size() == 6 && text.starts_with("<0x") && text.back() == '>') {
      unsigned value = 0;
      const auto [p, ec] = std::from_chars(text.data() + 3, text.data() + 5, value, 16);
      if (ec == std::errc() && p == text.data() + 5) {
        t.decoded_[size_t(id)] = std::string(1, char(value));
        t.byte_token_[size_t(id)] = true;
        continue;
      }
    }
    for (const auto& [from, to] : replaces) replace_all(text, from, to);
    t.decoded_[size_t(id)] = std::move(text);
  }
}

std::optional<int32_t> find_token(const BpeTokenizer& t, const std::optional<std::string>& content) {
  if (!content) return std::nullopt;
  for (const AddedToken& a : t.added)
    if (a.content == *content) return a.id;
  return t.model.find(*content);
}


// tokenizer.json is mostly model.vocab and model.merges (hundreds of thousands
// of entries): those stream straight into vectors; the rest becomes a DOM. This
// is several times faster than building the whole DOM.
struct Document {
  json root;  // without model.vocab and model.merges
  bool has_vocab = false, has_merges = false;
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // "a b" as ("a b", "") until split
  std::vector<bool> merge_is_pair;                          // written as ["a", "b"]
};

class DocumentParser final : public nlohmann::json_sax<json> {
 public:
  DocumentParser(Document& doc, std::string_view name) : doc_(doc), name_(name) {}

  bool null() override { return value(json()); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return number(v); }
  bool number_unsigned(number_unsigned_t v) override {
    return number(v > uint64_t(INT64_MAX) ? int64_t(-1) : int64_t(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (mode_ == Mode::vocab) fail("{}: key model.vocab.{}: expected an id, got {}", name_, key_, v);
    return value(json(v));
  }
  bool string(string_t& v) override {
    if (mode_ == Mode::vocab) fail("{}: key model.vocab.{}: expected an id, got a string", name_, key_);
    if (mode_ == Mode::merges) {
      doc_.merges.emplace_back(std::move(v), std::string());
      doc_.merge_is_pair.push_back(false);
      return true;
    }
    if (mode_ == Mode::merge_pair) {
      pair_.push_back(std::move(v));
      return true;
    }
    return value(json(std::move(v)));
  }
  bool binary(binary_t&) override { return value(json()); }
  bool start_object(std::size_t) override {
    if (mode_ != Mode::dom) fail("{}: key {}: unexpected object", name_, mode_ == Mode::vocab ? "model.vocab" : "model.merges");
    if (in_model() && key_ == "vocab") {
      mode_ = Mode::vocab;
      doc_.has_vocab = true;
      return true;
    }
    return open(json::object());
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::vocab) {
      mode_ = Mode::dom;
      return true;
    }
    return close();
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::merges) {
      mode_ = Mode::merge_pair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::dom) fail("{}: key {}: unexpected array", name_, mode_ == Mode::vocab ? "model.vocab" : "model.merges");
    if (in_model() && key_ == "merges") {
      mode_ = Mode::merges;
      doc_.has_merges = true;
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::merge_pair) {
      HONE_CHECK(pair_.size() == 2, "{}: key model.merges[{}]: expected [\"left\", \"right\"]", name_,
                 doc_.merges.size());
      doc_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      doc_.merge_is_pair.push_back(true);
      mode_ = Mode::merges;
      return true;
    }
    if (mode_ == Mode::merges) {
      mode_ = Mode::dom;
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    fail("{}: not valid JSON ({})", name_, json_error_text(e));
  }

 private:
  enum class Mode { dom, vocab, merges, merge_pair };

  // The object being filled is the root's "model".
  bool in_model() const { return stack_.size() == 2 && keys_.size() == 2 && keys_[1] == "model"; }
  bool number(int64_t v) {
    if (mode_ == Mode::vocab) {
      doc_.vocab.emplace_back(key_, v);
      return true;
    }
    if (mode_ != Mode::dom) fail("{}: key model.merges[{}]: expected \"left right\"", name_, doc_.merges.size());
    return value(json(v));
  }
  json* place(json&& v) {
    if (stack_.empty()) {
      doc_.root = std::move(v);
      return &doc_.root;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  bool value(json&& v) {
    if (mode_ == Mode::merge_pair || mode_ == Mode::merges)
      fail("{}: key model.merges[{}]: expected \"left right\" or [\"left\", \"right\"]", name_, doc_.merges.size());
    place(std::move(v));
    return true;
  }
  bool open(json&& container) {
    keys_.push_back(key_);
    stack_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  Document& doc_;
  std::string_view name_;
  Mode mode_ = Mode::dom;
  std::vector<json*> stack_;
  std::vector<std::string> keys_;  // the key each open container was stored under
  std::string key_;
  std::vector<std::string> pair_;
};

Document parse_document(std::string_view content, std::string_view name) {
  Document doc;
  DocumentParser parser(doc, name);
  check_json_text(content, name);
  json::sax_parse(content.begin(), content.end(), &parser);
  return doc;
}
}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(std::string_view content, std::string_view name,
                                               std::string_view config_json) {
  const Context c{name};
  Document doc = parse_document(content, name);
  const json& root = doc.root;
  HONE_CHECK(root.is_object(), "{}: expected a JSON object (a Hugging Face tokenizer.json)", name);
  const json& model = c.get(root, "(root)", "model");
  HONE_CHECK(model.is_object(), "{}: key model: expected an object", name);
  const std::string model_type = model.contains("type") ? c.string(model, "model", "type") : "BPE";
  if (model_type != "BPE") c.unsupported("model.type", model_type, "\"BPE\"");
  if (model.contains("dropout") && !model["dropout"].is_null()) c.unsupported("model.dropout", model["dropout"], "null");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && model[key] != "") c.unsupported(fmt::format("model.{}", key), model[key], "null");
  }

  auto t = std::make_unique<BpeTokenizer>();
  t->kind_ = "hf-tokenizer-json";
  t->source_ = std::string(name);
  load_normalizers(root, *t, c);
  const bool byte_level = load_pre_tokenizer(root, *t, c);

  // The vocabulary: byte-level tokens are stored as the bytes they stand for.
  HONE_CHECK(doc.has_vocab && !doc.vocab.empty(), "{}: key model.vocab: expected an object of token -> id", name);
  std::string bytes;
  for (const auto& [text, id] : doc.vocab) {
    HONE_CHECK(id >= 0 && id < (1 << 24), "{}: key model.vocab.{}: expected an id in [0, 2^24), got {}", name, text, id);
    if (byte_level) {
      HONE_CHECK(byte_level_to_bytes(text, bytes), "{}: key model.vocab: token {:?} is not written in the "
                 "byte-level alphabet its ByteLevel pre-tokenizer expects", name, text);
    } else {
      bytes = text;
    }
    HONE_CHECK(t->model.add_token(int32_t(id), bytes), "{}: key model.vocab: token {:?} or its id {} appears twice", name, text,
               id);
  }

  HONE_CHECK(doc.has_merges, "{}: key model.merges: expected an array", name);
  t->model.reserve_merges(doc.merges.size());
  std::string left_bytes, right_bytes;
  for (size_t i = 0; i < doc.merges.size(); ++i) {
    std::string left = std::move(doc.merges[i].first), right = std::move(doc.merges[i].second);
    if (!doc.merge_is_pair[i]) {  // "left right"
      const size_t space = left.find(' ');
      HONE_CHECK(space != std::string::npos && left.find(' ', space + 1) == std::string::npos,
                 "{}: key model.merges[{}]: expected \"left right\", got {:?}", name, i, left);
      right = left.substr(space + 1);
      left.resize(space);
    }
    if (byte_level) {
      HONE_CHECK(byte_level_to_bytes(left, left_bytes) && byte_level_to_bytes(right, right_bytes),
                 "{}: key model.merges[{}]: not written in the byte-level alphabet", name, i);
    } else {
      left_bytes = left;
      right_bytes = right;
    }
    const auto l = t->model.find(left_bytes), r = t->model.find(right_bytes), merged = t->model.find(left_bytes + right_bytes);
    HONE_CHECK(l && r && merged, "{}: key model.merges[{}]: {:?} is not in model.vocab", name, i,
               !l ? left : !r ? right : left + right);
    t->model.add_merge(*l, *r, *merged, uint32_t(i));
  }

  BpeModel::Options options;
  options.symbols = byte_level ? BpeModel::Symbols::bytes : BpeModel::Symbols::chars;
  options.whole_piece_lookup = c.boolean(model, "model", "ignore_merges", false);
  options.byte_fallback = c.boolean(model, "model", "byte_fallback", false);
  options.fuse_unk = c.boolean(model, "model", "fuse_unk", false);
  if (model.contains("unk_token") && !model["unk_token"].is_null()) {
    const std::string unk = c.string(model, "model", "unk_token");
    options.unk_id = t->model.find(unk);
    HONE_CHECK(options.unk_id.has_value(), "{}: key model.unk_token: {:?} is not in model.vocab", name, unk);
  }
  t->model.finalize(options, name);
  load_decoder(root, *t, byte_level, c);

  if (const auto it = root.find("added_tokens"); it != root.end() && !it->is_null()) {
    HONE_CHECK(it->is_array(), "{}: key added_tokens: expected an array", name);
    for (size_t i = 0; i < it->size(); ++i) {
      const json& a = (*it)[i];
      const std::string path = fmt::format("added_tokens[{}]", i);
      HONE_CHECK(a.is_object(), "{}: key {}: expected an object", name, path);
      const json& id = c.get(a, path, "id");
      HONE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (1 << 24),
                 "{}: key {}.id: expected a token id, got {}", name, path, id.dump());
      if (c.boolean(a, path, "single_word", false)) c.unsupported(path + ".single_word", true, "false");
      t->added.push_back(AddedToken{.content = c.string(a, path, "content"),
                                    .id = id.get<int32_t>(),
                                    .special = c.boolean(a, path, "special", false),
                                    .normalized = c.boolean(a, path, "normalized", false),
                                    .lstrip = c.boolean(a, path, "lstrip", false),
                                    .rstrip = c.boolean(a, path, "rstrip", false)});
    }
  }

  TokenizerConfig config;
  if (!config_json.empty()) config = parse_tokenizer_config(config_json, std::string(name) + "/../tokenizer_config.json");
  // Without a config, the usual names.
  const auto first_of = [&](std::initializer_list<const char*> names) -> std::optional<int32_t> {
    for (const char* n : names)
      if (const auto id = find_token(*t, std::string(n))) return id;
    return std::nullopt;
  };
  const auto bos = config_json.empty() ? first_of({"<s>", "<|begin_of_text|>"}) : find_token(*t, config.bos);
  const auto eos = config_json.empty() ? first_of({"</s>", "<|end_of_text|>", "<|endoftext|>"}) : find_token(*t, config.eos);
  const auto pad = find_token(*t, config.pad);
  t->finish(bos, eos, pad);
  return t;
}

}  // namespace hone
