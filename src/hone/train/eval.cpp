// The eval recipe: loss and perplexity on a dataset (a pretraining token stream
// or an instruct dataset) and the scores of task files (lm-evaluation-harness's
// tasks: multiple choice, continuations, generated answers), one (task.*) or
// several by name (tasks); it ends with one JSON line.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <numeric>

#include "hone/core/progress_line.hpp"
#include "hone/core/stop_signals.hpp"
#include "hone/data/instruct.hpp"
#include "hone/data/pretrain_stream.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/train/data_sources.hpp"
#include "hone/train/evaluation.hpp"
#include "hone/train/inference.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/run_config.hpp"

namespace hone {

namespace {

// The keys of one evaluation task under `prefix`: "task", or "tasks.NAME" for
// each of several.
Schema task_keys(const std::string& prefix) {
  Schema s;
  s.add({prefix + ".path", ValueType::string, nullptr,
         "an evaluation task's records (multiple choice, a continuation, answers to generate, or documents to score "
         "whole; see task.layout): "
         "JSONL, JSON, Parquet, or a folder or pattern of shards"});
  s.add({prefix + ".layout", ValueType::string, "auto",
         "the task's columns and prompts, as lm-evaluation-harness's task of the name (auto: by the columns; the "
         "harness's arc_easy, arc_challenge, social_iqa, lambada_openai and lambada_standard name arc, siqa, lambada)",
         {"auto", "plain", "hellaswag", "arc", "piqa", "mmlu", "truthfulqa_mc1", "truthfulqa_mc2", "winogrande",
          "openbookqa", "boolq", "siqa", "sciq", "foundry", "lambada", "foundry_lm", "gsm8k", "triviaqa", "wikitext",
          "arc_easy",
          "arc_challenge", "social_iqa", "lambada_openai", "lambada_standard"}});
  s.add({prefix + ".num_fewshot", ValueType::integer, 0,
         "answered examples before each item, from task.fewshot_path: mmlu the first of its subject, the others "
         "drawn at random as lm-evaluation-harness draws them"},
        Range::not_negative());
  s.add({prefix + ".fewshot_path", ValueType::string, nullptr,
         "the examples' records (the harness's few-shot split: mmlu's dev, the others' train)"});
  s.add({prefix + ".fewshot_seed", ValueType::integer, 1234,
         "seed of the examples' draw (the harness's --fewshot_random_seed)"},
        Range::not_negative());
  s.add({prefix + ".max_new_tokens", ValueType::integer, 256,
         "gsm8k, triviaqa: tokens generated at most per answer (the harness's max_gen_toks)"},
        Range::positive());
  s.add({prefix + ".limit", ValueType::number, nullptr,
         "score only the first items: a count, or below 1 a share of them, rounded up (the harness's --limit)"},
        Range::positive());
  s.add({prefix + ".samples_path", ValueType::string, nullptr,
         "a JSONL file of every item scored: its prompt, its choices' log-likelihoods or its generated answer, and "
         "whether it was right (the harness's --log_samples)"});
  return s;
}

}  // namespace

Schema eval_schema() {
  Schema s = inference_schema();
  s.add({"dataset.type", ValueType::string, nullptr, "data for loss and perplexity",
         {"mock", "megatron", "mds", "tokens", "instruct"}});
  s.add({"dataset.path", ValueType::string, nullptr,
         "megatron prefix (or blend), MDS folder, token file (nanoGPT's val.bin, an llm.c shard), or instruct records "
         "(as fine-tuning's dataset.path)"});
  s.add({"dataset.seq_len", ValueType::integer, nullptr,
         "tokens per sequence (unset: 256, or the model's max_seq_len if smaller)"},
        Range::positive());
  s.add({"dataset.max_seq_len", ValueType::integer, nullptr,
         "instruct: tokens per sample, longer ones cut, as fine-tuning's key (in place of dataset.seq_len)"},
        Range::positive());
  s.add(instruct_dataset_schema());
  s.add({"dataset.validation_fraction", ValueType::number, 0.0,
         "score only the part of dataset.path a training run given this fraction held out and validated on (the "
         "last documents of each source; instruct: the last records); 0: all of it"},
        Range::fraction());
  s.add({"dataset.mock.documents", ValueType::integer, 200, "mock: documents"}, Range::positive());
  s.add({"dataset.mock.document_length", ValueType::integer, 512, "mock: tokens per document"}, Range::positive());
  s.add({"batch_size", ValueType::integer, 4,
         "sequences per batch; tasks: items per forward pass (a multiple-choice item's choices together)"},
        Range::positive());
  s.add({"max_batches", ValueType::integer, 50, "batches of dataset.* evaluated at most (0: all of it)"},
        Range::not_negative());
  s.add(task_keys("task"));
  s.add({"tasks", ValueType::mapping, nullptr,
         "several tasks in one run, by name: NAME: {path: FILE, ...} with the keys of task.* (num_fewshot, "
         "fewshot_path, limit, samples_path, ...); the result gives each task's scores under its name"});
  return s.add(document_boundaries_schema()).add(mds_tokens_schema());
}

namespace {

// One task to evaluate: its items read and its samples file opened before any
// evaluation starts, so that a bad file or path fails first.
struct PlannedTask {
  std::string name;  // its key in tasks; empty for task.*
  EvalTask task;
  int64_t max_new_tokens = 0;
  std::string max_new_tokens_key;  // "task.max_new_tokens" or "tasks.NAME.max_new_tokens"
  std::string samples_path;
  std::unique_ptr<AtomicFile> samples;
};

// An error unless each task's samples_path is a file of its own: not another
// task's, nor a file a task reads (it would be replaced by the samples).
void check_samples_paths(const Config& c, const std::vector<std::string>& prefixes) {
  std::map<std::string, std::string> used;  // a file (weakly canonical) -> the key that names it
  const auto file = [](const std::string& path) { return std::filesystem::weakly_canonical(path).string(); };
  for (const std::string& prefix : prefixes) {
    for (const char* input : {".path", ".fewshot_path"}) {
      if (c.has(prefix + input)) used.emplace(file(c.get<std::string>(prefix + input)), prefix + input);
    }
  }
  for (const std::string& prefix : prefixes) {
    const std::string key = prefix + ".samples_path";
    if (!c.has(key)) continue;
    const auto [it, fresh] = used.emplace(file(c.get<std::string>(key)), key);
    HONE_CHECK(fresh, "{}: {} {} is also {}: give each task's samples a file of their own", c.origin_of(key), key,
               c.get<std::string>(key), it->second);
  }
}

// An error unless PREFIX.num_fewshot (> 0) and PREFIX.fewshot_path come together.
void check_fewshot_keys(const Config& c, const std::string& prefix) {
  const std::string count = prefix + ".num_fewshot", path = prefix + ".fewshot_path";
  HONE_CHECK(c.has(path) == (c.has(count) && c.get<int64_t>(count) > 0),
             "{}: {} (> 0) and {} go together: the examples and the file they come from", c.origin_of(prefix), count,
             path);
}

// The task whose settings are the keys of task_keys(prefix) in `c`.
PlannedTask plan_task(const Config& c, const std::string& prefix, std::string name) {
  const auto key = [&](const char* k) { return prefix + "." + k; };
  HONE_CHECK(c.has(key("path")), "{}: {} is missing: the task's records", c.origin_of(prefix), key("path"));
  const FewShot shots{c.has(key("fewshot_path")) ? c.get<std::string>(key("fewshot_path")) : "",
                      c.get<int64_t>(key("num_fewshot")), uint64_t(c.get<int64_t>(key("fewshot_seed")))};
  check_fewshot_keys(c, prefix);
  PlannedTask t{.name = std::move(name),
                .max_new_tokens = c.get<int64_t>(key("max_new_tokens")),
                .max_new_tokens_key = key("max_new_tokens")};
  if (c.has(key("samples_path"))) {
    t.samples_path = c.get<std::string>(key("samples_path"));
    t.samples = std::make_unique<AtomicFile>(t.samples_path);
  }
  t.task = read_eval_task(c.get<std::string>(key("path")), c.get<std::string>(key("layout")), shots);
  if (c.has(key("limit"))) {  // the first items; their few-shot draws are those of the whole task's first
    const double limit = c.get<double>(key("limit"));
    const size_t all = t.task.items.size() + t.task.generative_items.size() + t.task.documents.size();
    const auto keep = size_t(limit < 1 ? std::ceil(double(all) * limit) : limit);
    if (keep < t.task.items.size()) t.task.items.resize(keep);
    if (keep < t.task.generative_items.size()) t.task.generative_items.resize(keep);
    if (keep < t.task.documents.size()) t.task.documents.resize(keep);
  }
  return t;
}

// Each entry of tasks resolved as task.* is (its keys under tasks.NAME), by
// name; checked without reading its files, as hone validate checks them.
std::vector<std::pair<std::string, Config>> resolved_tasks(const Config& c) {
  std::vector<std::pair<std::string, Config>> resolved;
  if (!c.has("tasks")) return resolved;
  const Json& tasks = *c.find("tasks");
  HONE_CHECK(!tasks.empty(), "{}: tasks is empty: give NAME: {{path: FILE, ...}} for each task", c.origin_of("tasks"));
  for (const auto& [name, entry] : tasks.items()) {
    const std::string prefix = "tasks." + name;
    HONE_CHECK(!name.empty() && name.find('.') == std::string::npos, "{}: '{}' cannot name a task (no dots)",
               c.origin_of("tasks"), name);
    HONE_CHECK(entry.is_object(), "{}: {} must be a mapping of the task's keys (path: FILE, ...), not {}",
               c.origin_of_section(prefix), prefix, entry.dump());
    Config one = Config::from_yaml("{}", c.origin_of_section(prefix));
    one.set(prefix, entry);
    resolved.emplace_back(name, task_keys(prefix).resolve(one));
  }
  return resolved;
}

// task.*, or each of tasks, whose entries are checked as task.* is (under their own names).
std::vector<PlannedTask> plan_tasks(const Config& c) {
  std::vector<PlannedTask> planned;
  if (c.has("task.path")) {
    check_samples_paths(c, {"task"});
    planned.push_back(plan_task(c, "task", ""));
    return planned;
  }
  if (!c.has("tasks")) return planned;
  std::vector<std::string> prefixes;
  for (const auto& [name, entry] : c.find("tasks")->items()) prefixes.push_back("tasks." + name);
  check_samples_paths(c, prefixes);
  for (auto& [name, one] : resolved_tasks(c)) planned.push_back(plan_task(one, "tasks." + name, name));
  return planned;
}

// Scores grouped as lm-evaluation-harness groups tasks: the mean over all their
// items, and a variance: a subject's items' sample variance, a group's pooled
// from its parts' (its pooled_sample_stderr: Σ (n_i − 1) v_i / (N − k)); the
// standard error is sqrt(v / N), null where there is no spread to estimate.
struct ScoreGroup {
  double sum = 0;
  int64_t items = 0;
  std::optional<double> variance;

