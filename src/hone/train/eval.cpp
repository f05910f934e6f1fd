// The eval recipe: loss and perplexity on a dataset (a pretraining token stream
// or an instruct dataset) and accuracy on a multiple-choice task file; it ends
// with one JSON line.
#include <fmt/core.h>

#include <chrono>

#include "hone/core/progress_line.hpp"
#include "hone/data/instruct.hpp"
#include "hone/data/pretrain_stream.hpp"
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
         "a multiple-choice task: JSONL, JSON, Parquet, or a folder or pattern of shards"});
  s.add({"task.layout", ValueType::string, "auto",
         "the task's columns and prompts, as lm-evaluation-harness's task of the name (auto: by the columns)",
         {"auto", "plain", "hellaswag", "arc", "piqa", "mmlu", "truthfulqa_mc1", "truthfulqa_mc2", "winogrande",
          "foundry"}});
  s.add({"task.num_fewshot", ValueType::integer, 0,
         "mmlu: answered examples before each question, the first of its subject in task.fewshot_path"},
        Range::not_negative());
  s.add({"task.fewshot_path", ValueType::string, nullptr, "mmlu: the examples' records (cais/mmlu's dev split)"});
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
                        c.get<int64_t>("task.num_fewshot")};
    HONE_CHECK(shots.path.empty() || shots.count > 0, "{}: task.fewshot_path goes with task.num_fewshot (> 0)",
               c.origin());
    const MultipleChoiceTask task =
        read_multiple_choice(c.get<std::string>("task.path"), c.get<std::string>("task.layout"), shots);
    ProgressLine line;
    const auto start = std::chrono::steady_clock::now();
    const MultipleChoiceResult r = evaluate_multiple_choice(*m.model, *m.tokenizer, task.items, [&](int64_t done) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      line.draw(fmt::format("task ({}): {}/{} items, {:.0f} s", layout_name(task.layout), done, task.items.size(),
                            seconds));
    });
    line.clear();
    result["task_layout"] = layout_name(task.layout);
    result["accuracy"] = r.accuracy;
    if (reports_accuracy_norm(task.layout)) result["accuracy_norm"] = r.accuracy_norm;
    result["task_items"] = r.items;
  }
  fmt::print(stderr, "model: {}\n", m.description);
  fmt::print("{}\n", result.dump());
  return 0;
}

}  // namespace hone
