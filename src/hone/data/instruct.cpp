#include "hone/data/instruct.hpp"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "hone/core/error.hpp"
#include "hone/core/json_text.hpp"
#include "hone/core/rng.hpp"
#include "hone/core/text.hpp"
#include "hone/data/formats/inputs.hpp"
#include "hone/data/formats/mds.hpp"
#include "hone/data/formats/parquet.hpp"

namespace hone::data {

namespace {

using Json = nlohmann::json;

// Alpaca's prompts, as torchtune's AlpacaToMessages writes them.
constexpr const char* kAlpacaWithInput =
    "Below is an instruction that describes a task, paired with an input that provides further context. "
    "Write a response that appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n"
    "### Input:\n{input}\n\n### Response:\n";
constexpr const char* kAlpacaNoInput =
    "Below is an instruction that describes a task. Write a response that appropriately completes the "
    "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n";
constexpr const char* kSummarize = "Summarize this dialogue:\n{dialogue}\n---\nSummary:\n";

std::string fill(std::string_view text, const std::map<std::string, std::string>& fields) {
  std::string out;
  size_t at = 0;
  for (size_t open = text.find('{'); open != std::string_view::npos; open = text.find('{', at)) {
    const size_t close = text.find('}', open);
    if (close == std::string_view::npos) break;
    const auto field = fields.find(std::string(text.substr(open + 1, close - open - 1)));
    out.append(text.substr(at, open - at));
    if (field == fields.end()) {
      out += '{';
      at = open + 1;
    } else {
      out += field->second;
      at = close + 1;
    }
  }
  out.append(text.substr(at));
  return out;
}

// One piece of a sample: text (or a single special token id) and whether the loss applies to it.
struct Piece {
  std::string text;
  bool trainable = false;
  // Special tokens written in the text become their ids: a special token's own
  // text ("<|eot_id|>"), or a prompt to generate from, read as transformers'
  // tokenizer(text) and vLLM read one.
  bool special = false;
  std::optional<int32_t> id;  // a token given by id (BOS/EOS)
  bool injected = false;      // dataset.system_prompt's: never learned, not even with train_on_input
};

// The chat format samples are written in: a chat's; the other templates' with in_chat_format.
std::optional<ChatFormat> chat_format_of(const InstructOptions& o) {
  if (o.format == InstructTemplate::chat || o.in_chat_format) return o.chat_format;
  return std::nullopt;
}

// The samples of an MDS folder (LLM Foundry's fine-tuning shards: `prompt` and
// `response` str columns) as records of their str, json and int columns.
std::vector<Record> read_mds_records(const std::string& dir) {
  const MdsDataset dataset(dir);
  std::vector<Record> records;
  for (uint64_t i = 0; i < dataset.size(); ++i) {
    const MdsShardInfo& shard = dataset.shard_of(i);
    Record r{fmt::format("{}: sample {}", dir, i), Json::object()};
    for (size_t c = 0; c < shard.column_names.size(); ++c) {
      const std::string& name = shard.column_names[c];
      const std::string& encoding = shard.column_encodings[c];
      if (encoding == "str") r.value[name] = dataset.str(i, name);
      if (encoding == "int") r.value[name] = dataset.integer(i, name);
      if (encoding == "json") {
        r.value[name] = Json::parse(dataset.str(i, name), nullptr, false);
        HONE_CHECK(!r.value[name].is_discarded(), "{}: column '{}' is not valid JSON", r.where, name);
      }
    }
    records.push_back(std::move(r));
  }
  return records;
}

// One turn of LLM Foundry's pre-tokenized samples: the prompt's ids, then the response's.
struct TokenTurn {
  std::vector<int32_t> prompt, response;
};

// Whether an MDS folder holds LLM Foundry's pre-tokenized samples
// (convert_finetuning_dataset.py given a tokenizer): a `turns` column, or
// `input_ids` and `labels` from its versions before multi-turn samples.
bool is_pretokenized(const MdsDataset& dataset) {
  if (dataset.shards().empty()) return false;
  const MdsShardInfo& shard = dataset.shards().front();
  return shard.has_column("turns") || (shard.has_column("input_ids") && shard.has_column("labels"));
}

// The ids a JSON list holds; `what` names the list in errors. With
// `ignore_allowed`, -100 (no loss here) may stand for an id.
std::vector<int32_t> token_id_list(const Json& list, const std::string& what, bool ignore_allowed = false) {
  std::vector<int32_t> ids;
  for (const Json& id : list) {
    const bool valid = id.is_number_integer() && ((id.get<int64_t>() >= 0 && id.get<int64_t>() <= INT32_MAX) ||
                                                  (ignore_allowed && id.get<int64_t>() == kIgnoreTarget));
    HONE_CHECK(valid, "{} holds {}, not a token id{}", what, id.dump(), ignore_allowed ? " or -100" : "");
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

std::vector<int32_t> json_token_ids(const Json& turn, const char* key, const std::string& where, size_t index) {
  auto it = turn.find(key);
  HONE_CHECK(it != turn.end() && it->is_array(), "{}: turn {} has no '{}' list of token ids", where, index, key);
  return token_id_list(*it, fmt::format("{}: turn {}: '{}'", where, index, key));
}

void check_in_vocabulary(int32_t id, const Tokenizer& t, const std::string& where) {
  HONE_CHECK(id < t.vocab_size(),
             "{}: token id {} is beyond this tokenizer's {} ids: were the samples tokenized with another?", where, id,
             t.vocab_size());
}

// Whether records are already tokenized as Hugging Face's Trainer takes them (an `input_ids` list).
bool holds_token_ids(const std::vector<Record>& records) {
  return !records.empty() && records.front().value.contains("input_ids") &&
         records.front().value["input_ids"].is_array();
}

// A record tokenized as Hugging Face's Trainer takes it: `input_ids`; `labels`
// of the same length, -100 where no loss applies (input_ids, all learned, when
// absent); `attention_mask`, whose 0s mark padding, left out.
TokenizedSample aligned_token_sample(const Record& r, const Tokenizer& t) {
  const auto list = [&](const char* key, bool ignore_allowed) {
    const Json& value = r.value[key];
    HONE_CHECK(value.is_array(), "{}: '{}' must be a list of token ids", r.where, key);
    return token_id_list(value, fmt::format("{}: '{}'", r.where, key), ignore_allowed);
  };
  HONE_CHECK(r.value.contains("input_ids"), "{}: no 'input_ids' (the first record has them)", r.where);
  const std::vector<int32_t> tokens = list("input_ids", false);
  const std::vector<int32_t> labels = r.value.contains("labels") ? list("labels", true) : tokens;
  const std::vector<int32_t> mask =
      r.value.contains("attention_mask") ? list("attention_mask", false) : std::vector<int32_t>(tokens.size(), 1);
  HONE_CHECK(labels.size() == tokens.size() && mask.size() == tokens.size(),
             "{}: {} input_ids, {} labels and {} attention_mask: they go position by position", r.where, tokens.size(),
             labels.size(), mask.size());
  TokenizedSample s;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (mask[i] == 0) continue;
    check_in_vocabulary(tokens[i], t, r.where);
    if (labels[i] != kIgnoreTarget) check_in_vocabulary(labels[i], t, r.where);
    s.tokens.push_back(tokens[i]);
    s.labels.push_back(labels[i]);
  }
  return s;
}

std::vector<TokenTurn> token_turns(const MdsDataset& dataset, uint64_t i, const std::string& where,
                                   const std::string& bytes_dtype) {
  if (!dataset.shard_of(i).has_column("turns")) {
    return {{dataset.tokens(i, bytes_dtype, "input_ids"), dataset.tokens(i, bytes_dtype, "labels")}};
  }
  const Json turns = Json::parse(dataset.str(i, "turns"), nullptr, false);
  HONE_CHECK(!turns.is_discarded() && turns.is_array() && !turns.empty(),
             "{}: column 'turns' is not a JSON list of turns", where);
  std::vector<TokenTurn> out;
  for (size_t k = 0; k < turns.size(); ++k) {
    HONE_CHECK(turns[k].is_object(), "{}: turn {} is not an object of input_ids and labels", where, k);
    out.push_back({json_token_ids(turns[k], "input_ids", where, k), json_token_ids(turns[k], "labels", where, k)});
  }
  return out;
}

// The turns in one sequence, as LLM Foundry's collator stitches them: each
// turn's prompt (learned with train_on_input), then its response (learned if
// every response is, or if it is the last); EOS ends the last response unless
// it ends with EOS already.
TokenizedSample stitch_turns(std::vector<TokenTurn> turns, const Tokenizer& t, const InstructOptions& o,
                             const std::string& where) {
  TokenizedSample s;
  for (size_t k = 0; k < turns.size(); ++k) {
    const bool last = k + 1 == turns.size();
    std::vector<int32_t>& response = turns[k].response;
    if (last && t.eos_id() && (response.empty() || response.back() != *t.eos_id())) response.push_back(*t.eos_id());
    const auto append = [&](const std::vector<int32_t>& ids, bool learn) {
      for (int32_t id : ids) {
        check_in_vocabulary(id, t, where);
        s.tokens.push_back(id);
        s.labels.push_back(learn ? id : kIgnoreTarget);
      }
    };
    append(turns[k].prompt, o.train_on_input);
    append(response, o.train_on_every_response || last);
  }
  return s;
}

// The rows of a Parquet file (Hugging Face datasets) as records of their columns.
std::vector<Record> read_parquet_records(const std::string& path) {
  const ParquetFile file(path);
  std::vector<Record> records;
  for (size_t g = 0; g < file.row_groups(); ++g) {
    for (const auto& row : file.read_rows(g))
      records.push_back({fmt::format("{}: row {}", path, records.size()), Json(row)});
  }
  return records;
}

std::vector<Record> read_file_records(const std::string& path) {
  if (is_parquet_name(path)) return read_parquet_records(path);
  std::string base = path;
  for (const char* suffix : {".gz", ".zst", ".zstd"}) {
    if (base.ends_with(suffix)) base.resize(base.size() - std::string_view(suffix).size());
  }
  HONE_CHECK(base.ends_with(".json") || base.ends_with(".jsonl") || base.ends_with(".ndjson"),
             "{}: instruct datasets are .jsonl or .json files (optionally .gz or .zst), .parquet files or MDS folders",
             path);
  InputStream in(path);
  std::vector<Record> records;
  // `whole`, when given, is the file's text: a line that fails may be part of
  // one JSON value written across lines, which is named as such.
  const auto add_line = [&](const std::string& line, uint64_t n, const std::string* whole = nullptr) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) return;
    const std::string where = fmt::format("{}:{}", path, n);
    try {
      records.push_back({where, parse_json_text<Json>(line, where)});
    } catch (const Error&) {
      if (whole) {
        const Json value = Json::parse(*whole, nullptr, /*allow_exceptions=*/false);
        HONE_CHECK(value.is_discarded(),
                   "{}: one JSON {} across lines: expected an array of records, or JSON Lines (a record a line)", path,
                   value.type_name());
      }
      throw;
    }
  };
  if (base.ends_with(".json")) {
    // A JSON array of records, or JSON Lines under a .json name (what Hugging
    // Face datasets' to_json() writes, and load_dataset("json") reads either).
    const std::string text = in.read_all();
    // A UTF-8 byte-order mark before the array (a Windows editor's) is no record's.
    const size_t first = text.find_first_not_of(" \t\r\n", text.starts_with("\xEF\xBB\xBF") ? 3 : 0);
    if (first != std::string::npos && text[first] == '[') {
      const Json all = parse_json_text<Json>(text, path);
      for (size_t i = 0; i < all.size(); ++i) records.push_back({fmt::format("{}: record {}", path, i), all[i]});
    } else {
      std::istringstream lines(text);
      std::string line;
      for (uint64_t n = 1; std::getline(lines, line); ++n) add_line(line, n, &text);
    }
  } else {
    std::string line;
    for (uint64_t n = 1; in.read_line(line); ++n) add_line(line, n);
  }
  for (const Record& r : records) HONE_CHECK(r.value.is_object(), "{}: expected a JSON object", r.where);
  return records;
}

// The records of every file a folder holds (hidden ones and other files left
// out) or a glob pattern matches, in name order: Hugging Face datasets' shards
// (data/train-00000-of-00002.parquet, ...).
std::vector<Record> read_sharded_records(const std::string& path) {
  std::vector<std::string> files;
  const auto is_records = [](const std::string& name) { return is_parquet_name(name) || is_jsonl_name(name); };
  if (std::filesystem::is_directory(path)) {
    for (const auto& entry : std::filesystem::directory_iterator(path)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && !name.starts_with(".") && is_records(name)) files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    HONE_CHECK(!files.empty(), "{}: a folder without record files (.jsonl, .json, .parquet)", path);
  } else {
    files = expand_patterns({path});
  }
  std::vector<Record> records;
  for (const std::string& file : files) {
    std::vector<Record> more = read_file_records(file);
    records.insert(records.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  return records;
}

}  // namespace

std::vector<Record> read_records(const std::string& path) {
  if (is_mds_folder(path)) return read_mds_records(path);
  const bool pattern = !std::filesystem::exists(path) && path.find_first_of("*?[") != std::string::npos;
  if (pattern || std::filesystem::is_directory(path)) return read_sharded_records(path);
  return read_file_records(path);
}

namespace {

std::string column_of(const std::string& field, const InstructOptions& o) {
  auto it = o.column_map.find(field);
  return it == o.column_map.end() ? field : it->second;
}

// A template field's text. The plain template reads LLM Foundry's records too:
// without a column_map entry, a record with no `input` (`output`) column is read
// from `prompt` (`response`).
bool holds_list(const Record& r, const std::string& column) {
  const auto it = r.value.find(column);
  return it != r.value.end() && it->is_array();
}

// The template that reads a record of another tool's layout as it does, said
// where the configured one finds no column it needs; empty when none does.
std::string layout_hint(const Record& r, const InstructOptions& o) {
  const auto has = [&](const char* column) { return r.value.contains(column); };
  const auto suggest = [&](InstructTemplate format, const char* what, const char* name) {
    return o.format == format ? std::string() : fmt::format("; {} is the {} template's: dataset.template: {}", what, name, name);
  };
  if (has("messages") || has("conversations") || (holds_list(r, "prompt") && holds_list(r, "completion")))
    return suggest(InstructTemplate::chat, "a conversation (TRL's and torchtune's chat records)", "chat");
  if (has("prompt") && (has("response") || has("completion")))
    return suggest(InstructTemplate::plain, "a prompt/response record (LLM Foundry's; TRL's prompt/completion)", "plain");
  if (has("text")) return suggest(InstructTemplate::text, "a text record (TRL's language modeling)", "text");
  return "";
}

std::string text_field(const Record& r, const std::string& field, const InstructOptions& o, bool required = true) {
  std::string column = column_of(field, o);
  // The plain template also reads LLM Foundry's prompt/response and TRL's
  // prompt/completion records (a column_map entry aside).
  std::vector<const char*> others;
  if (o.format == InstructTemplate::plain && !o.column_map.contains(field)) {
    if (field == "input") others = {"prompt"};
    if (field == "output") others = {"response", "completion"};
  }
  for (const char* other : others) {
    if (!r.value.contains(column) && r.value.contains(other)) column = other;
  }
  auto it = r.value.find(column);
  if (it == r.value.end() || it->is_null()) {
    HONE_CHECK(!required || it == r.value.end(), "{}: column '{}' is null (the template's '{}')", r.where, column,
               field);
    HONE_CHECK(!required, "{}: no '{}' column{} (the template's '{}'; map another with dataset.column_map.{}){}",
               r.where, column, others.empty() ? "" : fmt::format(" nor '{}'", fmt::join(others, "' nor '")), field,
               field, layout_hint(r, o));
    return "";
  }
  HONE_CHECK(it->is_string(), "{}: column '{}' is not a string", r.where, column);
  return it->get<std::string>();
}

int32_t special_id(const Tokenizer& t, const std::string& token, const char* format) {
  auto id = t.special_token_id(token);
  HONE_CHECK(id.has_value(), "the {} chat format needs the special token {}, which this {} tokenizer does not have "
             "(another chat_format, or the plain template for plain text: dataset.* keys in training)",
             format, token, t.kind());
  return *id;
}

// The messages of a JSON list of them, in either of the two layouts chat
// datasets come in (torchtune's conversation styles): OpenAI's {"role",
// "content"} and ShareGPT's {"from": "system" | "human" | "gpt", "value"};
// `prompt`: they are the record's prompt.
std::vector<ChatMessage> message_list(const Record& r, const std::string& column, bool prompt) {
  const Json& list = r.value.at(column);
  const auto string_field = [&](const Json& m, size_t index, const char* key) {
    HONE_CHECK(m.contains(key) && m[key].is_string(), "{}: message {} of '{}' has no string '{}'", r.where, index,
               column, key);
    return m[key].get<std::string>();
  };
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& m = list[i];
    HONE_CHECK(m.is_object(), "{}: message {} of '{}' is not an object", r.where, i, column);
    const bool tool_calls = m.contains("tool_calls") && !m["tool_calls"].is_null() && !m["tool_calls"].empty();
    // Compared, not read: a role of another type is named below.
    const bool tool_role = m.contains("role") && (m["role"] == "tool" || m["role"] == "ipython");
    HONE_CHECK(!tool_calls && !tool_role,
               "{}: message {} of '{}' calls a tool or answers one (tool_calls, role {}), which hone's chat formats "
               "do not write yet: leave such records out",
               r.where, i, column, m.value("role", Json("assistant")).dump());
    const bool sharegpt = !m.contains("role") && m.contains("from");
    const char* role_key = sharegpt ? "from" : "role";
    const std::string given = string_field(m, i, role_key);
    const std::string role = !sharegpt ? given : given == "human" ? "user" : given == "gpt" ? "assistant" : given;
    HONE_CHECK(role == "system" || role == "user" || role == "assistant", "{}: message {} of '{}': {} '{}' is not {}",
               r.where, i, column, role_key, given, sharegpt ? "system, human or gpt" : "system, user or assistant");
    const char* content_key = sharegpt ? "value" : "content";
    if (!sharegpt && m.contains("content") && m["content"].is_array()) {
      // OpenAI's content parts: the text parts' texts, in order.
      std::string text;
      for (const Json& part : m["content"]) {
        HONE_CHECK(part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
                       part["text"].is_string(),
                   "{}: message {} of '{}': a content part that is not {{\"type\": \"text\", \"text\": ...}} "
                   "(hone trains on text): {}",
                   r.where, i, column, part.dump().substr(0, 80));
        text += part["text"].get<std::string>();
      }
      messages.push_back({role, std::move(text), prompt});
      continue;
    }
    messages.push_back({role, string_field(m, i, content_key), prompt});
  }
  return messages;
}

// A conversation: the record's `messages` (without a column_map entry for it,
// ShareGPT's `conversations` where there are none), or TRL's conversational
// prompt/completion, a `prompt` list of messages (never learned) and a
// `completion` list.
std::vector<ChatMessage> messages_of(const Record& r, const InstructOptions& o) {
  std::string column = column_of("messages", o);
  const bool mapped = o.column_map.contains("messages");
  if (!mapped && !r.value.contains(column) && r.value.contains("conversations")) column = "conversations";
  const std::string prompt = column_of("prompt", o), completion = column_of("completion", o);
  if (!mapped && !r.value.contains(column) && holds_list(r, prompt) && holds_list(r, completion)) {
    std::vector<ChatMessage> messages = message_list(r, prompt, /*prompt=*/true);
    for (ChatMessage& m : message_list(r, completion, /*prompt=*/false)) messages.push_back(std::move(m));
    return messages;
  }
  HONE_CHECK(holds_list(r, column), "{}: no '{}' list of messages{}{}", r.where, column,
             column == "messages" ? " (nor a ShareGPT 'conversations' list, nor TRL's 'prompt' and 'completion' "
                                    "lists)"
                                  : "",
             layout_hint(r, o));
  return message_list(r, column, /*prompt=*/false);
}

// The pieces of a conversation in the chat format; with `generation_prompt` the
// assistant's header follows, for the model to answer after it. A learned
// message is learned whole, its header and end of turn included, as
// torchtune's tokenizers mask a message.
std::vector<Piece> chat_pieces(std::vector<ChatMessage> messages, const Tokenizer& t, const InstructOptions& o,
                               const std::string& where, bool generation_prompt) {
  const bool injected_system = !o.system_prompt.empty();
  if (injected_system) {  // in place of the record's own, as torchtune's new_system_prompt
    std::erase_if(messages, [](const ChatMessage& m) { return m.role == "system"; });
    messages.insert(messages.begin(), {"system", o.system_prompt});
  }
  size_t last_reply = messages.size();
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == "assistant") last_reply = i;
  const auto learned = [&](size_t i) {
    return messages[i].role == "assistant" && !messages[i].prompt && (o.train_on_every_response || i == last_reply);
  };
  std::vector<Piece> pieces;
  switch (*chat_format_of(o)) {
    case ChatFormat::llama3: {
      special_id(t, "<|start_header_id|>", "llama3");
      special_id(t, "<|eot_id|>", "llama3");
      pieces.push_back({.text = "<|begin_of_text|>", .special = true});
      for (size_t i = 0; i < messages.size(); ++i) {
        const auto& [role, content, in_prompt] = messages[i];
        const bool reply = learned(i), injected = injected_system && i == 0;
        pieces.push_back({.text = "<|start_header_id|>" + role + "<|end_header_id|>\n\n", .trainable = reply,
                          .special = true, .injected = injected});
        // Trimmed, as Meta's template and torchtune's Llama 3 tokenizer trim each message.
        pieces.push_back({.text = std::string(python_strip(content)), .trainable = reply, .injected = injected});
        pieces.push_back({.text = "<|eot_id|>", .trainable = reply, .special = true, .injected = injected});
      }
      if (generation_prompt) pieces.push_back({.text = "<|start_header_id|>assistant<|end_header_id|>\n\n", .special = true});
      break;
    }
    case ChatFormat::chatml: {
      special_id(t, "<|im_start|>", "chatml");
      special_id(t, "<|im_end|>", "chatml");
      for (size_t i = 0; i < messages.size(); ++i) {
        const auto& [role, content, in_prompt] = messages[i];
        const bool reply = learned(i), injected = injected_system && i == 0;
        pieces.push_back({.text = "<|im_start|>" + role + "\n", .trainable = reply, .special = true,
                          .injected = injected});
        pieces.push_back({.text = content, .trainable = reply, .injected = injected});
        pieces.push_back({.text = "<|im_end|>", .trainable = reply, .special = true, .injected = injected});
        pieces.push_back({.text = "\n", .trainable = reply, .injected = injected});
      }
      if (generation_prompt) pieces.push_back({.text = "<|im_start|>assistant\n", .special = true});
      break;
    }
    case ChatFormat::llama2: {
      // <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s>
      HONE_CHECK(t.bos_id() && t.eos_id(), "the llama2 chat format needs BOS and EOS tokens");
      std::string system;
      bool system_injected = false, open_turn = false;
      for (size_t i = 0; i < messages.size(); ++i) {
        const auto& [role, content, in_prompt] = messages[i];
        if (role == "system") {
          system = content;
          system_injected = injected_system && i == 0;
        } else if (role == "user") {
          pieces.push_back({.id = t.bos_id()});
          if (system.empty()) {
            pieces.push_back({.text = "[INST] " + content + " [/INST]"});
          } else {
            // The system block a piece of its own (dataset.system_prompt's is never
            // learned), cut where the whole text's tokens are cut too: before the
            // space of " <<SYS>>" and after its closing blank line.
            pieces.push_back({.text = "[INST]"});
            pieces.push_back({.text = " <<SYS>>\n" + system + "\n<</SYS>>\n\n", .injected = system_injected});
            pieces.push_back({.text = content + " [/INST]"});
          }
          system.clear();
          open_turn = true;
        } else {
          HONE_CHECK(open_turn, "{}: in the llama2 format an assistant message follows a user message", where);
          pieces.push_back({.text = " " + content, .trainable = learned(i)});
          pieces.push_back({.trainable = learned(i), .id = t.eos_id()});
          open_turn = false;
        }
      }
      break;
    }
  }
  return pieces;
}

// Whether a text encoded alone starts with a dummy prefix ("▁", or a space)
// that the same text has nowhere else: SentencePiece's add_dummy_prefix,
// tokenizer.json's Prepend normalizer and Metaspace, ByteLevel's add_prefix_space.
bool adds_dummy_prefix(const Tokenizer& t) {
  std::vector<int32_t> apart = t.encode("\n");
  t.encode_into("a", apart);
  return t.encode("\na") != apart;
}

// Whether the text of piece `i` continues the text before it, as one text
// (the template's rendering) has it: after text, not after a token given by id
// or a special token.
bool continues_text(const std::vector<Piece>& pieces, size_t i, const Tokenizer& t) {
  if (i == 0 || pieces[i].id || pieces[i].special || pieces[i - 1].id || pieces[i - 1].text.empty()) return false;
  if (!pieces[i - 1].special) return true;
  return std::ranges::none_of(t.special_tokens(), [&](const auto& s) { return pieces[i - 1].text.ends_with(s.first); });
}

// The ids of `text` where it continues other text: encoded alone, a tokenizer
// with a dummy prefix would start it with one (an answer after "[/INST]" as
// "▁▁Sure" where the whole text has "▁Sure", and where torchtune trims it). So
// it is encoded after a newline, whose own ids are dropped (should the two
// merge, `text` is encoded alone).
void encode_continuation(const Tokenizer& t, std::string_view text, std::vector<int32_t>& out) {
  const std::vector<int32_t> newline = t.encode("\n");
  const std::vector<int32_t> ids = t.encode("\n" + std::string(text));
  if (ids.size() >= newline.size() && std::equal(newline.begin(), newline.end(), ids.begin())) {
    out.insert(out.end(), ids.begin() + std::ptrdiff_t(newline.size()), ids.end());
  } else {
    t.encode_into(text, out);
  }
}

TokenizedSample tokenize(const std::vector<Piece>& pieces, const Tokenizer& t, bool train_on_input) {
  TokenizedSample s;
  std::vector<int32_t> ids;
  const bool dummy_prefix = adds_dummy_prefix(t);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    ids.clear();
    if (p.id) ids.push_back(*p.id);
    else if (dummy_prefix && continues_text(pieces, i, t)) encode_continuation(t, p.text, ids);
    else t.encode_into(p.text, ids, p.special ? SpecialTokens::recognize : SpecialTokens::as_text);
    const bool learn = p.trainable || (train_on_input && !p.injected);
    for (int32_t id : ids) {
      s.tokens.push_back(id);
      s.labels.push_back(learn ? id : kIgnoreTarget);
    }
  }
  return s;
}

