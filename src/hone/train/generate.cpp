// The generate recipe: completions for prompts from the command line or a file,
// batched through the KV-cache decoder, with the statistics torchtune's generate
// recipe prints (tokens/s, memory bandwidth achieved, memory used).
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <type_traits>

#include "hone/core/stop_signals.hpp"
#include "hone/core/text.hpp"
#include "hone/data/formats/inputs.hpp"
#include "hone/data/instruct.hpp"
#include "hone/data/tokenizers/utf8.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/model/sampling.hpp"
#include "hone/train/inference.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/run_config.hpp"

namespace hone {

Schema generate_schema() {
  Schema s = inference_schema();
  s.add({"prompt", ValueType::string, nullptr, "a prompt"});
  s.add({"prompts_file", ValueType::string, nullptr,
         "a file of prompts: one a line, or JSON Lines (.jsonl) of records with a 'prompt' (which may span lines)"});
  s.add({"template", ValueType::string, nullptr,
         "how the prompt is presented, as in training (unset: as the hone fine-tuning run whose model it is was "
         "trained, with its chat_format, in_chat_format and system_prompt; else plain)",
         {"plain", "alpaca", "summarize", "chat"}});
  s.add({"chat_format", ValueType::string, nullptr, "the chat template's (and in_chat_format's); unset: llama3",
         {"llama3", "llama2", "chatml"}});
  s.add({"in_chat_format", ValueType::boolean, nullptr,
         "alpaca, summarize, plain: the prompt as a user's message in chat_format (as dataset.in_chat_format "
         "trained it); unset: false"});
  s.add({"system_prompt", ValueType::string, nullptr,
         "a system message (in a chat format); unset: the fine-tuning run's, else none (\"\": none)"});
  s.add({"max_new_tokens", ValueType::integer, 128, "tokens to generate at most"}, Range::positive());
  // The sampling keys default to what the model's generation_config.json sets (sampling_options).
  s.add({"temperature", ValueType::number, nullptr, "sampling temperature (0: greedy); default: 0.8"},
        Range::not_negative());
  s.add({"top_k", ValueType::integer, nullptr, "sample from the k most likely tokens (0: all); default: 0"},
        Range::not_negative());
  s.add({"top_p", ValueType::number, nullptr, "nucleus sampling threshold; default: 1"}, Range::positive_fraction());
  s.add({"min_p", ValueType::number, nullptr,
         "then drop tokens less likely than min_p times the most likely one (0: off); default: 0"},
        Range::unit_interval());
  s.add({"repetition_penalty", ValueType::number, nullptr,
         "tokens already in the prompt or completion made less likely: positive logits divided by it, negative ones "
         "multiplied (transformers' repetition_penalty; 1: off); default: 1"},
        Range::positive());
  s.add({"stop_tokens", ValueType::string_list, Json::array(),
         "special tokens that end a completion besides the end of answer and EOS (e.g. \"<|eom_id|>\")"});
  s.add({"samples_path", ValueType::string, nullptr,
         "also write each prompt and its completion as a line of JSON here (prompt, completion, tokens, "
         "finish_reason: stop or length, as vLLM's)"});
  s.add({"stop", ValueType::string_list, Json::array(),
         "strings that end a completion, which is printed up to the first of them (vLLM's stop; transformers' "
         "stop_strings)"});
  s.add_foreign("prompt.user", "torchtune's; hone's is prompt (template=chat writes it as the user's message)");
  s.add_foreign("prompt.system", "torchtune's; hone's is system_prompt (with template=chat)");
  s.add_foreign("enable_kv_cache", "torchtune's; hone always decodes with a KV cache");
  s.add({"batch_size", ValueType::integer, 32,
         "completions decoded together (their KV caches held at once); each batch's print when it ends"},
        Range::positive());
  s.add({"num_samples", ValueType::integer, 1,
         "completions drawn for each prompt (vLLM's n, transformers' num_return_sequences); the prompt is prefilled "
         "once for them"},
        Range{.low = 1, .high = 1 << 20});
  s.add_foreign("num_return_sequences", "transformers'; hone's is num_samples");
  return s;
}

namespace {

// Each sampling setting from the config, else from the model's
// generation_config.json (as vLLM takes its defaults from it; do_sample: false
// there is greedy, as transformers reads it), else hone's default; the settings
// the file gave are said on stderr.
SamplingOptions sampling_options(const Config& c, const Json& generation_config) {
  const bool has_file = generation_config.is_object();
  std::vector<std::string> from_file;
  const auto pick = [&]<typename T>(const char* key, T fallback) -> T {
    if (c.has(key)) return c.get<T>(key);
    if (has_file && generation_config.contains(key) && generation_config[key].is_number()) {
      // transformers refuses top_k 1.5 too; taking it for 1 would sample otherwise than the file says.
      HONE_CHECK(!std::is_integral_v<T> || generation_config[key].is_number_integer(),
                 "the model's generation_config.json: '{}' must be an integer, got {}", key,
                 generation_config[key].dump());
      from_file.push_back(fmt::format("{} {}", key, generation_config[key].dump()));
      return generation_config[key].get<T>();
    }
    return fallback;
  };
  SamplingOptions o{.temperature = pick("temperature", 0.8),
                    .top_k = pick("top_k", int64_t(0)),
                    .top_p = pick("top_p", 1.0),
                    .min_p = pick("min_p", 0.0),
                    .repetition_penalty = pick("repetition_penalty", 1.0)};
  if (!c.has("temperature") && has_file && generation_config.contains("do_sample") &&
      generation_config["do_sample"] == false) {
    o.temperature = 0;
    from_file.push_back("do_sample false (greedy)");
  }
  if (!from_file.empty()) {
    HONE_CHECK(o.temperature >= 0 && o.top_k >= 0 && o.top_p > 0 && o.top_p <= 1 && o.min_p >= 0 && o.min_p <= 1 &&
                   o.repetition_penalty > 0,
               "the model's generation_config.json: sampling settings out of range ({})", fmt::join(from_file, ", "));
    fmt::print(stderr, "sampling: {} (the model's generation_config.json)\n", fmt::join(from_file, ", "));
  }
  return o;
}

// How prompts are written: template, chat_format, in_chat_format and
// system_prompt as given; without a template, as the fine-tuning run whose
// model it is was trained (its dataset's keys, those not given here, said in a
// note) where the model is one's. A system prompt needs a chat format.
data::InstructOptions prompt_format(const Config& c, const Json& trained = Json(), const std::string& trained_by = "") {
  const bool as_trained = !c.has("template") && trained.is_object();
  Json keys = Json::object();
  std::vector<std::string> given;  // keys given here over the run's
  for (const char* key : {"template", "chat_format", "in_chat_format", "system_prompt"}) {
    if (c.has(key)) {
      keys[key] = *c.find(key);
      given.push_back(key);
    } else if (as_trained && trained.contains(key)) {
      keys[key] = trained[key];
    }
  }
  const data::InstructOptions format = prompt_format_of(keys);
  const bool chat = format.format == data::InstructTemplate::chat || format.in_chat_format;
  const std::string template_name = keys.value("template", "plain");
  if (as_trained) {
    const auto from_run = [&](const char* key) { return std::ranges::find(given, key) == given.end(); };
    std::string described = "template " + template_name;
    if (chat && from_run("chat_format")) described += ", chat_format " + keys.value("chat_format", "llama3");
    if (format.in_chat_format && from_run("in_chat_format")) described += " (in_chat_format)";
    if (!format.system_prompt.empty() && from_run("system_prompt")) {
      described += fmt::format(", system_prompt {:?}", format.system_prompt);
    }
    fmt::print(stderr, "note: prompts are written as {} was fine-tuned: {}{} (template=plain writes them as given)\n",
               trained_by, described, given.empty() ? "" : fmt::format("; {} as given here", fmt::join(given, ", ")));
  }
  HONE_CHECK(format.system_prompt.empty() || chat,
             "{}: system_prompt is a chat format's system message: the {} template writes plain text without one "
             "(give template=chat, or in_chat_format=true)",
             c.has("system_prompt") ? c.origin_of("system_prompt") : trained_by, template_name);
  return format;
}

}  // namespace

std::vector<std::string> check_generate_config(const Config& c) {
  HONE_CHECK(c.has("prompt") || c.has("prompts_file"), "{}: give a prompt or a prompts_file", c.origin_of("prompt"));
  // A config's example prompt with a prompts_file from the command line: the way out is to drop the config's.
  HONE_CHECK(!c.has("prompt") || !c.has("prompts_file"), "{}: give prompt or prompts_file, not both{}", c.origin(),
             c.how_to_drop_the_files("prompt", "prompts_file"));
  if (c.has("template")) prompt_format(c);  // its errors; else the model's run may give the format
  return {};
}

namespace {

struct Prompts {
  std::vector<std::string> texts, sources;  // each prompt, and where it came from (for errors)
  void add(std::string text, std::string source) {
    texts.push_back(std::move(text));
    sources.push_back(std::move(source));
  }
};

// prompts_file: JSON Lines (.jsonl, .json) of records with a string 'prompt',
// or text, a prompt a line (blank lines skipped; a CRLF file's line ends and a
// UTF-8 byte-order mark are not the prompt's); either compressed too.
void read_prompts_file(const std::string& path, Prompts& prompts) {
  HONE_CHECK(!std::filesystem::is_directory(path), "prompts_file {}: is a folder, not a file of prompts", path);
  const size_t given = prompts.texts.size();
  if (data::is_jsonl_name(path)) {
    for (const data::Record& r : data::read_records(path)) {
      const Json& prompt = r.value.value("prompt", Json());
      HONE_CHECK(prompt.is_string(), "{}: no string 'prompt' (a JSON Lines prompts_file holds records "
                 "{{\"prompt\": TEXT}})", r.where);
      prompts.add(prompt.get<std::string>(), r.where);
    }
    HONE_CHECK(prompts.texts.size() > given, "prompts_file {}: no records in it", path);
    return;
  }
  data::InputStream in(path);  // gzip or zstd decompressed, as JSON Lines are
  int64_t line_number = 0;
  for (std::string line; in.read_line(line);) {
    ++line_number;
    if (line_number == 1 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
    if (line.ends_with('\r')) line.pop_back();  // a last line's "\r" without its "\n"
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    prompts.add(line, fmt::format("{}:{}", path, line_number));
  }
  HONE_CHECK(prompts.texts.size() > given,
             "prompts_file {}: no prompts in it (one a line; blank lines are skipped; .jsonl: records with a "
             "'prompt')",
             path);
}

}  // namespace

int run_generate(const Config& c) {
  check_one_process("generate");
  check_generate_config(c);
  catch_stop_signals();  // a stop while the model loads leaves no samples_path half-made either
  Prompts given;
  if (c.has("prompt")) given.add(c.get<std::string>("prompt"), "prompt");
  if (c.has("prompts_file")) read_prompts_file(c.get<std::string>("prompts_file"), given);
  const std::vector<std::string>& prompts = given.texts;
  const std::vector<std::string>& sources = given.sources;

  // Opened before the model loads: a path that cannot be written fails first.
  std::unique_ptr<AtomicFile> samples;
  if (c.has("samples_path")) samples = std::make_unique<AtomicFile>(c.get<std::string>("samples_path"));
  InferenceModel m = load_inference_model(c);
  for (const std::string& note : m.notes) fmt::print(stderr, "note: {}\n", note);
  const auto [trained_dataset, trained_by] = fine_tuning_dataset_of(c);
  const data::InstructOptions format = prompt_format(c, trained_dataset, trained_by);
  GenerationOptions o;
  o.max_new_tokens = c.get<int64_t>("max_new_tokens");
  o.sampling = sampling_options(c, m.generation_config);
  o.seed = uint64_t(c.get<int64_t>("seed"));
  o.vocab_size = std::min<int64_t>(m.tokenizer->vocab_size(), m.model->config().vocab_size);
  // The end of an answer, and EOS (where transformers' generate() stops too); a
  // tokenizer without either (nanoGPT's characters) runs to max_new_tokens, as sample.py.
  if (const auto end = data::end_of_answer_token(*m.tokenizer, format)) o.stop_tokens.push_back(*end);
  if (const auto eos = m.tokenizer->eos_id(); eos && std::ranges::find(o.stop_tokens, *eos) == o.stop_tokens.end()) {
    o.stop_tokens.push_back(*eos);
  }
  for (const int32_t id : m.eos_ids) {  // and the model's generation config's (transformers' too)
    if (std::ranges::find(o.stop_tokens, id) == o.stop_tokens.end()) o.stop_tokens.push_back(id);
  }
  for (const std::string& s : c.get<std::vector<std::string>>("stop_tokens")) {
    auto id = m.tokenizer->special_token_id(s);
    HONE_CHECK(id.has_value(), "{}: stop token '{}' is not a special token of the tokenizer",
               c.origin_of("stop_tokens"), s);
    o.stop_tokens.push_back(*id);
  }
  const auto stop_strings = c.get<std::vector<std::string>>("stop");
  if (std::ranges::any_of(stop_strings, [](const std::string& s) { return !s.empty(); })) {
    o.finished = [&](size_t, const std::vector<int32_t>& completion) {
      const std::string text = m.tokenizer->decode(completion);
      return text_before_stop(text, stop_strings).size() < text.size();
    };
  }
  // Each completion's random stream is numbered by its prompt (below 2^24) and sample.
  HONE_CHECK(prompts.size() < (size_t(1) << 24), "{} prompts: at most 16777215 a run (split the file)",
             prompts.size());
  std::vector<std::vector<int32_t>> encoded;
  const int64_t max_seq_len = m.model->config().max_seq_len;
  int64_t cut_short = 0;  // prompts whose completions max_seq_len stops before max_new_tokens
  for (size_t i = 0; i < prompts.size(); ++i) {
    encoded.push_back(data::prompt_tokens(*m.tokenizer, prompts[i], format));
    // An empty prompt generates unconditionally from the end-of-text token, as nanoGPT's sample.py and
    // transformers' generate() without input ids do (a tokenizer with BOS has put it there already).
    if (encoded.back().empty() && m.tokenizer->eos_id()) encoded.back().push_back(*m.tokenizer->eos_id());
    HONE_CHECK(!encoded.back().empty(), "{}: the prompt is empty and the tokenizer has no BOS or EOS to start from: "
               "give some text (nanoGPT's sample.py starts from \"\\n\")", sources[i]);
    const auto length = int64_t(encoded.back().size());
    HONE_CHECK(length <= max_seq_len, "{}: the prompt ({} {}: {:?}) is longer than the model's max_seq_len {}",
               sources[i], length, plural(length, "token"), prompts[i].substr(0, 40), max_seq_len);
    if (o.max_new_tokens - 1 > max_seq_len - length) ++cut_short;
  }
  if (cut_short > 0) {
    fmt::print(stderr,
               "note: max_new_tokens {} does not fit the model's max_seq_len {} after {} {}: {} there (as vLLM's "
               "stop at max_model_len)\n",
               o.max_new_tokens, max_seq_len, cut_short, plural(cut_short, "prompt"),
               cut_short == 1 ? "its completion stops" : "their completions stop");
  }

  // num_samples completions of each prompt, one after another; batches of
  // batch_size of them, printed as each ends; the statistics are over them
  // all. Sample j of prompt i draws from stream (i, j) under seed, whatever
  // batch it is in.
  const auto samples_each = size_t(c.get<int64_t>("num_samples"));
  std::vector<std::vector<int32_t>> sequences;
  for (const std::vector<int32_t>& prompt : encoded) sequences.insert(sequences.end(), samples_each, prompt);
  Allocator& memory = allocator_for(m.model->device());
  const size_t batch_size = size_t(c.get<int64_t>("batch_size"));
  Generation g;
  int64_t steps = 0;  // decoding steps, each reading all the weights once for the sequences of its batch
  // Ctrl-C or SIGTERM (caught from the start) ends the batch being decoded at
  // its next step; it is dropped (not printed cut short), and the batches
  // before it are kept, in samples_path too.
  size_t completed = 0;
  for (size_t first = 0; first < sequences.size() && !stop_requested(); first += batch_size) {
    const size_t count = std::min(batch_size, sequences.size() - first);
    GenerationOptions batch_options = o;
    for (size_t k = first; k < first + count; ++k) {
      batch_options.streams.push_back(uint64_t(k / samples_each) << 32 | uint64_t(k % samples_each));
    }
    batch_options.finished = [&](size_t i, const std::vector<int32_t>& completion) {
      return stop_requested() || (o.finished && o.finished(i, completion));
    };
    const Generation b = generate(*m.model,
                                  std::vector(sequences.begin() + std::ptrdiff_t(first),
                                              sequences.begin() + std::ptrdiff_t(first + count)),
                                  batch_options);
    if (stop_requested()) break;
    completed = first + count;
    for (size_t k = 0; k < count; ++k) {
      std::vector<int32_t> text = b.completions[k];
      const bool stop_token = !text.empty() && std::ranges::find(o.stop_tokens, text.back()) != o.stop_tokens.end();
      if (stop_token) text.pop_back();  // the stop token is not part of the answer
      std::string storage;  // a completion cut inside a character ends in U+FFFD, as transformers decodes it
      const size_t i = (first + k) / samples_each, sample = (first + k) % samples_each;
      const std::string decoded = m.tokenizer->decode(text), before_stop = text_before_stop(decoded, stop_strings);
      const std::string completion(utf8::sanitize(before_stop, storage));
      // vLLM's finish_reason: a stop token or string ended it, or the length did (max_new_tokens, max_seq_len).
      const char* finish_reason = stop_token || before_stop.size() < decoded.size() ? "stop" : "length";
      // The prompt, then its completions (several: each under "--- sample k").
      if (sample == 0) fmt::print("{}{}\n", prompts.size() > 1 ? fmt::format("[{}] ", i) : "", prompts[i]);
      if (samples_each > 1) fmt::print("--- sample {}\n", sample);
      fmt::print("{}\n\n", completion);
      if (samples) {
        Json record = {{"prompt", prompts[i]},
                       {"completion", completion},
                       {"tokens", b.completions[k].size()},
                       {"finish_reason", finish_reason}};
        if (samples_each > 1) record["sample"] = sample;
        samples->write(record.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
      }
    }
    std::fflush(stdout);
    int64_t longest = 0;
    for (const auto& t : b.completions) longest = std::max<int64_t>(longest, int64_t(t.size()));
    steps += std::max<int64_t>(longest - 1, 0);  // the first token of each comes from the prefill
    g.prompt_tokens += b.prompt_tokens;
    g.generated_tokens += b.generated_tokens;
    g.prefill_seconds += b.prefill_seconds;
    g.decode_seconds += b.decode_seconds;
    g.cache_bytes = std::max(g.cache_bytes, b.cache_bytes);
  }
  if (samples) {
    samples->commit();
    fmt::print(stderr, "samples: {}\n", c.get<std::string>("samples_path"));
  }
  if (stop_requested()) {
    fmt::print(stderr, "hone: generate stopped by signal {} after {} of {} {}{}\n", stop_signal(), completed,
               sequences.size(), samples_each > 1 ? "completions" : "prompts",
               samples ? " (samples_path holds their completions)" : "");
    return 128 + stop_signal();
  }
  size_t weight_bytes = 0;
  for (const Parameter& p : m.model->params().all()) weight_bytes += p.compute.nbytes();
  const double decode_rate = g.decode_seconds > 0 ? double(steps) / g.decode_seconds : 0;
  fmt::print(stderr, "model: {}\n", m.description);
  fmt::print(stderr, "prefill: {} tokens in {:.3f} s ({:.1f} tokens/s)\n", g.prompt_tokens, g.prefill_seconds,
             double(g.prompt_tokens) / std::max(g.prefill_seconds, 1e-9));
  // The first token of each completion comes with the prefill; the rest, one decoding step each.
  const int64_t decoded = g.generated_tokens - int64_t(sequences.size());
  const std::string generated =
      fmt::format("decode: {} {} for {} {}{}", g.generated_tokens, plural(g.generated_tokens, "token"),
                  prompts.size(), plural(int64_t(prompts.size()), "prompt"),
                  samples_each > 1 ? fmt::format(", {} samples each", samples_each) : "");
  if (decoded > 0) {
    fmt::print(stderr,
               "{}, {} of them decoded in {:.3f} s: {:.1f} tokens/s (the first of each came with the prefill)\n",
               generated, decoded, g.decode_seconds, double(decoded) / std::max(g.decode_seconds, 1e-9));
  } else {
    fmt::print(stderr, "{}, each from the prefill (no decoding step)\n", generated);
  }
  const std::string bandwidth =
      steps > 0 ? fmt::format("{:.2f} GB/s", double(weight_bytes) * decode_rate / 1e9) : "n/a, no decoding step";
  fmt::print(stderr, "bandwidth achieved: {} ({} of weights read per step); memory used: {} (KV cache {})\n", bandwidth,
             format_bytes(double(weight_bytes)), format_bytes(double(memory.stats().peak_allocated)),
             format_bytes(double(g.cache_bytes)));
  return 0;
}

}  // namespace hone