  static ScoreGroup of_items(const std::vector<double>& scores) {
    ScoreGroup g{.sum = std::accumulate(scores.begin(), scores.end(), 0.0), .items = int64_t(scores.size())};
    if (g.items < 2) return g;
    const double mean = g.sum / double(g.items);
    double squares = 0;
    for (const double v : scores) squares += (v - mean) * (v - mean);
    g.variance = squares / double(g.items - 1);
    return g;
  }
  static ScoreGroup pooled(const std::vector<ScoreGroup>& parts) {
    ScoreGroup g;
    double weighted = 0;
    for (const ScoreGroup& p : parts) {
      g.sum += p.sum;
      g.items += p.items;
      weighted += double(p.items - 1) * p.variance.value_or(0.0);
    }
    if (g.items > int64_t(parts.size())) g.variance = weighted / double(g.items - int64_t(parts.size()));
    return g;
  }
  Json stderr_json() const { return variance ? Json(std::sqrt(*variance / double(items))) : Json(); }
  Json json() const {
    return {{"accuracy", sum / double(items)}, {"accuracy_stderr", stderr_json()}, {"task_items", items}};
  }
};

// The mean of the items' scores with its standard error beside it
// (`name_stderr`), as lm-evaluation-harness's mean_stderr computes it: the
// sample standard deviation over the square root of the count (for 0/1 scores
// sqrt(p (1 - p) / (n - 1)); TruthfulQA's mc2 shares are no 0/1 scores); null
// below 2 items.
template <typename Score>
void put_mean(Json& result, const std::string& name, const std::vector<Score>& scores) {
  const ScoreGroup all = ScoreGroup::of_items(std::vector<double>(scores.begin(), scores.end()));
  result[name] = all.sum / double(all.items);
  result[name + "_stderr"] = all.stderr_json();
}

// MMLU as the harness's mmlu group reports it: each subject's accuracy, each
// category's (mmlu_stem, mmlu_humanities, mmlu_social_sciences, mmlu_other: its
// subjects' items together), and the whole's standard error pooled from the categories' (and
// from a subject the harness does not group, its own).
void put_mmlu_groups(Json& result, const std::vector<MultipleChoiceItem>& items, const std::vector<double>& scores) {
  std::map<std::string, std::vector<double>> by_subject;
  for (size_t i = 0; i < items.size(); ++i) by_subject[items[i].subject].push_back(scores[i]);
  std::map<std::string, std::vector<ScoreGroup>> by_category;
  std::vector<ScoreGroup> parts;  // of the whole: the categories, and the subjects of none
  Json subjects = Json::object(), categories = Json::object();
  for (const auto& [subject, values] : by_subject) {
    const ScoreGroup one = ScoreGroup::of_items(values);
    subjects[subject] = one.json();
    const std::string_view category = mmlu_category(subject);
    if (category.empty()) parts.push_back(one);
    else by_category[std::string(category)].push_back(one);
  }
  for (const auto& [category, its_subjects] : by_category) {
    const ScoreGroup group = ScoreGroup::pooled(its_subjects);
    categories["mmlu_" + category] = group.json();  // the harness's group names
    parts.push_back(group);
  }
  result["accuracy_stderr"] = ScoreGroup::pooled(parts).stderr_json();
  result["categories"] = categories;
  result["subjects"] = subjects;
}

// Progress over `count` things: a line redrawn on a terminal; off one (a Slurm
// log) a line at every tenth of them and one when all are done.
class CountProgress {
 public:
  CountProgress(std::string what, int64_t count, std::string unit)
      : what_(std::move(what)), unit_(std::move(unit)), count_(count), tenth_(std::max<int64_t>(1, (count + 9) / 10)),
        next_logged_(tenth_), start_(std::chrono::steady_clock::now()) {}