// Llama-family tokenizers start sequences with their BOS; GPT-2's BOS is its EOS
// (<|endoftext|>) and Hugging Face does not prepend it: neither do we.
std::optional<int32_t> leading_bos(const Tokenizer& t) {
  if (t.bos_id() && t.bos_id() != t.eos_id()) return t.bos_id();
  return std::nullopt;
}

// Cuts a sample to max_seq_len tokens (counting it in `truncated`); whether it
// has anything left to learn (the first token is never a target: a label after it).
bool fit_sample(TokenizedSample& s, int64_t max_seq_len, int64_t& truncated) {
  if (int64_t(s.tokens.size()) > max_seq_len) {
    s.tokens.resize(size_t(max_seq_len));
    s.labels.resize(size_t(max_seq_len));
    ++truncated;
  }
  const auto ignored = [](int32_t label) { return label == kIgnoreTarget; };
  return s.labels.size() >= 2 && !std::all_of(s.labels.begin() + 1, s.labels.end(), ignored);
}

// A prompt/response sample of a non-chat template: the template's prompt
// around `fields` and the response, as a user's and an assistant's message in
// the chat format where one is given; else BOS where the family uses one, the
// prompt, the response and EOS.
std::vector<Piece> template_pieces(const std::map<std::string, std::string>& fields, const std::string& response,
                                   const Tokenizer& t, const InstructOptions& o, const std::string& where) {
  if (chat_format_of(o)) {
    return chat_pieces({{"user", format_prompt(fields, o)}, {"assistant", response}}, t, o, where,
                       /*generation_prompt=*/false);
  }
  std::vector<Piece> pieces;
  if (auto bos = leading_bos(t)) pieces.push_back({.id = bos});
  pieces.push_back({.text = format_prompt(fields, o)});
  pieces.push_back({.text = response, .trainable = true});
  HONE_CHECK(t.eos_id(), "the tokenizer has no EOS token to end responses with");
  pieces.push_back({.trainable = true, .id = t.eos_id()});
  return pieces;
}

