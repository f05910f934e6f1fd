// GPT-2's encoder.json + vocab.bpe and tiktoken's rank files.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <tuple>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "hone/core/error.hpp"
#include "hone/core/json_text.hpp"
#include "hone/data/tokenizers/bpe_tokenizer.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone {
namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the
// other 68 bytes for U+0100.. in byte order.
const std::array<uint32_t, 256>& byte_chars() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

// The inverse, for code points below 0x144 (-1: not in the alphabet).
const std::array<int, 0x144>& char_bytes() {
  static const std::array<int, 0x144> table = [] {
    std::array<int, 0x144> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_chars()[size_t(b)]] = b;
    return t;
  }();
  return table;
}

std::string_view trim_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// Standard base64 with padding; false on anything else.
bool base64_decode(std::string_view in, std::string& out) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t;
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(alphabet[i])] = int8_t(i);
    return t;
  }();
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  size_t pad = 0;
  while (pad < 2 && in.size() > pad && in[in.size() - 1 - pad] == '=') ++pad;
  const size_t n = in.size() - pad;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const int v = table[static_cast<unsigned char>(in[i])];
    if (v < 0) return false;
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((acc >> bits) & 0xFF);
    }
  }
  return true;
}

// What a tiktoken encoding adds to its ranks: the pattern and the special tokens.
struct Encoding {
  std::string name;
  std::string_view pattern;
  std::vector<std::pair<std::string, int32_t>> specials;
  std::optional<int32_t> bos, eos;
};

std::vector<std::pair<std::string, int32_t>> llama3_specials(Llama3Release release) {
  // Meta's llama3/tokenizer.py: these names, then reserved ones up to 256 in
  // all; Llama 3.1 named three of the reserved ones (transformers' names).
  const bool llama31 = release == Llama3Release::llama31;
  std::vector<std::string> names = {"<|begin_of_text|>",
                                    "<|end_of_text|>",
                                    "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>",
                                    llama31 ? "<|finetune_right_pad_id|>" : "<|reserved_special_token_2|>",
                                    llama31 ? "<|reserved_special_token_2|>" : "<|reserved_special_token_3|>",
                                    "<|start_header_id|>",
                                    "<|end_header_id|>",
                                    llama31 ? "<|eom_id|>" : "<|reserved_special_token_4|>",
                                    "<|eot_id|>"};
  if (llama31) names.push_back("<|python_tag|>");
  for (int i = llama31 ? 3 : 5; names.size() < 256; ++i) names.push_back(fmt::format("<|reserved_special_token_{}|>", i));
  std::vector<std::pair<std::string, int32_t>> out;
  for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], int32_t(128000 + i));
  return out;
}

Encoding encoding_for(std::string_view name, size_t ranks, Llama3Release release) {
  // The file's own name says which encoding it is, not its folders' (a Llama 3
  // tokenizer.model in a folder named o200k_tests is Llama 3's).
  const std::string_view file = name.substr(name.find_last_of('/') + 1);
  const auto has = [&](std::string_view s) { return file.find(s) != std::string_view::npos; };
  if (has("cl100k") || (!has("o200k") && ranks == 100256))
    return {"cl100k_base",
            kCl100kPattern,
            {{"<|endoftext|>", 100257},
             {"<|fim_prefix|>", 100258},
             {"<|fim_middle|>", 100259},
             {"<|fim_suffix|>", 100260},
             {"<|endofprompt|>", 100276}},
            std::nullopt,
            100257};
  if (has("o200k") || ranks == 199998)
    return {"o200k_base", kO200kPattern, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}, std::nullopt, 199999};
  if (ranks == 128000) return {"llama3", kCl100kPattern, llama3_specials(release), 128000, 128001};
  if (has("p50k") || ranks == 50280) return {"p50k_base", kGpt2Pattern, {{"<|endoftext|>", 50256}}, 50256, 50256};
  if (has("r50k") || has("gpt2") || ranks == 50256)
    return {"r50k_base", kGpt2Pattern, {{"<|endoftext|>", 50256}}, 50256, 50256};
  fail(
      "{}: cannot tell which tiktoken encoding this rank file is ({} ranks): expected cl100k_base (100256 ranks), "
      "o200k_base (199998), Llama 3 (128000), r50k_base/gpt2 (50256) or p50k_base (50280), or a file name "
      "saying which",
      name, ranks);
}

