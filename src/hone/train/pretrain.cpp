// The pretrain recipe: a model from scratch on a token stream (Megatron,
// MDS or mock documents), trained by the shared training loop.
#include <fmt/ranges.h>

#include <filesystem>

#include "hone/core/parallel.hpp"
#include "hone/data/pretrain_stream.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/io/weights.hpp"
#include "hone/train/data_sources.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/run_config.hpp"
#include "hone/train/trainer.hpp"

namespace hone {

namespace fs = std::filesystem;

TrainingShape pretrain_shape(const Config& c) {
  TrainingShape shape{.model = model_config_from(c), .batch_size = c.get<int64_t>("batch_size")};
  shape.seq_len = sequence_length_for(c, "dataset.seq_len", /*fallback=*/0, shape.model);  // required: no fallback
  return shape;
}

std::vector<std::string> summarize_training(const Config& c, int data_parallel_ranks) {
  check_pretraining_data_keys(c);
  const RunSettings run = run_settings_from(c);
  const TrainingShape shape = pretrain_shape(c);
  const ModelConfig& model = shape.model;
  const MemoryEstimate m =
      estimate_training_memory(model, run.dtype, shape.batch_size, shape.seq_len, activation_options_from(c), {},
                               int(c.get<int64_t>("distributed.zero")), data_parallel_ranks, run.device);
  return {
      fmt::format("model: {} ({} family), {:.1f}M parameters ({:.1f}M in matrix products)", model.name,
                  family_name(model.family), double(model.num_params()) / 1e6,
                  double(model.num_matmul_params()) / 1e6),
      "batch: " + describe_batch(shape.batch_size, shape.seq_len, c.get<int64_t>("gradient_accumulation_steps")),
      describe(m, run),
  };
}

int run_pretrain(const Config& c) {
  check_output_dir_is_free(c);
  const RunSettings run = run_settings_from(c);
  if (run.threads > 0) set_num_threads(run.threads);
  const TrainingShape shape = pretrain_shape(c);
  const ModelConfig& model_config = shape.model;
  const int64_t batch_size = shape.batch_size, seq_len = shape.seq_len;

  // The tokenizer the data was made with travels in every checkpoint.
  std::vector<std::string> tokenizer_files;
  if (c.has("tokenizer.path")) {
    const std::string path = c.get<std::string>("tokenizer.path");
    check_path_exists(c, "tokenizer.path", path);
    const int64_t vocab = load_tokenizer(path)->vocab_size();
    HONE_CHECK(vocab <= model_config.vocab_size, "{}: the tokenizer {} has {} tokens, more than model.vocab_size {}",
               c.origin(), path, vocab, model_config.vocab_size);
    tokenizer_files = tokenizer_companion_files(path);
    // OpenAI's GPT-2 files are Hugging Face's vocab.json and merges.txt under other names.
    const bool openai_gpt2 = fs::exists(fs::path(path) / "encoder.json") || fs::path(path).filename() == "encoder.json";
    HONE_CHECK(!tokenizer_files.empty(), "{}: tokenizer.path {} has no files a checkpoint can carry ({}){}",
               c.origin_of("tokenizer.path"), path, fmt::join(companion_file_names(), ", "),
               openai_gpt2 ? "; OpenAI's encoder.json and vocab.bpe are vocab.json and merges.txt under Hugging "
                             "Face's names: copy them so into a folder and give that"
                           : "");
  }

  TrainingWorld world(c, run.device);

  // Data: this rank's slices of the train and validation streams over the configured sources.
  const TrainingData data = open_pretraining_data(c, model_config.vocab_size);
  const data::StreamOptions train_options = with_document_boundaries(c, {.seq_len = seq_len,
                                                                         .batch_size = batch_size,
                                                                         .seed = run.seed,
                                                                         .shuffle = c.get<bool>("dataset.shuffle"),
                                                                         .rank = world.dp_rank(),
                                                                         .world_size = world.dp_size(),
                                                                         .vocab_size = model_config.vocab_size});
  std::unique_ptr<data::PretrainStream> train;
  try {
    train = std::make_unique<data::PretrainStream>(data.train, data.train_weights, train_options);
  } catch (const Error& e) {
    // Too little left to train on: say which key holds the rest out.
    if (c.has("dataset.validation_path") || c.get<double>("dataset.validation_fraction") == 0) throw;
    fail("{}: training data: {} (dataset.validation_fraction {} holds out the rest: lower it)", c.origin_of("dataset"),
         e.what(), c.get<double>("dataset.validation_fraction"));
  }
  std::unique_ptr<data::PretrainStream> valid;
  if (!data.validation.empty()) {
    data::StreamOptions valid_options = train_options;
    valid_options.shuffle = false;
    try {
      valid = std::make_unique<data::PretrainStream>(data.validation, data.validation_weights, valid_options);
    } catch (const Error& e) {
      fail("{}: validation data: {} ({})", c.origin_of("dataset"), e.what(),
           c.has("dataset.validation_path")
               ? "dataset.validation_path"
               : fmt::format("the last dataset.validation_fraction {} of the documents: raise it, give "
                             "dataset.validation_path, or 0 for no validation",
                             c.get<double>("dataset.validation_fraction")));
    }
  }
  // The same seed on every rank: the replicas start identical.
  Transformer model(model_config, run.dtype, world.device(), std::nullopt, world.model_placement());
  model.init_weights(run.seed);
  return run_training(c, {.world = &world,
                          .model = &model,
                          .train = train.get(),
                          .validation = valid.get(),
                          .seq_len = seq_len,
                          .data_description = data.description,
                          .summary = summarize_training(c, world.dp_size()),
                          .companion_files = tokenizer_files});
}

}  // namespace hone