// The template field a prompt string fills: alpaca's instruction, summarize's
// dialogue, plain's input.
const char* prompt_field(const InstructOptions& o) {
  return o.format == InstructTemplate::alpaca ? "instruction" : o.format == InstructTemplate::summarize ? "dialogue"
                                                                                                          : "input";
}

}  // namespace

std::vector<int32_t> prompt_tokens(const Tokenizer& t, const std::string& text, const InstructOptions& o) {
  std::vector<Piece> pieces;
  if (o.format == InstructTemplate::chat) {
    pieces = chat_pieces({{"user", text}}, t, o, "the prompt", /*generation_prompt=*/true);
  } else if (chat_format_of(o)) {
    pieces = chat_pieces({{"user", format_prompt({{prompt_field(o), text}}, o)}}, t, o, "the prompt",
                         /*generation_prompt=*/true);
  } else {
    if (auto bos = leading_bos(t)) pieces.push_back({.id = bos});
    pieces.push_back({.text = format_prompt({{prompt_field(o), text}}, o), .special = true});
  }
  return tokenize(pieces, t, false).tokens;
}

std::optional<int32_t> end_of_answer_token(const Tokenizer& t, const InstructOptions& o) {
  const std::optional<ChatFormat> chat_format = chat_format_of(o);
  if (chat_format == ChatFormat::llama3) return special_id(t, "<|eot_id|>", "llama3");
  if (chat_format == ChatFormat::chatml) return special_id(t, "<|im_end|>", "chatml");
  return t.eos_id();
}