std::optional<int32_t> id_of(const std::vector<std::pair<std::string, int32_t>>& specials,
                             const std::optional<std::string>& content) {
  if (!content) return std::nullopt;
  for (const auto& [text, id] : specials)
    if (text == *content) return id;
  return std::nullopt;
}

std::unique_ptr<Tokenizer> make_tiktoken(std::unique_ptr<BpeTokenizer> t, const Encoding& e,
                                         std::string_view name) {
  BpeModel::Options options;
  options.whole_piece_lookup = true;  // tiktoken looks a piece up whole before merging
  options.rank_by_concatenation = true;
  t->model.finalize(options, name);
  t->split = std::make_unique<SplitRegex>(e.pattern, name);
  t->decoded_.resize(size_t(t->model.size()));
  for (int32_t id = 0; id < t->model.size(); ++id)
    if (t->model.has_token(id)) t->decoded_[size_t(id)] = t->model.token(id);
  for (const auto& [text, id] : e.specials) {
    HONE_CHECK(!t->model.has_token(id), "{}: special token {} has id {}, which is also an ordinary rank", name, text,
               id);
    t->added.push_back(AddedToken{.content = text, .id = id});
  }
  t->finish(e.bos, e.eos, std::nullopt);
  return t;
}

}  // namespace

bool byte_level_to_bytes(std::string_view text, std::string& bytes) {
  bytes.clear();
  if (!utf8::valid(text)) return false;
  for (size_t i = 0; i < text.size();) {
    const uint32_t cp = utf8::next(text, i);
    if (cp >= char_bytes().size() || char_bytes()[cp] < 0) return false;
    bytes += char(char_bytes()[cp]);
  }
  return true;
}

TokenizerConfig parse_tokenizer_config(std::string_view content, std::string_view name) {
  TokenizerConfig config;
  const nlohmann::json j = parse_json_text<nlohmann::json>(content, name);
  HONE_CHECK(j.is_object(), "{}: expected a JSON object (tokenizer_config.json)", name);
  // A token is written as "<s>" or as {"content": "<s>", ...}.
  const auto token = [&](const char* key) -> std::optional<std::string> {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
      return (*it)["content"].get<std::string>();
    fail("{}: key {}: expected a string or an object with \"content\"", name, key);
  };
  config.bos = token("bos_token");
  config.eos = token("eos_token");
  config.pad = token("pad_token");
  if (const auto it = j.find("added_tokens_decoder"); it != j.end()) {
    HONE_CHECK(it->is_object(), "{}: key added_tokens_decoder: expected an object of id -> token", name);
    for (const auto& [key, value] : it->items()) {
      int32_t id = 0;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      HONE_CHECK(ec == std::errc() && end == key.data() + key.size() && id >= 0,
                 "{}: key added_tokens_decoder.{}: expected a token id", name, key);
      HONE_CHECK(value.is_object() && value.contains("content") && value["content"].is_string(),
                 "{}: key added_tokens_decoder.{}.content: expected a string", name, key);
      config.added_tokens[id] = value["content"].get<std::string>();
    }
  }
  return config;
}

