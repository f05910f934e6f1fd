#include "hone/train/data_sources.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>

#include "hone/core/error.hpp"
#include "hone/data/format_documents.hpp"
#include "hone/data/formats/inputs.hpp"
#include "hone/train/run_config.hpp"

namespace hone {

namespace {

namespace fs = std::filesystem;

// The documents a path key names: one PREFIX (megatron) or folder (mds), or
// Megatron's blend "W1 PATH1 W2 PATH2 ...".
struct Blend {
  std::vector<std::shared_ptr<const data::DocumentSource>> sources;
  std::vector<double> weights;  // empty: a single source
  std::string description;
};

double total_tokens(const data::DocumentSource& source) {
  double tokens = 0;
  for (int64_t d = 0; d < source.num_documents(); ++d) tokens += double(source.document_length(d));
  return tokens;
}

// Token files by a glob pattern (llm.c's "fineweb_train_*.bin"): each file it
// matches, in name order (preprocess's expand_patterns), blended by size; a
// file named twice is an error.
std::vector<std::pair<double, std::string>> with_globs_expanded(
    const Config& c, std::string_view key, const std::vector<std::pair<double, std::string>>& parts) {
  std::vector<std::pair<double, std::string>> files;
  std::vector<std::pair<std::string, std::string>> named_by;  // each file and its pattern
  try {
    for (const auto& [weight, pattern] : parts) {
      const std::vector<std::string> matches = data::expand_patterns({pattern});
      if (weight > 0 && matches.size() > 1) {
        fail("the weight {} goes before one file, not the pattern {}", weight, pattern);
      }
      for (const std::string& file : matches) {
        files.emplace_back(weight, file);
        named_by.emplace_back(file, pattern);
      }
    }
    data::check_each_file_once(named_by);
  } catch (const Error& e) {
    fail("{}: {}: {}", c.origin_of(key), key, e.what());
  }
  return files;
}

// The paths of `key` (one, or a blend) with their weights: 0 blends by the source's tokens.
std::vector<std::pair<double, std::string>> blend_parts(const Config& c, std::string_view key,
                                                        const std::string& type) {
  const std::string path = c.get<std::string>(key);
  std::vector<std::string> words;
  std::istringstream in(path);
  for (std::string w; in >> w;) words.push_back(w);
  const auto is_number = [](const std::string& w) {
    char* end = nullptr;
    std::strtod(w.c_str(), &end);
    return *end == '\0';
  };
  std::vector<std::pair<double, std::string>> parts;  // a weight of 0: by the source's tokens
  // A path with spaces in it that is there as written is one path, not a blend.
  const bool one_path = type == "megatron" ? fs::exists(path + ".idx")
                        : type == "tokens" ? fs::is_regular_file(path)
                                           : fs::is_directory(path);
  if (one_path) {
    parts.emplace_back(0.0, path);
  } else if (words.size() == 1 || std::ranges::none_of(words, is_number)) {
    // Paths without weights blend by their sizes, as Megatron's --data-path does.
    for (const std::string& w : words) parts.emplace_back(0.0, w);
  } else {
    HONE_CHECK(words.size() % 2 == 0, "{}: {} '{}' is neither one path nor 'WEIGHT PATH' pairs", c.origin_of(key), key,
               path);
    for (size_t i = 0; i < words.size(); i += 2) {
      char* end = nullptr;
      const double w = std::strtod(words[i].c_str(), &end);
      // strtod takes "inf", "nan" and 1e400 (as infinity): no weight.
      HONE_CHECK(*end == '\0' && std::isfinite(w) && w > 0, "{}: {}: '{}' should be a positive blend weight before {}",
                 c.origin_of(key), key, words[i], words[i + 1]);
      parts.emplace_back(w, words[i + 1]);
    }
  }
  return parts;
}

// `vocab_size`: token files are read once as they open, any id past it an error then.
Blend open_blend(const Config& c, std::string_view key, const std::string& type, int64_t vocab_size) {
  std::vector<std::pair<double, std::string>> parts = blend_parts(c, key, type);
  if (type == "tokens") parts = with_globs_expanded(c, key, parts);
  const std::optional<int64_t> eod = c.has("dataset.eod_id") ? std::optional(c.get<int64_t>("dataset.eod_id"))
                                                               : std::nullopt;
  Blend b;
  int64_t eod_tokens = 0;
  for (const auto& [weight, p] : parts) {
    check_path_exists(c, key, type == "megatron" ? p + ".idx" : p);
    std::shared_ptr<const data::DocumentSource> source;
    try {
      if (type == "megatron") {
        source = std::make_shared<data::MegatronDocuments>(p);
      } else if (type == "tokens") {
        auto tokens = std::make_shared<data::TokenFileDocuments>(p, eod, vocab_size);
        eod_tokens += tokens->eod_count();
        source = std::move(tokens);
      } else {
        source = std::make_shared<data::MdsDocuments>(p, c.get<std::string>("dataset.token_encoding_type"));
      }
    } catch (const Error& e) {
      fail("{}: {}: {}", c.origin_of(key), key, e.what());
    }
    b.description += (b.description.empty() ? "" : ", ") + source->describe();
    if (parts.size() > 1) b.weights.push_back(weight > 0 ? weight : total_tokens(*source));
    b.sources.push_back(std::move(source));
  }
  // An id that never occurs is not the data's: every file would silently be one document.
  HONE_CHECK(!eod || eod_tokens > 0,
             "{}: dataset.eod_id {} never occurs in {} {}: give the id between its documents (50256 in GPT-2's data, "
             "128000 in llm.c's Llama 3 shards), or drop dataset.eod_id to read each file as one document",
             c.origin_of("dataset.eod_id"), eod.value_or(0), key, b.description);
  return b;
}

// Training on each source's first documents, validation on the last
// validation_fraction of them.
TrainingData hold_out(const Blend& blend, double validation_fraction) {
  TrainingData d{.train_weights = blend.weights, .description = blend.description};
  for (const auto& source : blend.sources) {
    auto [train, validation] = data::split_documents(source, validation_fraction);
    d.train.push_back(train);
    if (validation.end > validation.first) d.validation.push_back(validation);
  }
  // A blend is only a blend if every source keeps some validation documents;
  // otherwise validate on what was held out, by size.
  if (d.validation.size() == d.train.size()) d.validation_weights = blend.weights;
  return d;
}

std::vector<data::DocumentRange> whole(const Blend& blend) {
  std::vector<data::DocumentRange> ranges;
  for (const auto& source : blend.sources) ranges.push_back({source, 0, source->num_documents()});
  return ranges;
}

}  // namespace

void check_one_validation_source(const Config& c, double default_fraction) {
  if (!c.has("dataset.validation_path")) return;
  const double fraction = c.get<double>("dataset.validation_fraction");
  HONE_CHECK(fraction == 0 || fraction == default_fraction,
             "{}: dataset.validation_fraction {} would hold data out of dataset.path for validation, where "
             "dataset.validation_path gives validation data of its own: give one of them{}",
             c.place_of("dataset.validation_fraction"), fraction,
             c.how_to_drop_the_files("dataset.validation_fraction", "dataset.validation_path"));
}

void check_pretraining_data_keys(const Config& c) {
  const std::string type = c.get<std::string>("dataset.type");
  HONE_CHECK(!c.has("dataset.eod_id") || type == "tokens",
             "{}: dataset.eod_id splits token files (dataset.type tokens) into documents; {} data holds its own",
             c.origin_of("dataset.eod_id"), type);
  // Token files without the id between documents are one document each: nothing to keep apart.
  for (const char* key : {"dataset.block_causal", "dataset.eod_mask_loss"}) {
    HONE_CHECK(type != "tokens" || c.has("dataset.eod_id") || !c.get<bool>(key),
               "{}: {} needs documents: give dataset.eod_id, the token between them (50256 in GPT-2's data), or a "
               "token file is one document",
               c.origin_of(key), key);
  }
  // Raw token bytes are MDS's; other data hold their tokens' type (a default unchanged is no setting).
  HONE_CHECK(type == "mds" || !c.has("dataset.token_encoding_type") ||
                 c.get<std::string>("dataset.token_encoding_type") == data::kDefaultBytesTokenType,
             "{}: dataset.token_encoding_type reads MDS token bytes; {} data records its tokens' type",
             c.place_of("dataset.token_encoding_type"), type);
  if (type != "mock") {
    HONE_CHECK(c.has("dataset.path"), "{}: dataset.type {} needs dataset.path", c.origin_of("dataset.type"), type);
    check_one_validation_source(c, kPretrainingValidationFraction);
    return;
  }
  // mock is the default type: a path given without a type would be ignored, the run trained on random tokens.
  for (const char* key : {"dataset.path", "dataset.validation_path"}) {
    if (!c.has(key)) continue;
    fail("{}: {} {} is set but dataset.type is mock, which ignores it: set dataset.type=megatron (a .bin/.idx "
         "prefix or a blend), dataset.type=mds (a folder with index.json) or dataset.type=tokens (nanoGPT's "
         "train.bin, llm.c's shards)",
         c.origin_of(key), key, c.get<std::string>(key));
  }
}

std::vector<std::string> data_paths_not_here(const Config& c) {
  // Fine-tuning's records: a file, a folder or a pattern.
  const std::string type = c.has("dataset.type") ? c.get<std::string>("dataset.type") : "records";
  if (type == "mock") return {};
  std::vector<std::string> notes;
  for (const char* key : {"dataset.path", "dataset.validation_path"}) {
    if (!c.has(key)) continue;
    std::vector<std::pair<double, std::string>> parts = {{0.0, c.get<std::string>(key)}};
    if (type == "megatron" || type == "mds" || type == "tokens") parts = blend_parts(c, key, type);
    for (const auto& [weight, path] : parts) {
      const std::string file = type == "megatron" ? path + ".idx" : path;
      if (fs::exists(file)) continue;
      try {
        if (file.find_first_of("*?[") != std::string::npos && !data::expand_patterns({file}).empty()) continue;
      } catch (const Error&) {  // a pattern that matches nothing
      }
      notes.push_back(fmt::format("data: {} {} does not exist here yet", key, file));
    }
  }
  return notes;
}

TrainingData open_pretraining_data(const Config& c, int64_t vocab_size) {
  check_pretraining_data_keys(c);
  const std::string type = c.get<std::string>("dataset.type");
  const double validation_fraction = c.get<double>("dataset.validation_fraction");
  if (type == "mock") {
    const int64_t documents = c.get<int64_t>("dataset.mock.documents");
    const int64_t length = c.get<int64_t>("dataset.mock.document_length");
    HONE_CHECK(vocab_size > 1, "{}: mock data draws its tokens from the vocabulary: model.vocab_size must be at least "
               "2, got {}", c.origin_of("model.vocab_size"), vocab_size);
    Blend mock{.sources = {std::make_shared<data::MockDocuments>(documents, length, vocab_size,
                                                                 uint64_t(c.get<int64_t>("seed")))}};
    mock.description = mock.sources.front()->describe();
    return hold_out(mock, validation_fraction);
  }
  if (c.has("dataset.eod_id")) {
    HONE_CHECK(c.get<int64_t>("dataset.eod_id") < vocab_size, "{}: dataset.eod_id {} is outside the model's "
               "vocabulary of {}", c.origin_of("dataset.eod_id"), c.get<int64_t>("dataset.eod_id"), vocab_size);
  }
  const Blend train = open_blend(c, "dataset.path", type, vocab_size);
  if (!c.has("dataset.validation_path")) {
    // Token files of one document each hold nothing out: validation would silently be none.
    const bool one_document_each = std::ranges::all_of(train.sources, [](const auto& s) { return s->num_documents() == 1; });
    if (type == "tokens" && validation_fraction > 0 && one_document_each) {
      std::vector<std::string> fixes;
      // eval's schema has no validation_path: find() finds only a recipe's own keys, null or not.
      if (c.find("dataset.validation_path")) fixes.emplace_back("dataset.validation_path (nanoGPT's val.bin)");
      if (!c.has("dataset.eod_id")) fixes.emplace_back("dataset.eod_id (the token between documents)");
      fixes.emplace_back("dataset.validation_fraction=0");
      fail("{}: {} {} one document, of which dataset.validation_fraction {} holds nothing out: give {}",
           c.origin_of("dataset.path"), train.description, train.sources.size() > 1 ? "are each" : "is",
           validation_fraction, fmt::join(fixes, ", or "));
    }
    return hold_out(train, validation_fraction);
  }
  // Validation on documents of its own (Megatron's --valid-data-path, an MDS
  // split's val folder); training on every document of dataset.path.
  const Blend validation = open_blend(c, "dataset.validation_path", type, vocab_size);
  return {.train = whole(train),
          .validation = whole(validation),
          .train_weights = train.weights,
          .validation_weights = validation.weights,
          .description = train.description + "; validation: " + validation.description};
}

data::StreamOptions with_document_boundaries(const Config& c, data::StreamOptions options) {
  options.block_causal = c.get<bool>("dataset.block_causal");
  options.eod_mask_loss = c.get<bool>("dataset.eod_mask_loss");
  return options;
}

Schema instruct_dataset_schema(const std::string& template_default) {
  Schema s;
  s.add({"dataset.template", ValueType::string, template_default,
         "how records become samples: alpaca, summarize, plain (prompt and response), chat (messages), text (a "
         "whole text learned, TRL's language modeling)",
         {"alpaca", "summarize", "plain", "chat", "text"}});
  s.add({"dataset.chat_format", ValueType::string, "llama3", "chat template (and in_chat_format's)",
         {"llama3", "llama2", "chatml"}});
  s.add({"dataset.in_chat_format", ValueType::boolean, false,
         "alpaca, summarize, plain: the prompt and response as a user's and an assistant's message in "
         "dataset.chat_format, as torchtune's model tokenizers write every template (false: plain text)"});
  s.add({"dataset.column_map", ValueType::mapping, nullptr, "template field -> column of the records"});
  s.add({"dataset.train_on_input", ValueType::boolean, false, "also learn the prompt tokens"});
  s.add({"dataset.target_responses", ValueType::string, "all",
         "chat and pre-tokenized turns: learn every response, or the last only (LLM Foundry's default)",
         {"all", "last"}});
  s.add({"dataset.system_prompt", ValueType::string, "",
         "a system message for every sample, in place of its own (with a chat format; never learned)"});
  s.add_foreign("dataset.target_prompts",
                "LLM Foundry's; hone learns the prompts with dataset.train_on_input: true (target_prompts: all) or "
                "not (none, its default)");
  // torchtune's dataset and tokenizer keys, which migrating users type first.
  s.add_foreign("dataset.source", "torchtune's (load_dataset's); hone reads local records from dataset.path (a "
                                  ".jsonl, .json or .parquet file, a folder or glob of them, or an MDS folder)");
  s.add_foreign("dataset.data_files", "torchtune's (load_dataset's); hone's is dataset.path");
  s.add_foreign("dataset.split", "torchtune's (load_dataset's); hone trains on dataset.path and validates on "
                                 "dataset.validation_path or on the dataset.validation_fraction it holds out");
  s.add_foreign("dataset.conversation_style", "torchtune's; hone's chat template reads OpenAI messages and ShareGPT "
                                              "conversations alike (dataset.template: chat)");
  s.add_foreign("dataset.new_system_prompt", "torchtune's; hone's is dataset.system_prompt");
  s.add_foreign("tokenizer.prompt_template",
                "torchtune's; hone writes every template in dataset.chat_format (llama3, llama2 or chatml) with "
                "dataset.in_chat_format: true");
  return s;
}

data::InstructOptions instruct_options_from(const Config& c) {
  data::InstructOptions o;
  o.format = data::parse_instruct_template(c.get<std::string>("dataset.template"));
  o.chat_format = data::parse_chat_format(c.get<std::string>("dataset.chat_format"));
  o.in_chat_format = c.get<bool>("dataset.in_chat_format");
  const bool preference_pairs = c.has("loss.type");  // DPO's
  if (const Json* map = c.find("dataset.column_map"); map && map->is_object()) {
    const std::vector<std::string> fields = data::fields_any_template_reads();
    const std::vector<std::string> read = data::fields_read(o.format, preference_pairs);
    for (auto it = map->begin(); it != map->end(); ++it) {
      const std::string& origin = c.origin_of("dataset.column_map." + it.key());
      HONE_CHECK(it.value().is_string(), "{}: dataset.column_map.{} must name a column", origin, it.key());
      if (std::ranges::find(fields, it.key()) == fields.end()) {
        const std::string suggestion = closest_match(it.key(), fields);
        fail("{}: dataset.column_map.{}: no template reads a field '{}'{}; the fields: {}", origin, it.key(),
             it.key(), suggestion.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", suggestion),
             fmt::join(fields, ", "));
      }
      const std::string field = it.key() == "conversations" ? "messages" : it.key();
      // A field of another template (or of SFT's samples, in DPO) would be silently unread.
      HONE_CHECK(std::ranges::find(read, field) != read.end(), "{}: dataset.column_map.{}: {} read{} {}, not {}",
                 origin, it.key(),
                 preference_pairs ? "preference pairs" : "the " + c.get<std::string>("dataset.template") + " template",
                 preference_pairs ? "" : "s", fmt::join(read, ", "), it.key());
      HONE_CHECK(!o.column_map.contains(field), "{}: dataset.column_map has both messages and conversations, which "
                 "name the same field", c.origin_of_section("dataset.column_map"));
      o.column_map[field] = it.value().get<std::string>();
    }
  }
  // DPO's pairs keep to rows of their own, side by side in a batch.
  HONE_CHECK(!preference_pairs || !c.get<bool>("dataset.packed"), "{}: DPO's pairs are not packed (dataset.packed)",
             c.origin_of("dataset.packed"));
  o.train_on_input = c.get<bool>("dataset.train_on_input");
  o.train_on_every_response = c.get<std::string>("dataset.target_responses") == "all";
  o.token_encoding_type = c.get<std::string>("dataset.token_encoding_type");
  o.system_prompt = c.get<std::string>("dataset.system_prompt");
  HONE_CHECK(o.system_prompt.empty() || o.format == data::InstructTemplate::chat || o.in_chat_format,
             "{}: dataset.system_prompt is a chat format's system message: the {} template writes plain text without "
             "one (give dataset.template: chat, or dataset.in_chat_format: true)",
             c.origin_of("dataset.system_prompt"), c.get<std::string>("dataset.template"));
  return o;
}

}  // namespace hone