std::optional<std::string> chat_template(const Tokenizer& t, const InstructOptions& o) {
  if (o.format != InstructTemplate::chat) return std::nullopt;
  // Strings enter the template as JSON literals, which Jinja reads alike (UTF-8 kept as is).
  const auto literal = [](const std::string& text) { return Json(text).dump(); };
  std::string jinja;
  if (!o.system_prompt.empty()) {
    jinja += "{%- set messages = [{'role': 'system', 'content': " + literal(o.system_prompt) +
             "}] + messages | rejectattr('role', 'equalto', 'system') | list %}";
  }
  switch (*chat_format_of(o)) {
    case ChatFormat::llama3:
      special_id(t, "<|eot_id|>", "llama3");
      return jinja +
             "{{- '<|begin_of_text|>' }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
             "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
             "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";
    case ChatFormat::chatml:
      special_id(t, "<|im_end|>", "chatml");
      return jinja +
             "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
             "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
    case ChatFormat::llama2: {
      HONE_CHECK(t.bos_id() && t.eos_id(), "the llama2 chat format needs BOS and EOS tokens");
      const auto token_text = [&](int32_t id) {
        for (const auto& [text, special] : t.special_tokens())
          if (special == id) return literal(text);
        return literal(t.decode(std::vector<int32_t>{id}));
      };
      // A system message applies to the next user turn; Jinja keeps loop state in a namespace.
      return jinja + "{%- set state = namespace(system='', open=false) %}{%- for message in messages %}"
                     "{%- if message['role'] == 'system' %}{%- set state.system = message['content'] %}"
                     "{%- elif message['role'] == 'user' %}{{- " + token_text(*t.bos_id()) + " + '[INST] ' }}"
                     "{%- if state.system %}{{- '<<SYS>>\\n' + state.system + '\\n<</SYS>>\\n\\n' }}{%- endif %}"
                     "{{- message['content'] + ' [/INST]' }}{%- set state.system = '' %}{%- set state.open = true %}"
                     "{%- else %}{%- if not state.open %}{{- raise_exception('in the llama2 format an assistant "
                     "message follows a user message') }}{%- endif %}{{- ' ' + message['content'] + " +
                     token_text(*t.eos_id()) + " }}{%- set state.open = false %}{%- endif %}{%- endfor %}";
    }
  }
  return std::nullopt;
}