std::unique_ptr<Tokenizer> load_gpt2_bpe(std::string_view vocab_json, std::string_view vocab_name,
                                         std::string_view merges, std::string_view merges_name) {
  const nlohmann::json vocab = parse_json_text<nlohmann::json>(vocab_json, vocab_name);
  HONE_CHECK(vocab.is_object() && !vocab.empty(), "{}: expected a JSON object of token -> id (GPT-2 encoder.json)",
             vocab_name);
  auto t = std::make_unique<BpeTokenizer>();
  t->kind_ = "gpt2-bpe";
  t->source_ = std::string(vocab_name);
  std::string bytes;
  std::optional<int32_t> endoftext;
  for (const auto& [text, value] : vocab.items()) {
    HONE_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < (1 << 24),
               "{}: token {:?}: expected an id in [0, 2^24), got {}", vocab_name, text, value.dump());
    const auto id = value.get<int32_t>();
    HONE_CHECK(byte_level_to_bytes(text, bytes), "{}: token {:?}: not written in GPT-2's byte-level alphabet",
               vocab_name, text);
    if (text == "<|endoftext|>") {
      endoftext = id;
      continue;  // a special token, not a BPE symbol
    }
    HONE_CHECK(t->model.add_token(id, bytes), "{}: token {:?} or its id {} appears twice", vocab_name, text, id);
  }
  // vocab.bpe: an optional "#version" line, then one "left right" merge per line, best first.
  uint32_t rank = 0;
  size_t line_no = 0;
  std::string left_bytes, right_bytes;
  for (size_t pos = 0; pos < merges.size();) {
    size_t end = merges.find('\n', pos);
    if (end == std::string_view::npos) end = merges.size();
    const std::string_view line = trim_cr(merges.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    HONE_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                   line.find(' ', space + 1) == std::string_view::npos,
               "{}:{}: expected a merge \"left right\" (two tokens separated by one space), got {:?}", merges_name,
               line_no, std::string(line.substr(0, 80)));
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    HONE_CHECK(byte_level_to_bytes(left, left_bytes) && byte_level_to_bytes(right, right_bytes),
               "{}:{}: merge {:?} is not written in GPT-2's byte-level alphabet", merges_name, line_no,
               std::string(line));
    const auto l = t->model.find(left_bytes), r = t->model.find(right_bytes),
               m = t->model.find(left_bytes + right_bytes);
    HONE_CHECK(l && r && m, "{}:{}: merge {:?}: {} is not in {}", merges_name, line_no, std::string(line),
               !l ? std::string(left) : !r ? std::string(right) : std::string(left) + std::string(right), vocab_name);
    t->model.add_merge(*l, *r, *m, rank++);
  }
  HONE_CHECK(rank > 0, "{}: no merges found (expected GPT-2's vocab.bpe: \"left right\" per line)", merges_name);
  t->model.finalize(BpeModel::Options(), vocab_name);
  t->split = std::make_unique<SplitRegex>(kGpt2Pattern, vocab_name);
  t->decoded_.resize(size_t(t->model.size()));
  for (int32_t id = 0; id < t->model.size(); ++id)
    if (t->model.has_token(id)) t->decoded_[size_t(id)] = t->model.token(id);
  if (endoftext) t->added.push_back(AddedToken{.content = "<|endoftext|>", .id = *endoftext});
  t->finish(endoftext, endoftext, std::nullopt);
  return t;
}

