// The eval recipe: loss and perplexity on a dataset (a pretraining token stream
// or an instruct dataset) and the score of a task file (lm-evaluation-harness's
// tasks: multiple choice, continuations, generated answers); it ends with one
// JSON line.
#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "hone/core/progress_line.hpp"
#include "hone/data/instruct.hpp"
#include "hone/data/pretrain_stream.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/train/data_sources.hpp"
#include "hone/train/evaluation.hpp"
#include "hone/train/inference.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/run_config.hpp"

namespace hone {

Schema eval_schema() {
  Schema s = inference_schema();
  s.add({"dataset.type", ValueType::string, nullptr, "data for loss and perplexity",
         {"mock", "megatron", "mds", "instruct"}});
  s.add({"dataset.path", ValueType::string, nullptr, "megatron prefix (or blend), MDS folder, or instruct records (as fine-tuning's dataset.path)"});
  s.add({"dataset.seq_len", ValueType::integer, nullptr,
         "tokens per sequence (unset: 256, or the model's max_seq_len if smaller)"},
        Range::positive());
  s.add(instruct_dataset_schema());
  s.add({"dataset.mock.documents", ValueType::integer, 200, "mock: documents"}, Range::positive());
  s.add({"dataset.mock.document_length", ValueType::integer, 512, "mock: tokens per document"}, Range::positive());
  s.add({"batch_size", ValueType::integer, 4, "sequences per batch"}, Range::positive());
  s.add({"max_batches", ValueType::integer, 50, "batches evaluated at most"}, Range::positive());
  s.add({"task.path", ValueType::string, nullptr,
         "an evaluation task's records (multiple choice, a continuation, or answers to generate; see task.layout): "
         "JSONL, JSON, Parquet, or a folder or pattern of shards"});
  s.add({"task.layout", ValueType::string, "auto",
         "the task's columns and prompts, as lm-evaluation-harness's task of the name (auto: by the columns)",
         {"auto", "plain", "hellaswag", "arc", "piqa", "mmlu", "truthfulqa_mc1", "truthfulqa_mc2", "winogrande",
          "openbookqa", "boolq", "siqa", "sciq", "foundry", "lambada", "foundry_lm", "gsm8k", "triviaqa"}});
  s.add({"task.num_fewshot", ValueType::integer, 0,
         "answered examples before each item, from task.fewshot_path: mmlu the first of its subject, the others "
         "drawn at random as lm-evaluation-harness draws them"},
        Range::not_negative());
  s.add({"task.fewshot_path", ValueType::string, nullptr,
         "the examples' records (the harness's few-shot split: mmlu's dev, the others' train)"});
  s.add({"task.fewshot_seed", ValueType::integer, 1234,
         "seed of the examples' draw (the harness's --fewshot_random_seed)"},
        Range::not_negative());
  s.add({"task.max_new_tokens", ValueType::integer, 256,
         "gsm8k, triviaqa: tokens generated at most per answer (the harness's max_gen_toks)"},
        Range::positive());
  s.add({"task.limit", ValueType::number, nullptr,
         "score only the first items: a count, or below 1 a share of them, rounded up (the harness's --limit)"},
        Range::positive());
  s.add({"task.samples_path", ValueType::string, nullptr,
         "a JSONL file of every item scored: its prompt, its choices' log-likelihoods or its generated answer, and "
         "whether it was right (the harness's --log_samples)"});
  return s.add(mds_tokens_schema());
}

int run_eval(const Config& c) {
  HONE_CHECK(c.has("dataset.type") || c.has("task.path"), "{}: give dataset.type (and path) or task.path",
             c.origin());
  // Token data (mock, Megatron, MDS) needs no tokenizer; records and tasks do.
  const bool text = c.has("task.path") || (c.has("dataset.type") && c.get<std::string>("dataset.type") == "instruct");
  InferenceModel m = load_inference_model(c, text);
  const int64_t batch = c.get<int64_t>("batch_size");
  const int64_t seq_len = sequence_length_for(c, "dataset.seq_len", 256, m.model->config());
  Json result = Json::object();
  if (c.has("dataset.type")) {
    const std::string type = c.get<std::string>("dataset.type");
    std::unique_ptr<data::BatchSource> source;
    if (type == "instruct") {
      auto d = data::load_instruct_dataset(c.get<std::string>("dataset.path"), *m.tokenizer,
                                           instruct_options_from(c, seq_len));
      source = std::make_unique<data::SampleStream>(
          std::move(d.samples), data::SampleStreamOptions{.batch_size = batch,
                                                          .seq_len = seq_len,
                                                          .length_multiple = sample_length_multiple(c, m.model->device()),
                                                          .shuffle = false,
                                                          .pad_id = m.tokenizer->eos_id().value_or(0)});
    } else {
      // The pretraining readers, every document kept for evaluation.
      Config all = c;
      all.set("dataset.validation_fraction", 0.0);
      const int64_t vocab_size = m.model->config().vocab_size;
      const TrainingData d = open_pretraining_data(all, vocab_size);
      source = std::make_unique<data::PretrainStream>(
          d.train, d.train_weights,
          data::StreamOptions{.seq_len = seq_len, .batch_size = batch, .shuffle = false, .vocab_size = vocab_size});
    }
    const int64_t batches = std::max<int64_t>(1, std::min(c.get<int64_t>("max_batches"), source->samples_per_epoch() / batch));
    const LossEvaluation e = evaluate_loss(*m.model, *source, batches);
    result["loss"] = e.loss;
    result["perplexity"] = e.perplexity();
    result["tokens"] = e.tokens;
  }
  if (c.has("task.path")) {
    const FewShot shots{c.has("task.fewshot_path") ? c.get<std::string>("task.fewshot_path") : "",
                        c.get<int64_t>("task.num_fewshot"), uint64_t(c.get<int64_t>("task.fewshot_seed"))};
    HONE_CHECK(shots.path.empty() == (shots.count == 0),
               "{}: task.num_fewshot (> 0) and task.fewshot_path go together: the examples and the file they come from",
               c.origin());
    // Opened first, so that a folder that cannot take it fails before the evaluation, not after.
    std::optional<AtomicFile> samples_file;
    if (c.has("task.samples_path")) samples_file.emplace(c.get<std::string>("task.samples_path"));
    EvalTask task = read_eval_task(c.get<std::string>("task.path"), c.get<std::string>("task.layout"), shots);
    if (c.has("task.limit")) {  // the first items; their few-shot draws are those of the whole task's first
      const double limit = c.get<double>("task.limit");
      const size_t all = task.items.size() + task.generative_items.size();
      const auto keep = size_t(limit < 1 ? std::ceil(double(all) * limit) : limit);
      if (keep < task.items.size()) task.items.resize(keep);
      if (keep < task.generative_items.size()) task.generative_items.resize(keep);
    }
    const int64_t count = int64_t(task.items.size() + task.generative_items.size());
    ProgressLine line;
    const auto start = std::chrono::steady_clock::now();
    const auto progress = [&](int64_t done) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      line.draw(fmt::format("task ({}): {}/{} items, {:.0f} s", layout_name(task.layout), done, count, seconds));
    };
    std::vector<Json> samples;
    result["task_layout"] = layout_name(task.layout);
    if (is_generative(task.layout)) {
      const AnswerScorer scorer(answer_scoring(task.layout));
      const GenerativeResult r = evaluate_generative(
          *m.model, *m.tokenizer, task.generative_items, scorer,
          {.max_new_tokens = c.get<int64_t>("task.max_new_tokens"), .batch_size = batch}, progress);
      // exact_match, or one per filter: exact_match_strict, exact_match_flexible.
      const auto named = [&](const char* what, size_t filter) {
        const std::string& key = scorer.scoring().filters[filter].key;
        return key.empty() ? std::string(what) : fmt::format("{}_{}", what, key);
      };
      for (size_t f = 0; f < r.exact_match.size(); ++f) result[named("exact_match", f)] = r.exact_match[f];
      for (size_t i = 0; i < r.completions.size(); ++i) {
        Json sample = {{"item", i}, {"prompt", task.generative_items[i].prompt},
                       {"references", task.generative_items[i].references}, {"completion", r.completions[i]}};
        for (size_t f = 0; f < r.exact_match.size(); ++f) {
          sample[named("answer", f)] = r.scores[i].answers[f];
          sample[named("exact_match", f)] = bool(r.scores[i].matches[f]);
        }
        samples.push_back(std::move(sample));
      }
    } else if (scores_continuation(task.layout)) {
      const ContinuationResult r = evaluate_continuations(*m.model, *m.tokenizer, task.items, progress);
      result["accuracy"] = r.accuracy;
      result["task_perplexity"] = r.perplexity;
      for (size_t i = 0; i < task.items.size(); ++i) {
        samples.push_back({{"item", i}, {"context", task.items[i].context},
                           {"continuation", task.items[i].endings[0]}, {"log_likelihood", r.log_likelihoods[i]},
                           {"greedy", bool(r.greedy[i])}});
      }
    } else {
      const MultipleChoiceResult r = evaluate_multiple_choice(*m.model, *m.tokenizer, task.items, progress);
      result["accuracy"] = r.accuracy;
      if (reports_accuracy_norm(task.layout)) result["accuracy_norm"] = r.accuracy_norm;
      for (size_t i = 0; i < task.items.size(); ++i) {
        const MultipleChoiceItem& item = task.items[i];
        Json sample = {{"item", i}, {"endings", item.endings}, {"label", item.label},
                       {"log_likelihoods", r.log_likelihoods[i]}, {"chosen", r.chosen[i]},
                       {"correct", r.chosen[i] == item.label}};
        if (item.contexts.empty()) sample["context"] = item.context; else sample["contexts"] = item.contexts;
        if (item.true_endings > 0) sample["true_endings"] = item.true_endings;
        samples.push_back(std::move(sample));
      }
    }
    line.clear();
    result["task_items"] = count;
    if (samples_file) {  // one JSON line per item; bytes a completion cut mid-character read as U+FFFD
      for (const Json& sample : samples) {
        samples_file->write(sample.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
      }
      samples_file->commit();
      fmt::print(stderr, "samples: {}\n", c.get<std::string>("task.samples_path"));
    }
  }
  fmt::print(stderr, "model: {}\n", m.description);
  fmt::print("{}\n", result.dump());
  return 0;
}

}  // namespace hone