InstructTemplate parse_instruct_template(const std::string& name) {
  if (name == "alpaca") return InstructTemplate::alpaca;
  if (name == "summarize") return InstructTemplate::summarize;
  if (name == "plain") return InstructTemplate::plain;
  if (name == "chat") return InstructTemplate::chat;
  if (name == "text") return InstructTemplate::text;
  fail("unknown dataset.template '{}': expected alpaca, summarize, plain, chat or text", name);
}

std::vector<std::string> fields_read(InstructTemplate format, bool preference_pairs) {
  if (preference_pairs) return {"prompt", "chosen", "rejected"};
  switch (format) {
    case InstructTemplate::alpaca: return {"instruction", "input", "output"};
    case InstructTemplate::summarize: return {"dialogue", "output"};
    case InstructTemplate::plain: return {"input", "output"};
    case InstructTemplate::chat: return {"messages", "prompt", "completion"};
    case InstructTemplate::text: return {"text"};
  }
  return {};
}

std::vector<std::string> fields_any_template_reads() {
  std::vector<std::string> fields;
  const auto add = [&](const std::vector<std::string>& read) {
    for (const std::string& field : read)
      if (std::ranges::find(fields, field) == fields.end()) fields.push_back(field);
  };
  for (const InstructTemplate format : {InstructTemplate::alpaca, InstructTemplate::summarize, InstructTemplate::plain,
                                        InstructTemplate::chat, InstructTemplate::text}) {
    add(fields_read(format, /*preference_pairs=*/false));
  }
  add(fields_read(InstructTemplate::chat, /*preference_pairs=*/true));
  fields.push_back("conversations");
  return fields;
}