namespace {

// A line of a tiktoken rank file: a token (its bytes, and as written) and its rank.
struct RankLine {
  std::string bytes;
  std::string_view base64;
  int32_t rank;
  size_t line_no;
};

// The lines of a tiktoken rank file, in file order.
std::vector<RankLine> read_rank_lines(std::string_view content, std::string_view name) {
  std::vector<RankLine> tokens;
  size_t line_no = 0;
  std::string bytes;
  for (size_t pos = 0; pos < content.size();) {
    size_t end = content.find('\n', pos);
    if (end == std::string_view::npos) end = content.size();
    const std::string_view line = trim_cr(content.substr(pos, end - pos));
    pos = end + 1;
    ++line_no;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    int64_t rank = -1;
    bool ok = space != std::string_view::npos && base64_decode(line.substr(0, space), bytes);
    if (ok) {
      const auto [p, ec] = std::from_chars(line.data() + space + 1, line.data() + line.size(), rank);
      ok = ec == std::errc() && p == line.data() + line.size() && rank >= 0 && rank < (1 << 24);
    }
    HONE_CHECK(ok, "{}:{}: expected a tiktoken rank line \"<base64 token> <rank>\", got {:?}", name, line_no,
               std::string(line.substr(0, 80)));
    tokens.push_back({bytes, line.substr(0, space), int32_t(rank), line_no});
  }
  HONE_CHECK(!tokens.empty(), "{}: empty rank file (expected \"<base64 token> <rank>\" lines)", name);
  return tokens;
}

// The encoding of a rank file of `ranks` tokens; `config_json` (or empty) may
// rename its special tokens and name its BOS and EOS.
Encoding tiktoken_encoding(std::string_view name, size_t ranks, std::string_view config_json,
                           Llama3Release release = Llama3Release::llama3) {
  Encoding e = encoding_for(name, ranks, release);
  if (!config_json.empty()) {
    // Llama 3.1 and 3.2 name some reserved tokens differently; their config says how.
    const TokenizerConfig config = parse_tokenizer_config(config_json, std::string(name) + "/../tokenizer_config.json");
    for (auto& [text, id] : e.specials)
      if (const auto it = config.added_tokens.find(id); it != config.added_tokens.end()) text = it->second;
    if (const auto bos = id_of(e.specials, config.bos)) e.bos = bos;
    if (const auto eos = id_of(e.specials, config.eos)) e.eos = eos;
  }
  return e;
}

// Bytes in GPT-2's byte-level alphabet, as tokenizer.json writes tokens.
std::string as_byte_level(std::string_view bytes) {
  std::string text;
  for (const char b : bytes) utf8::append(text, byte_chars()[static_cast<unsigned char>(b)]);
  return text;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tiktoken_ranks(std::string_view content, std::string_view name,
                                               std::string_view config_json) {
  auto t = std::make_unique<BpeTokenizer>();
  t->kind_ = "tiktoken";
  t->source_ = std::string(name);
  const std::vector<RankLine> tokens = read_rank_lines(content, name);
  for (const RankLine& l : tokens) {
    HONE_CHECK(t->model.add_token(l.rank, l.bytes), "{}:{}: token {} or rank {} appears twice", name, l.line_no,
               std::string(l.base64), l.rank);
  }
  return make_tiktoken(std::move(t), tiktoken_encoding(name, tokens.size(), config_json), name);
}

HfTokenizerFiles tiktoken_as_hf_tokenizer(std::string_view content, std::string_view name,
                                          std::string_view config_json, int64_t model_max_length,
                                          Llama3Release release) {
  const std::vector<RankLine> tokens = read_rank_lines(content, name);
  const Encoding e = tiktoken_encoding(name, tokens.size(), config_json, release);
  std::unordered_map<std::string_view, int32_t> rank_of;
  nlohmann::json vocab = nlohmann::json::object();
  for (const RankLine& l : tokens) {
    HONE_CHECK(rank_of.emplace(l.bytes, l.rank).second, "{}:{}: token {} appears twice", name, l.line_no,
               std::string(l.base64));
    vocab[as_byte_level(l.bytes)] = l.rank;
  }
  // transformers' TikTokenConverter: for each token, every split into two
  // tokens, ordered by the token's rank, then the two parts' ranks (BPE then
  // builds each token as tiktoken does, with ignore_merges looking a piece up whole).
  struct Merge {
    int32_t rank, left, right;
    std::string_view token;
    size_t split;
  };
  std::vector<Merge> merges;
  for (const RankLine& l : tokens) {
    const std::string_view token = l.bytes;
    for (size_t split = 1; split < token.size(); ++split) {
      const auto left = rank_of.find(token.substr(0, split)), right = rank_of.find(token.substr(split));
      if (left != rank_of.end() && right != rank_of.end()) {
        merges.push_back({l.rank, left->second, right->second, token, split});
      }
    }
  }
  std::sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return std::tie(a.rank, a.left, a.right) < std::tie(b.rank, b.left, b.right);
  });
  nlohmann::json merge_lines = nlohmann::json::array();
  for (const Merge& m : merges) {
    merge_lines.push_back(as_byte_level(m.token.substr(0, m.split)) + " " + as_byte_level(m.token.substr(m.split)));
  }
  const auto byte_level = [](bool add_prefix_space, bool trim_offsets, bool use_regex) {
    return nlohmann::json{{"type", "ByteLevel"},
                          {"add_prefix_space", add_prefix_space},
                          {"trim_offsets", trim_offsets},
                          {"use_regex", use_regex}};
  };
  nlohmann::json added = nlohmann::json::array(), added_decoder = nlohmann::json::object();
  for (const auto& [text, id] : e.specials) {
    const nlohmann::json flags = {{"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                  {"normalized", false},  {"special", true}};
    nlohmann::json token = {{"id", id}, {"content", text}};
    token.update(flags);
    added.push_back(token);
    nlohmann::json decoded = {{"content", text}};
    decoded.update(flags);
    added_decoder[std::to_string(id)] = decoded;
  }
  nlohmann::json post_processor = byte_level(true, false, true);
  const auto text_of = [&](int32_t id) {
    for (const auto& [text, special] : e.specials)
      if (special == id) return text;
    fail("{}: special token id {} has no name", name, id);
  };
  if (e.bos) {  // BOS before every text, as Llama 3's tokenizer.json adds it
    const std::string bos = text_of(*e.bos);
    const auto special = [&](int type) { return nlohmann::json{{"SpecialToken", {{"id", bos}, {"type_id", type}}}}; };
    const auto sequence = [](const char* id, int type) {
      return nlohmann::json{{"Sequence", {{"id", id}, {"type_id", type}}}};
    };
    post_processor = {{"type", "Sequence"},
                      {"processors",
                       {post_processor,
                        {{"type", "TemplateProcessing"},
                         {"single", {special(0), sequence("A", 0)}},
                         {"pair", {special(0), sequence("A", 0), special(1), sequence("B", 1)}},
                         {"special_tokens", {{bos, {{"id", bos}, {"ids", {*e.bos}}, {"tokens", {bos}}}}}}}}}};
  }
  HfTokenizerFiles files;
  files.tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", e.pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
          byte_level(false, true, false)}}}},
      {"post_processor", post_processor},
      {"decoder", byte_level(true, true, true)},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", true},
        {"vocab", std::move(vocab)}, {"merges", std::move(merge_lines)}}}};
  files.config = {{"added_tokens_decoder", added_decoder},
                  {"clean_up_tokenization_spaces", true},
                  {"model_input_names", {"input_ids", "attention_mask"}},
                  {"model_max_length", model_max_length},
                  {"tokenizer_class", "PreTrainedTokenizerFast"}};
  if (e.bos) files.config["bos_token"] = text_of(*e.bos);
  if (e.eos) files.config["eos_token"] = text_of(*e.eos);
  return files;
}

