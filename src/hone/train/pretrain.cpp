// The pretrain recipe: a model from scratch, or one loaded from any format
// hone reads (continued pretraining), on a token stream (Megatron, MDS or mock
// documents), trained by the shared training loop.
#include <fmt/ranges.h>

#include <filesystem>

#include "hone/core/parallel.hpp"
#include "hone/data/pretrain_stream.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/io/convert.hpp"
#include "hone/io/weights.hpp"
#include "hone/train/data_sources.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/run_config.hpp"
#include "hone/train/trainer.hpp"

namespace hone {

namespace fs = std::filesystem;

namespace {

// Continued pretraining takes checkpoint.path's model, its architecture with
// its weights (Megatron's --load with --finetune, torchtitan's
// initial_load_path, Foundry's load_path). model.* keys may change only where
// and how positions go (a longer context), which leaves the weights' shapes:
// any other would shape another model.
bool changes_positions_only(std::string_view key) {
  return key == "model.max_seq_len" || key == "model.rope_theta" || key.starts_with("model.rope_scaling.");
}

ModelConfig starting_model_config(const Config& c, const ModelConfig& loaded) {
  std::vector<std::string> set;
  const Schema model_keys = model_schema();
  for (const KeySpec& spec : model_keys.keys()) {
    if (c.has(spec.key) && !changes_positions_only(spec.key)) set.push_back(spec.key);
  }
  const std::string path = c.get<std::string>("checkpoint.path");
  HONE_CHECK(set.empty(),
             "{}: {} {} set, but checkpoint.path {} gives the model (its architecture and weights): give {}=null to "
             "unset {} (beside checkpoint.path only model.max_seq_len, model.rope_theta and model.rope_scaling.* may "
             "change it: where and how positions go)",
             c.origin_of(set.front()), fmt::join(set, ", "), set.size() == 1 ? "is" : "are", path,
             set.size() == 1 ? set.front() : "model", set.size() == 1 ? "it" : "them");
  const ModelConfig m = with_model_keys(c, loaded, /*name_changes=*/true);
  HONE_CHECK(m.position != PositionKind::learned || m.max_seq_len == loaded.max_seq_len,
             "{}: model.max_seq_len {}: checkpoint.path {} learned its positions, a table of {} rows, which another "
             "length would change (RoPE's and ALiBi's models take any)",
             c.origin_of("model.max_seq_len"), m.max_seq_len, path, loaded.max_seq_len);
  return m;
}

// The model a run starts from: checkpoint.path's, the folder it resolves to
// (a run directory: its latest step folder), its weights, and its architecture
// with the run's position settings.
struct StartingModel {
  BaseModelRecord record;
  std::unique_ptr<WeightSource> weights;
  ModelConfig config;
};

StartingModel open_starting_model(const Config& c) {
  const std::string path = c.get<std::string>("checkpoint.path");
  check_path_exists(c, "checkpoint.path", path);
  BaseModelRecord record = base_model_record(path);
  std::unique_ptr<WeightSource> weights = open_weights(record.folder, c.get<std::string>("checkpoint.format"));
  const ModelConfig config = starting_model_config(c, weights->config());
  return {.record = std::move(record), .weights = std::move(weights), .config = config};
}

TrainingShape shape_of(const Config& c, const ModelConfig& model) {
  TrainingShape shape{.model = model, .batch_size = c.get<int64_t>("batch_size")};
  shape.seq_len = sequence_length_for(c, "dataset.seq_len", /*fallback=*/0, shape.model);  // required: no fallback
  return shape;
}

// `from`: the folder of the model the run starts from (none: from scratch).
std::vector<std::string> summarize(const Config& c, const TrainingShape& shape, const std::string& from,
                                   int data_parallel_ranks) {
  const RunSettings run = run_settings_from(c);
  const ModelConfig& model = shape.model;
  const MemoryEstimate m =
      estimate_training_memory(model, run.dtype, shape.batch_size, shape.seq_len, activation_options_from(c), {},
                               int(c.get<int64_t>("distributed.zero")), data_parallel_ranks, run.device);
  return {
      fmt::format("model: {} ({} family){}, {:.1f}M parameters ({:.1f}M in matrix products)", model.name,
                  family_name(model.family), from.empty() ? std::string() : " from " + from,
                  double(model.num_params()) / 1e6, double(model.num_matmul_params()) / 1e6),
      "batch: " + describe_batch(shape.batch_size, shape.seq_len, c.get<int64_t>("gradient_accumulation_steps")),
      describe(m, run),
  };
}

// The tokenizer whose files every checkpoint carries: tokenizer.path (the one
// the data was made with), or else the starting model's folder where it holds
// one; none for mock data made without one.
std::string tokenizer_folder(const Config& c, const std::optional<StartingModel>& start) {
  if (c.has("tokenizer.path")) return c.get<std::string>("tokenizer.path");
  if (start && fs::is_directory(start->record.folder) && !tokenizer_companion_files(start->record.folder).empty()) {
    return start->record.folder;
  }
  return "";
}

}  // namespace

TrainingShape pretrain_shape(const Config& c) {
  return shape_of(c, c.has("checkpoint.path") ? open_starting_model(c).config : model_config_from(c));
}

std::vector<std::string> summarize_training(const Config& c, int data_parallel_ranks) {
  check_pretraining_data_keys(c);
  if (!c.has("checkpoint.path")) return summarize(c, shape_of(c, model_config_from(c)), "", data_parallel_ranks);
  const std::string path = c.get<std::string>("checkpoint.path");
  // hone validate on another machine than the run's.
  if (!fs::exists(path)) {
    return {fmt::format("model: {} does not exist here yet: parameter count and memory estimate once it does", path)};
  }
  const StartingModel start = open_starting_model(c);
  return summarize(c, shape_of(c, start.config), start.record.folder, data_parallel_ranks);
}

int run_pretrain(const Config& c) {
  check_output_dir_is_free(c);
  const RunSettings run = run_settings_from(c);
  if (run.threads > 0) set_num_threads(run.threads);
  std::optional<StartingModel> start;
  if (c.has("checkpoint.path")) start = open_starting_model(c);
  const TrainingShape shape = shape_of(c, start ? start->config : model_config_from(c));
  const ModelConfig& model_config = shape.model;
  const int64_t batch_size = shape.batch_size, seq_len = shape.seq_len;

  // The tokenizer the data was made with travels in every checkpoint.
  std::vector<std::string> tokenizer_files;
  if (const std::string path = tokenizer_folder(c, start); !path.empty()) {
    if (c.has("tokenizer.path")) check_path_exists(c, "tokenizer.path", path);
    const int64_t vocab = load_tokenizer(path)->vocab_size();
    HONE_CHECK(vocab <= model_config.vocab_size, "{}: the tokenizer {} has {} tokens, more than {} {}", c.origin(),
               path, vocab,
               start ? fmt::format("the vocabulary of checkpoint.path {},", c.get<std::string>("checkpoint.path"))
                     : std::string("model.vocab_size"),
               model_config.vocab_size);
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
  Transformer model(model_config, run.dtype, world.device(), std::nullopt, world.model_placement());
  if (start) {
    load_weights(*start->weights, model, world.is_main() ? LoadProgress::shown : LoadProgress::hidden);
  } else {
    model.init_weights(run.seed);  // the same seed on every rank: the replicas start identical
  }
  return run_training(c, {.world = &world,
                          .model = &model,
                          .train = train.get(),
                          .validation = valid.get(),
                          .seq_len = seq_len,
                          .data_description = data.description,
                          .summary = summarize(c, shape, start ? start->record.folder : "", world.dp_size()),
                          .companion_files = tokenizer_files,
                          .base_model = start ? std::optional(start->record) : std::nullopt});
}

}  // namespace hone