ChatFormat parse_chat_format(const std::string& name) {
  if (name == "llama3") return ChatFormat::llama3;
  if (name == "llama2") return ChatFormat::llama2;
  if (name == "chatml") return ChatFormat::chatml;
  fail("unknown dataset.chat_format '{}': expected llama3, llama2 or chatml", name);
}

std::string format_prompt(const std::map<std::string, std::string>& fields, const InstructOptions& o) {
  auto get = [&](const char* name) {
    auto it = fields.find(name);
    return it == fields.end() ? std::string() : it->second;
  };
  switch (o.format) {
    case InstructTemplate::alpaca: return fill(get("input").empty() ? kAlpacaNoInput : kAlpacaWithInput, fields);
    case InstructTemplate::summarize: return fill(kSummarize, fields);
    case InstructTemplate::plain:
    case InstructTemplate::text: return get("input");
    case InstructTemplate::chat: break;
  }
  fail("format_prompt: chat prompts are built from messages");
}

InstructDataset load_instruct_dataset(const std::string& path, const Tokenizer& t, const InstructOptions& o) {
  HONE_CHECK(o.max_seq_len >= 2, "max_seq_len must be at least 2, got {}", o.max_seq_len);
  HONE_CHECK(o.format != InstructTemplate::text || !o.in_chat_format,
             "dataset.template text learns whole texts, which have no prompt and answer to write as a chat: "
             "in_chat_format does not apply");
  InstructDataset out;
  const auto keep = [&](TokenizedSample s) {
    if (fit_sample(s, o.max_seq_len, out.truncated)) out.samples.push_back(std::move(s));
    else ++out.dropped;
  };
  const auto usable = [&] {
    HONE_CHECK(!out.samples.empty(), "{}: no usable samples ({} dropped with nothing left to learn)", path,
               out.dropped);
    return std::move(out);
  };
  if (is_mds_folder(path)) {
    const MdsDataset dataset(path);
    if (is_pretokenized(dataset)) {
      for (uint64_t i = 0; i < dataset.size(); ++i) {
        const std::string where = fmt::format("{}: sample {}", path, i);
        keep(stitch_turns(token_turns(dataset, i, where, o.token_encoding_type), t, o, where));
      }
      return usable();
    }
  }
  const std::vector<Record> records = read_records(path);
  if (holds_token_ids(records)) {
    for (const Record& r : records) keep(aligned_token_sample(r, t));
    return usable();
  }
  for (const Record& r : records) {
    std::vector<Piece> pieces;
    if (o.format == InstructTemplate::chat) {
      pieces = chat_pieces(messages_of(r, o), t, o, r.where, /*generation_prompt=*/false);
    } else if (o.format == InstructTemplate::text) {
      // TRL's language modeling: the whole text learned (no prompt), then EOS.
      pieces = template_pieces({}, text_field(r, "text", o), t, o, r.where);
    } else {
      std::map<std::string, std::string> fields;
      switch (o.format) {
        case InstructTemplate::alpaca:
          fields["instruction"] = text_field(r, "instruction", o);
          fields["input"] = text_field(r, "input", o, /*required=*/false);
          break;
        case InstructTemplate::summarize: fields["dialogue"] = text_field(r, "dialogue", o); break;
        default: fields["input"] = text_field(r, "input", o); break;
      }
      pieces = template_pieces(fields, text_field(r, "output", o), t, o, r.where);
    }
    keep(tokenize(pieces, t, o.train_on_input));
  }
  return usable();
}