std::unique_ptr<Tokenizer> load_tiktoken_json(std::string_view content, std::string_view name) {
  const nlohmann::json j = parse_json_text<nlohmann::json>(content, name);
  HONE_CHECK(j.is_object() && j.contains("pat_str") && j["pat_str"].is_string() && j.contains("bpe_ranks") &&
                 j["bpe_ranks"].is_string() && j.contains("special_tokens") && j["special_tokens"].is_object(),
             "{}: expected the npm tiktoken encoder format: an object with pat_str, special_tokens and bpe_ranks",
             name);
  const std::string pattern = j["pat_str"].get<std::string>();
  const std::string& ranks_text = j["bpe_ranks"].get_ref<const std::string&>();
  auto t = std::make_unique<BpeTokenizer>();
  t->kind_ = "tiktoken";
  t->source_ = std::string(name);
  std::string bytes;
  size_t line_no = 0;
  std::string_view text = ranks_text;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line.empty()) continue;
    // "! <first rank> <token> <token> ...": consecutive ranks from the first.
    if (line.starts_with("! ")) {
      size_t p = 2, q = line.find(' ', p);
      int64_t rank = -1;
      const auto [endp, ec] = std::from_chars(line.data() + p, line.data() + (q == std::string_view::npos ? line.size() : q), rank);
      HONE_CHECK(ec == std::errc() && rank >= 0 && endp == line.data() + (q == std::string_view::npos ? line.size() : q),
                 "{}: bpe_ranks line {}: expected \"! <first rank> <base64 token>...\"", name, line_no);
      while (q != std::string_view::npos) {
        p = q + 1;
        q = line.find(' ', p);
        const std::string_view token = line.substr(p, q == std::string_view::npos ? std::string_view::npos : q - p);
        HONE_CHECK(base64_decode(token, bytes) && rank < (1 << 24), "{}: bpe_ranks line {}, byte {}: expected a base64 token, got {:?}",
                   name, line_no, p, std::string(token.substr(0, 40)));
        HONE_CHECK(t->model.add_token(int32_t(rank), bytes), "{}: bpe_ranks line {}: token {} or rank {} appears twice",
                   name, line_no, std::string(token), rank);
        ++rank;
      }
      continue;
    }
    const size_t space = line.find(' ');
    int64_t rank = -1;
    bool ok = space != std::string_view::npos && base64_decode(line.substr(0, space), bytes);
    if (ok) {
      const auto [p, ec] = std::from_chars(line.data() + space + 1, line.data() + line.size(), rank);
      ok = ec == std::errc() && p == line.data() + line.size() && rank >= 0 && rank < (1 << 24);
    }
    HONE_CHECK(ok, "{}: bpe_ranks line {}: expected \"<base64 token> <rank>\", got {:?}", name, line_no,
               std::string(line.substr(0, 80)));
    HONE_CHECK(t->model.add_token(int32_t(rank), bytes), "{}: bpe_ranks line {}: token or rank {} appears twice", name,
               line_no, rank);
  }
  HONE_CHECK(t->model.size() > 0, "{}: bpe_ranks holds no tokens", name);
  Encoding e;
  e.name = std::string(name);
  e.pattern = pattern;
  for (const auto& [text, id] : j["special_tokens"].items()) {
    HONE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (1 << 24),
               "{}: special_tokens.{}: expected a token id", name, text);
    e.specials.emplace_back(text, id.get<int32_t>());
  }
  e.eos = id_of(e.specials, std::string("<|endoftext|>"));
  if (pattern == kGpt2Pattern) e.bos = e.eos;
  return make_tiktoken(std::move(t), e, name);
}

}  // namespace hone