  void operator()(int64_t done) {
    if (stop_requested()) throw Stopped{};  // before the next batch of items
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const std::string text = fmt::format("{}: {}/{} {}, {:.0f} s", what_, done, count_, unit_, seconds);
    if (line_.on_terminal()) return line_.draw(text);
    if (done < next_logged_ && done < count_) return;
    fmt::print(stderr, "{}\n", text);
    next_logged_ = (done / tenth_ + 1) * tenth_;
  }

  void finish() {
    if (!line_.on_terminal()) (*this)(count_);
    line_.clear();
  }

 private:
  ProgressLine line_;
  std::string what_, unit_;
  int64_t count_, tenth_, next_logged_;
  std::chrono::steady_clock::time_point start_;
};

// Scores one task: its metrics, its layout and item count; writes its samples.
Json evaluate_task(PlannedTask& t, const InferenceModel& m, int64_t batch) {
  const EvalTask& task = t.task;
  const int64_t count = int64_t(task.items.size() + task.generative_items.size() + task.documents.size());
  const std::string label = t.name.empty() ? std::string(layout_name(task.layout)) : t.name;
  CountProgress progress("task (" + label + ")", count, "items");
  Json result = Json::object();
  std::vector<Json> samples;
  result["task_layout"] = layout_name(task.layout);
  if (is_generative(task.layout)) {
    const AnswerScorer scorer(answer_scoring(task.layout));
    const GenerativeResult r =
        evaluate_generative(*m.model, *m.tokenizer, task.generative_items, scorer,
                            {.max_new_tokens = t.max_new_tokens, .batch_size = batch}, std::ref(progress));
    // exact_match, or one per filter: exact_match_strict, exact_match_flexible.
    const auto named = [&](const char* what, size_t filter) {
      const std::string& key = scorer.scoring().filters[filter].key;
      return key.empty() ? std::string(what) : fmt::format("{}_{}", what, key);
    };
    for (size_t f = 0; f < r.exact_match.size(); ++f) {
      std::vector<bool> matched;
      for (const AnswerScorer::Score& score : r.scores) matched.push_back(score.matches[f]);
      put_mean(result, named("exact_match", f), matched);
    }
    for (size_t i = 0; i < r.completions.size(); ++i) {
      Json sample = {{"item", i}, {"prompt", task.generative_items[i].prompt},
                     {"references", task.generative_items[i].references}, {"completion", r.completions[i]}};
      for (size_t f = 0; f < r.exact_match.size(); ++f) {
        sample[named("answer", f)] = r.scores[i].answers[f];
        sample[named("exact_match", f)] = bool(r.scores[i].matches[f]);
      }
      samples.push_back(std::move(sample));
    }
  } else if (scores_documents(task.layout)) {
    const DocumentResult r = evaluate_documents(*m.model, *m.tokenizer, task.documents, batch, std::ref(progress));
    result["word_perplexity"] = r.word_perplexity;
    result["byte_perplexity"] = r.byte_perplexity;
    result["bits_per_byte"] = r.bits_per_byte;
    for (size_t i = 0; i < task.documents.size(); ++i) {
      samples.push_back({{"item", i}, {"log_likelihood", r.log_likelihoods[i]}, {"tokens", r.tokens[i]},
                         {"words", task.documents[i].words}, {"bytes", task.documents[i].bytes}});
    }
  } else if (scores_continuation(task.layout)) {
    const ContinuationResult r = evaluate_continuations(*m.model, *m.tokenizer, task.items, batch, std::ref(progress));
    put_mean(result, "accuracy", r.greedy);
    result["task_perplexity"] = r.perplexity;
    result["task_perplexity_stderr"] = r.perplexity_stderr ? Json(*r.perplexity_stderr) : Json();
    for (size_t i = 0; i < task.items.size(); ++i) {
      samples.push_back({{"item", i}, {"context", task.items[i].context},
                         {"continuation", task.items[i].endings[0]}, {"log_likelihood", r.log_likelihoods[i]},
                         {"greedy", bool(r.greedy[i])}});
    }
  } else {
    const MultipleChoiceResult r = evaluate_multiple_choice(*m.model, *m.tokenizer, task.items, batch, std::ref(progress));
    const bool norm = reports_accuracy_norm(task.layout);
    put_mean(result, "accuracy", r.scores);
    if (norm) put_mean(result, "accuracy_norm", r.scores_norm);
    if (task.layout == TaskLayout::mmlu) put_mmlu_groups(result, task.items, r.scores);
    for (size_t i = 0; i < task.items.size(); ++i) {
      const MultipleChoiceItem& item = task.items[i];
      Json sample = {{"item", i}, {"endings", item.endings}, {"label", item.label},
                     {"log_likelihoods", r.log_likelihoods[i]}, {"chosen", r.chosen[i]},
                     {"correct", r.chosen[i] == item.label}};
      if (norm && item.true_endings == 0) sample["correct_norm"] = r.scores_norm[i] == 1.0;
      if (item.contexts.empty()) sample["context"] = item.context; else sample["contexts"] = item.contexts;
      if (item.true_endings > 0) {
        sample["true_endings"] = item.true_endings;
        sample["score"] = r.scores[i];  // mc2: the true endings' share of the probability
      }
      samples.push_back(std::move(sample));
    }
  }
  progress.finish();
  result["task_items"] = count;
  if (t.samples) {  // one JSON line per item; bytes a completion cut mid-character read as U+FFFD
    for (const Json& sample : samples) t.samples->write(sample.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
    t.samples->commit();
    fmt::print(stderr, "samples: {}\n", t.samples_path);
  }
  return result;
}

// The scores of several tasks as lm-evaluation-harness prints them: task, metric, value.
void print_task_table(const Json& tasks) {
  size_t name_width = 4;
  for (const auto& [name, scores] : tasks.items()) name_width = std::max(name_width, name.size());
  fmt::print(stderr, "| {:<{}} | {:<20} | {:>10} | {:>8} |\n", "task", name_width, "metric", "value", "stderr");
  for (const auto& [name, scores] : tasks.items()) {
    for (const auto& [metric, value] : scores.items()) {
      if (!value.is_number_float() || metric.ends_with("_stderr")) continue;
      const Json error = scores.value(metric + "_stderr", Json());
      fmt::print(stderr, "| {:<{}} | {:<20} | {:>10.4f} | {:>8} |\n", name, name_width, metric, value.get<double>(),
                 error.is_number() ? fmt::format("{:.4f}", error.get<double>()) : std::string());
    }
  }
}

}  // namespace

std::vector<std::string> check_eval_config(const Config& c) {
  HONE_CHECK(c.has("dataset.type") || c.has("task.path") || c.has("tasks"),
             "{}: give dataset.type (and path), task.path or tasks", c.origin());
  // Keys that would be ignored are errors.
  HONE_CHECK(!c.has("dataset.path") || c.has("dataset.type"),
             "{}: dataset.path needs dataset.type (instruct, megatron, mds, ...) to be evaluated",
             c.origin_of("dataset.path"));
  if (c.has("tasks")) {
    resolved_tasks(c);  // each entry's keys, as hone run checks them before reading a file
    for (const char* key : {"task.limit", "task.samples_path", "task.fewshot_path"}) {
      HONE_CHECK(!c.has(key), "{}: {} is for task.path; with tasks, give it under tasks.NAME", c.origin_of(key), key);
    }
  }
  HONE_CHECK(!c.has("task.path") || !c.has("tasks"), "{}: give task.path (one task) or tasks (several), not both{}",
             c.origin(), c.how_to_drop_the_files("task.path", "tasks"));
  // Fine-tuning's name for an instruct sample's length, so its dataset section evaluates as written.
  if (c.has("dataset.max_seq_len")) {
    HONE_CHECK(c.has("dataset.type") && c.get<std::string>("dataset.type") == "instruct",
               "{}: dataset.max_seq_len is instruct records' length; token data takes dataset.seq_len",
               c.origin_of("dataset.max_seq_len"));
    HONE_CHECK(!c.has("dataset.seq_len"), "{}: give dataset.max_seq_len or dataset.seq_len, not both",
               c.origin_of("dataset.seq_len"));
  }
  if (c.has("task.path")) check_fewshot_keys(c, "task");
  if (c.has("dataset.type") && c.get<std::string>("dataset.type") == "instruct") {
    for (const char* key : {"dataset.block_causal", "dataset.eod_mask_loss", "dataset.eod_id"}) {
      HONE_CHECK(key == std::string_view("dataset.eod_id") ? !c.has(key) : !c.get<bool>(key),
                 "{}: {} is for token data (mock, megatron, mds, tokens); instruct samples are scored each on its own "
                 "already",
                 c.origin_of(key), key);
    }
    instruct_options_from(c);
  } else if (c.has("dataset.type")) {
    check_pretraining_data_keys(c);
  }
  return {};
}

namespace {

int evaluate_all(const Config& c) {
  // Every task's file read, and its samples file opened, before the model loads.
  std::vector<PlannedTask> tasks = plan_tasks(c);
  // Token data (mock, Megatron, MDS, token files) needs no tokenizer; records and tasks do.
  const bool text = !tasks.empty() || (c.has("dataset.type") && c.get<std::string>("dataset.type") == "instruct");
  InferenceModel m = load_inference_model(c, text);
  if (stop_requested()) throw Stopped{};
  // A generated answer's tokens and its prompt's share the model's context: checked before any task is scored.
  for (const PlannedTask& t : tasks) {
    HONE_CHECK(!is_generative(t.task.layout) || t.max_new_tokens < m.model->config().max_seq_len,
               "{}: {} {} leaves no room for a prompt in the model's max_seq_len {}: give a smaller one",
               c.origin_of(t.max_new_tokens_key), t.max_new_tokens_key, t.max_new_tokens, m.model->config().max_seq_len);
  }
  for (const std::string& note : m.notes) fmt::print(stderr, "note: {}\n", note);
  const int64_t batch = c.get<int64_t>("batch_size");
  const int64_t seq_len =
      sequence_length_for(c, c.has("dataset.max_seq_len") ? "dataset.max_seq_len" : "dataset.seq_len", 256,
                          m.model->config());
  Json result = Json::object();
  if (c.has("dataset.type")) {
    const std::string type = c.get<std::string>("dataset.type");
    const double fraction = c.get<double>("dataset.validation_fraction");
    std::unique_ptr<data::BatchSource> source;
    if (type == "instruct") {
      data::InstructOptions options = instruct_options_from(c);
      options.max_seq_len = seq_len;
      auto d = data::load_instruct_dataset(c.get<std::string>("dataset.path"), *m.tokenizer, options);
      if (fraction > 0) {  // the records fine-tuning holds out: the last ones
        const int64_t held_out = int64_t(double(d.samples.size()) * fraction + 0.5);
        HONE_CHECK(held_out > 0, "{}: dataset.validation_fraction {} of {} samples holds out none",
                   c.origin_of("dataset.validation_fraction"), fraction, d.samples.size());
        d.samples.erase(d.samples.begin(), d.samples.end() - ptrdiff_t(held_out));
      }
      source = std::make_unique<data::SampleStream>(
          std::move(d.samples), data::SampleStreamOptions{.batch_size = batch,
                                                          .seq_len = seq_len,
                                                          .length_multiple = sample_length_multiple(c, m.model->device()),
                                                          .shuffle = false,
                                                          .pad_id = m.tokenizer->eos_id().value_or(0)});
    } else {
      // The pretraining readers: every document, or those a run holds out for validation.
      const int64_t vocab_size = m.model->config().vocab_size;
      const TrainingData d = open_pretraining_data(c, vocab_size);
      HONE_CHECK(fraction == 0 || !d.validation.empty(), "{}: dataset.validation_fraction {} holds out no document",
                 c.origin_of("dataset.validation_fraction"), fraction);
      source = std::make_unique<data::PretrainStream>(
          fraction > 0 ? d.validation : d.train, fraction > 0 ? d.validation_weights : d.train_weights,
          with_document_boundaries(c, {.seq_len = seq_len,
                                       .batch_size = batch,
                                       .seed = uint64_t(c.get<int64_t>("seed")),  // a blend's draws, as the run's
                                       .shuffle = false,
                                       .vocab_size = vocab_size}));
    }
    // Every sample once (the last batch may be partial), or max_batches' worth.
    const int64_t samples = source->samples_per_epoch();
    const int64_t all_batches = (samples + batch - 1) / batch;
    const int64_t max_batches = c.get<int64_t>("max_batches");
    const int64_t batches = max_batches == 0 ? all_batches : std::min(max_batches, all_batches);
    if (batches < all_batches) {
      fmt::print(stderr, "note: max_batches {} scores {} of the data's {} samples (max_batches=0 scores them all)\n",
                 batches, std::min(samples, batches * batch), samples);
    }
    CountProgress progress("loss", batches, "batches");
    const LossEvaluation e = evaluate_loss(*m.model, *source, batches, std::ref(progress));
    progress.finish();
    result["loss"] = e.loss;
    result["perplexity"] = e.perplexity();
    result["tokens"] = e.tokens;
    result["samples"] = std::min(samples, batches * batch);
    result["samples_in_data"] = samples;
  }
  if (c.has("tasks")) {
    Json scores = Json::object();
    for (PlannedTask& t : tasks) scores[t.name] = evaluate_task(t, m, batch);
    print_task_table(scores);
    result["tasks"] = std::move(scores);
  } else if (!tasks.empty()) {
    result.update(evaluate_task(tasks.front(), m, batch));
  }
  fmt::print(stderr, "model: {}\n", m.description);
  fmt::print("{}\n", result.dump());
  return 0;
}

}  // namespace

int run_eval(const Config& c) {
  check_one_process("eval");
  check_eval_config(c);
  // Ctrl-C or a kill stops before the next batch; the samples files being
  // written are removed as the tasks unwind (those of tasks done are whole).
  catch_stop_signals();
  try {
    return evaluate_all(c);
  } catch (const Stopped&) {
    fmt::print(stderr, "hone: eval stopped by signal {}; no scores printed\n", stop_signal());
    return 128 + stop_signal();
  }
}

}  // namespace hone