namespace {

// TRL's extract_prompt of two strings: the text before the first byte they
// differ at (moved back to a character's start, and before a space there), or
// the shorter whole.
size_t shared_start(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  if (n == a.size() || n == b.size()) return n;
  while (n > 0 && (static_cast<unsigned char>(a[n]) & 0xC0) == 0x80) --n;
  if (n > 0 && a[n - 1] == ' ') --n;
  return n;
}

// A preference record's chosen and rejected sides: each its conversation, or
// the record's prompt with its answer. Without a prompt column the prompt is
// the two sides' shared start (TRL's implicit prompt): their first messages
// alike (never learned), or their strings' shared text.
std::pair<TokenizedSample, TokenizedSample> preference_pair(const Record& r, const Tokenizer& t,
                                                            const InstructOptions& o) {
  const auto side_of = [&](const std::string& side) -> const Json& {
    const std::string column = column_of(side, o);
    const auto it = r.value.find(column);
    HONE_CHECK(it != r.value.end() && (it->is_array() || it->is_string()),
               "{}: no '{}' column{} (a list of messages, or an answer string; map another with "
               "dataset.column_map.{})",
               r.where, column, it == r.value.end() ? "" : " of messages or text", side);
    return *it;
  };
  const Json &chosen = side_of("chosen"), &rejected = side_of("rejected");
  HONE_CHECK(chosen.is_array() == rejected.is_array(), "{}: '{}' and '{}' must both be lists of messages or both "
             "strings", r.where, column_of("chosen", o), column_of("rejected", o));
  const std::string prompt_column = column_of("prompt", o);
  const bool has_prompt = r.value.contains(prompt_column);
  const auto tokenized = [&](const std::vector<Piece>& pieces) { return tokenize(pieces, t, o.train_on_input); };
  // Another template has no turns to learn in a conversation: each pair would be dropped as learning nothing.
  HONE_CHECK(!chosen.is_array() || o.format == InstructTemplate::chat,
             "{}: '{}' and '{}' are conversations (lists of messages), the chat template's: dataset.template: chat",
             r.where, column_of("chosen", o), column_of("rejected", o));
  if (chosen.is_array()) {
    std::vector<ChatMessage> prompt;
    if (has_prompt && holds_list(r, prompt_column)) prompt = message_list(r, prompt_column, /*prompt=*/true);
    else if (has_prompt) prompt = {{"user", text_field(r, "prompt", o), /*prompt=*/true}};
    std::vector<ChatMessage> sides[2] = {message_list(r, column_of("chosen", o), false),
                                         message_list(r, column_of("rejected", o), false)};
    if (!has_prompt) {
      size_t shared = 0;
      while (shared + 1 < sides[0].size() && shared + 1 < sides[1].size() &&
             sides[0][shared].role == sides[1][shared].role && sides[0][shared].content == sides[1][shared].content) {
        ++shared;
      }
      for (auto& side : sides) for (size_t i = 0; i < shared; ++i) side[i].prompt = true;
    }
    const auto conversation = [&](std::vector<ChatMessage> side) {
      std::vector<ChatMessage> messages = prompt;
      messages.insert(messages.end(), side.begin(), side.end());
      return tokenized(chat_pieces(std::move(messages), t, o, r.where, /*generation_prompt=*/false));
    };
    return {conversation(sides[0]), conversation(sides[1])};
  }
  std::string prompt, answers[2] = {chosen.get<std::string>(), rejected.get<std::string>()};
  if (has_prompt) {
    prompt = text_field(r, "prompt", o);
  } else {
    const size_t shared = shared_start(answers[0], answers[1]);
    prompt = answers[0].substr(0, shared);
    for (std::string& answer : answers) answer.erase(0, shared);
  }
  const auto answered = [&](const std::string& answer) {
    if (o.format == InstructTemplate::chat) {
      return tokenized(chat_pieces({{"user", prompt}, {"assistant", answer}}, t, o, r.where,
                                   /*generation_prompt=*/false));
    }
    return tokenized(template_pieces({{prompt_field(o), prompt}}, answer, t, o, r.where));
  };
  return {answered(answers[0]), answered(answers[1])};
}

}  // namespace

InstructDataset load_preference_dataset(const std::string& path, const Tokenizer& t, const InstructOptions& o) {
  HONE_CHECK(o.max_seq_len >= 2, "max_seq_len must be at least 2, got {}", o.max_seq_len);
  HONE_CHECK(o.format != InstructTemplate::text, "dataset.template text learns whole texts; preference pairs are a "
             "prompt's two answers (dataset.template: chat or plain)");
  InstructDataset out;
  for (const Record& r : read_records(path)) {
    auto [chosen, rejected] = preference_pair(r, t, o);
    const bool usable = fit_sample(chosen, o.max_seq_len, out.truncated) & fit_sample(rejected, o.max_seq_len, out.truncated);
    if (!usable) {
      ++out.dropped;
      continue;
    }
    out.samples.push_back(std::move(chosen));
    out.samples.push_back(std::move(rejected));
  }
  HONE_CHECK(!out.samples.empty(), "{}: no usable pairs ({} dropped with nothing left to learn)", path, out.dropped);
  return out;
}

SampleStream::SampleStream(std::vector<TokenizedSample> samples, const SampleStreamOptions& options)
    : samples_(std::move(samples)), o_(options), rows_per_epoch_(int64_t(samples_.size())) {
  HONE_CHECK(!samples_.empty() && o_.batch_size > 0 && o_.seq_len > 0 && o_.length_multiple >= 0,
             "a sample stream needs samples and a shape");
  HONE_CHECK(o_.group_size >= 1 && int64_t(samples_.size()) % o_.group_size == 0 &&
                 (o_.group_size == 1 || (!o_.packed && !o_.group_by_length)),
             "{} samples do not make groups of {} (nor do packed or length-grouped batches)", samples_.size(),
             o_.group_size);
  for (const TokenizedSample& s : samples_) {
    HONE_CHECK(int64_t(s.tokens.size()) <= o_.seq_len, "a sample of {} tokens exceeds seq_len {}", s.tokens.size(),
               o_.seq_len);
    tokens_per_epoch_ += int64_t(s.tokens.size());
  }
  if (o_.packed) {
    // Count the rows of the first pass (later passes, reshuffled, differ a little).
    std::vector<int32_t> row(static_cast<size_t>(3 * o_.seq_len));  // tokens, targets, positions
    rows_per_epoch_ = 0;
    one_pass_ = true;
    while (!pass_done()) {
      fill_row(row.data(), row.data() + o_.seq_len, row.data() + 2 * o_.seq_len);
      ++rows_per_epoch_;
    }
    position_ = 0;
    one_pass_ = false;
  }
}

const TokenizedSample& SampleStream::sample_at(int64_t position) {
  const int64_t n = int64_t(samples_.size()), epoch = position / n, index = position % n, g = o_.group_size;
  if (!o_.shuffle && !o_.group_by_length) return samples_[size_t(index)];
  if (order_epoch_ != epoch) {
    // The order of the groups (of the samples, for groups of one).
    const int64_t groups = n / g;
    order_.resize(size_t(groups));
    std::iota(order_.begin(), order_.end(), int64_t(0));
    if (o_.shuffle) {
      Generator shuffle(o_.seed, random_stream(RandomUse::finetune_order, uint64_t(epoch)));
      for (int64_t i = groups - 1; i > 0; --i) std::swap(order_[size_t(i)], order_[shuffle.next_below(uint64_t(i + 1))]);
    }
    if (o_.group_by_length) {
      const int64_t group = kLengthGroupBatches * o_.batch_size * o_.world_size;
      const auto longer = [&](int64_t a, int64_t b) {
        return samples_[size_t(a)].tokens.size() > samples_[size_t(b)].tokens.size();
      };
      for (int64_t begin = 0; begin < n; begin += group) {
        std::stable_sort(order_.begin() + begin, order_.begin() + std::min(n, begin + group), longer);
      }
    }
    order_epoch_ = epoch;
  }
  return samples_[size_t(order_[size_t(index / g)] * g + index % g)];
}

int64_t SampleStream::fill_row(int32_t* tokens, int32_t* targets, int32_t* positions) {
  int64_t t = 0;
  do {
    if (pass_done()) break;  // an evaluation pass's end: the rest of the batch is padding
    // A row ends with its epoch (each epoch's rows hold each sample once).
    if (t > 0 && position_ % int64_t(samples_.size()) == 0) break;
    const TokenizedSample& s = sample_at(position_);
    const int64_t n = int64_t(s.tokens.size());
    if (t + n > o_.seq_len) break;  // the next sample starts the next row
    for (int64_t i = 0; i < n; ++i) {
      tokens[t + i] = s.tokens[size_t(i)];
      targets[t + i] = i + 1 < n ? s.labels[size_t(i + 1)] : kIgnoreTarget;  // no target across samples
      if (positions) positions[t + i] = int32_t(i);
    }
    t += n;
    ++position_;
  } while (o_.packed);
  for (int64_t i = 0; t + i < o_.seq_len; ++i) {  // padding: learns nothing, sees only padding
    tokens[t + i] = o_.pad_id;
    targets[t + i] = kIgnoreTarget;
    if (positions) positions[t + i] = int32_t(i);
  }
  return t;
}

Batch SampleStream::next() {
  const int64_t rows = o_.batch_size * o_.group_size, seq_len = o_.seq_len;
  Tensor tokens = Tensor::empty({rows, seq_len}, DType::i32);
  Tensor targets = Tensor::empty({rows, seq_len}, DType::i32);
  Tensor positions = o_.packed ? Tensor::empty({rows, seq_len}, DType::i32) : Tensor();
  std::vector<int32_t> skipped(static_cast<size_t>(3 * seq_len));
  // Every rank fills every row of the global batch (packing decides how many
  // samples a row takes), keeps its own, and so cuts them to the same length.
  int64_t longest = 1, sample_tokens = 0;
  for (int64_t k = 0; k < rows * o_.world_size; ++k) {
    const bool own = k / rows == o_.rank;
    const int64_t row = (k % rows) * seq_len;
    const int64_t filled = own ? fill_row(tokens.data<int32_t>() + row, targets.data<int32_t>() + row,
                                          o_.packed ? positions.data<int32_t>() + row : nullptr)
                               : fill_row(skipped.data(), skipped.data() + seq_len,
                                          o_.packed ? skipped.data() + 2 * seq_len : nullptr);
    longest = std::max(longest, filled);
    sample_tokens += filled;
  }
  if (o_.length_multiple == 0) return {tokens, targets, positions, sample_tokens};
  const int64_t length = std::min(seq_len, (longest + o_.length_multiple - 1) / o_.length_multiple * o_.length_multiple);
  const auto first_columns = [&](const Tensor& full) {
    if (!full.defined() || length == seq_len) return full;
    Tensor cut = Tensor::empty({rows, length}, DType::i32);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(full.data<int32_t>() + r * seq_len, length, cut.data<int32_t>() + r * length);
    }
    return cut;
  };
  return {first_columns(tokens), first_columns(targets), first_columns(positions), sample_tokens};
}

nlohmann::json SampleStream::state() const {
  return {{"position", position_},
          {"samples_per_epoch", int64_t(samples_.size())},
          {kShuffleStreamsKey, kShuffleStreams}};
}

void SampleStream::restore(const nlohmann::json& state) {
  check_saved_epoch(state, int64_t(samples_.size()));
  position_ = saved_position(state);
}

}  // namespace hone::data
