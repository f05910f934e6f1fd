// The pretrain recipe: a model from scratch, or one loaded from any format
// hone reads (continued pretraining), on a token stream (Megatron, MDS or mock
// documents), trained by the shared training loop.
#include <fmt/ranges.h>

#include <filesystem>
#include <functional>

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

// The model.* keys `c` sets that `keep` takes.
std::vector<std::string> model_keys_set(const Config& c, const std::function<bool(std::string_view)>& keep) {
  std::vector<std::string> set;
  const Schema model_keys = model_schema();
  for (const KeySpec& spec : model_keys.keys()) {
    if (c.has(spec.key) && keep(spec.key)) set.push_back(spec.key);
  }
  return set;
}

// The model.* keys beside checkpoint.path: those that change where and how
// positions go, and only where the model has those positions.
void check_model_keys(const Config& c) {
  const std::vector<std::string> set =
      model_keys_set(c, [](std::string_view key) { return !changes_positions_only(key); });
  HONE_CHECK(set.empty(),
             "{}: {} {} set, but checkpoint.path {} gives the model (its architecture and weights): give {}=null to "
             "unset {} (beside checkpoint.path only model.max_seq_len, model.rope_theta and model.rope_scaling.* may "
             "change it: where and how positions go)",
             c.origin_of(set.front()), fmt::join(set, ", "), set.size() == 1 ? "is" : "are",
             c.get<std::string>("checkpoint.path"), set.size() == 1 ? set.front() : "model",
             set.size() == 1 ? "it" : "them");
}

ModelConfig starting_model_config(const Config& c, const ModelConfig& loaded) {
  check_model_keys(c);
  const std::string path = c.get<std::string>("checkpoint.path");
  const ModelConfig m = with_model_keys(c, loaded, /*name_changes=*/true);
  HONE_CHECK(m.position != PositionKind::learned || m.max_seq_len == loaded.max_seq_len,
             "{}: model.max_seq_len {}: checkpoint.path {} learned its positions, a table of {} rows, which another "
             "length would change (RoPE's and ALiBi's models take any)",
             c.origin_of("model.max_seq_len"), m.max_seq_len, path, loaded.max_seq_len);
  const auto rope_key = [](std::string_view key) { return changes_positions_only(key) && key != "model.max_seq_len"; };
  for (const std::string& key : model_keys_set(c, rope_key)) {
    HONE_CHECK(m.position == PositionKind::rope, "{}: {}: checkpoint.path {} has no RoPE ({} positions), which {} would set",
               c.origin_of(key), key, path, m.position == PositionKind::learned ? "learned" : "ALiBi", key);
  }
  return m;
}

// The checkpoint a resumed run goes on from, if it resumes.
std::optional<std::string> resumed_checkpoint(const Config& c) {
  if (!c.has("resume")) return std::nullopt;
  return find_checkpoint(c.get<std::string>("output_dir"), c.get<std::string>("resume"));
}

// The model a run starts from: checkpoint.path's (a run directory: its latest
// step folder), its weights, and its architecture with the run's position
// settings. A resumed run's checkpoint holds the model whole: its
// architecture is read there (the model it started from may have moved or gone
// since), its weights when the run loads the checkpoint, and the record of the
// model it started from is the checkpoint's.
struct StartingModel {
  std::optional<BaseModelRecord> record;
  std::unique_ptr<WeightSource> weights;  // none on a resume
  ModelConfig config;
  std::optional<std::string> resumed_from;  // the checkpoint, on a resume
};

StartingModel open_starting_model(const Config& c) {
  StartingModel start;
  start.resumed_from = resumed_checkpoint(c);
  if (start.resumed_from) {
    start.record = checkpoint_base_model(*start.resumed_from);
    start.config = starting_model_config(c, read_model_config(*start.resumed_from));
    return start;
  }
  const std::string path = c.get<std::string>("checkpoint.path");
  check_path_exists(c, "checkpoint.path", path);
  start.record = base_model_record(path);
  start.weights = open_weights(start.record->folder, c.get<std::string>("checkpoint.format"));
  start.config = starting_model_config(c, start.weights->config());
  return start;
}

TrainingShape shape_of(const Config& c, const ModelConfig& model) {
  // A loaded model's context may grow where its positions allow: say so.
  HONE_CHECK(!c.has("checkpoint.path") || model.position == PositionKind::learned ||
                 c.get<int64_t>("dataset.seq_len") <= model.max_seq_len,
             "{}: dataset.seq_len {} exceeds the model's max_seq_len {} (checkpoint.path {} has {} positions: "
             "model.max_seq_len may raise it)",
             c.origin_of("dataset.seq_len"), c.get<int64_t>("dataset.seq_len"), model.max_seq_len,
             c.get<std::string>("checkpoint.path"), model.position == PositionKind::rope ? "RoPE" : "ALiBi");
  TrainingShape shape{.model = model, .batch_size = c.get<int64_t>("batch_size")};
  shape.seq_len = sequence_length_for(c, "dataset.seq_len", /*fallback=*/0, shape.model);  // required: no fallback
  return shape;
}

// `from`: the folder of the model the run starts from (none: from scratch).
// `estimate`, where given, receives the memory estimate.
std::vector<std::string> summarize(const Config& c, const TrainingShape& shape, const std::string& from,
                                   int data_parallel_ranks, MemoryEstimate* estimate = nullptr) {
  const RunSettings run = run_settings_from(c);
  const ModelConfig& model = shape.model;
  const MemoryEstimate m =
      estimate_training_memory(model, run.dtype, shape.batch_size, shape.seq_len, activation_options_from(c), {},
                               int(c.get<int64_t>("distributed.zero")), data_parallel_ranks, run.device);
  if (estimate) *estimate = m;
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
  if (!start || !start->record || !fs::is_directory(start->record->folder)) return "";
  const std::string& folder = start->record->folder;
  // A tokenizer hone reads and its files to carry (a generation_config.json alone is none).
  const bool holds_one = !tokenizer_files_in(folder).empty() && !tokenizer_companion_files(folder).empty();
  return holds_one ? folder : "";
}

// The files of tokenizer_folder's tokenizer, checked against the model's
// vocabulary. A resume whose starting model is gone takes them from its
// checkpoint (the trainer keeps a copy before its saves may rotate that away).
std::vector<std::string> carried_tokenizer_files(const Config& c, const std::optional<StartingModel>& start,
                                                 const ModelConfig& model) {
  const std::string path = tokenizer_folder(c, start);
  if (path.empty()) {
    const bool in_checkpoint = start && start->resumed_from && !tokenizer_files_in(*start->resumed_from).empty();
    return in_checkpoint ? tokenizer_companion_files(*start->resumed_from) : std::vector<std::string>{};
  }
  if (c.has("tokenizer.path")) check_path_exists(c, "tokenizer.path", path);
  const int64_t vocab = load_tokenizer(path)->vocab_size();
  HONE_CHECK(vocab <= model.vocab_size, "{}: the tokenizer {} has {} tokens, more than {} {}",
             c.origin_of_section("tokenizer"), path, vocab,
             start ? fmt::format("the vocabulary of checkpoint.path {},", c.get<std::string>("checkpoint.path"))
                   : std::string("model.vocab_size"),
             model.vocab_size);
  std::vector<std::string> files = tokenizer_companion_files(path);
  HONE_CHECK(!files.empty(), "{}: tokenizer.path {} has no files a checkpoint can carry ({}, or OpenAI's GPT-2 "
             "encoder.json and vocab.bpe in a folder)",
             c.origin_of("tokenizer.path"), path, fmt::join(companion_file_names(), ", "));
  return files;
}

// The folder of the model the run started from, for the banner.
std::string starting_folder(const std::optional<StartingModel>& start) {
  return start && start->record ? start->record->folder : "";
}

}  // namespace

TrainingShape pretrain_shape(const Config& c) {
  return shape_of(c, c.has("checkpoint.path") ? open_starting_model(c).config : model_config_from(c));
}

std::vector<std::string> summarize_training(const Config& c, int data_parallel_ranks) {
  check_pretraining_data_keys(c);
  std::optional<StartingModel> start;
  if (c.has("checkpoint.path")) {
    const std::string path = c.get<std::string>("checkpoint.path");
    // hone validate on another machine than the run's.
    if (!fs::exists(path) && !resumed_checkpoint(c)) {
      check_model_keys(c);
      std::vector<std::string> lines = {
          fmt::format("model: {} does not exist here yet: parameter count and memory estimate once it does", path)};
      for (std::string& line : data_paths_not_here(c)) lines.push_back(std::move(line));
      return lines;
    }
    start = open_starting_model(c);
  }
  const TrainingShape shape = shape_of(c, start ? start->config : model_config_from(c));
  std::vector<std::string> summary = summarize(c, shape, starting_folder(start), data_parallel_ranks);
  for (std::string& line : data_paths_not_here(c)) summary.push_back(std::move(line));
  if (c.has("tokenizer.path") && !fs::exists(c.get<std::string>("tokenizer.path"))) {
    summary.push_back(fmt::format("tokenizer: {} does not exist here yet: its vocabulary is checked against the "
                                  "model's once it does",
                                  c.get<std::string>("tokenizer.path")));
  } else {
    carried_tokenizer_files(c, start, shape.model);
  }
  return summary;
}

int run_pretrain(const Config& c) {
  check_output_dir(c);
  const RunSettings run = run_settings_from(c);
  if (run.threads > 0) set_num_threads(run.threads);
  std::optional<StartingModel> start;
  if (c.has("checkpoint.path")) start = open_starting_model(c);
  const TrainingShape shape = shape_of(c, start ? start->config : model_config_from(c));
  const ModelConfig& model_config = shape.model;
  const int64_t batch_size = shape.batch_size, seq_len = shape.seq_len;

  // The tokenizer the data was made with travels in every checkpoint.
  const std::vector<std::string> tokenizer_files = carried_tokenizer_files(c, start, model_config);

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
    // Too little left to train on: say which key holds the rest out, where it holds out any.
    const bool held_out = std::ranges::any_of(data.validation, [](const auto& r) { return r.end > r.first; });
    if (c.has("dataset.validation_path") || !held_out) throw;
    fail("{}: training data: {} (dataset.validation_fraction {} holds out the rest: lower it)",
         c.origin_of_section("dataset"), e.what(), c.get<double>("dataset.validation_fraction"));
  }
  std::unique_ptr<data::PretrainStream> valid;
  if (!data.validation.empty()) {
    data::StreamOptions valid_options = train_options;
    valid_options.shuffle = false;
    try {
      valid = std::make_unique<data::PretrainStream>(data.validation, data.validation_weights, valid_options);
    } catch (const Error& e) {
      fail("{}: validation data: {} ({})", c.origin_of_section("dataset"), e.what(),
           c.has("dataset.validation_path")
               ? "dataset.validation_path"
               : fmt::format("the last dataset.validation_fraction {} of the documents: raise it, give "
                             "dataset.validation_path, or 0 for no validation",
                             c.get<double>("dataset.validation_fraction")));
    }
  }
  MemoryEstimate estimate;
  const std::vector<std::string> summary = summarize(c, shape, starting_folder(start), world.dp_size(), &estimate);
  check_fits_host_memory(estimate, run, c);
  Transformer model(model_config, run.dtype, world.device(), std::nullopt, world.model_placement());
  if (start && start->weights) {
    load_weights(*start->weights, model, world.is_main() ? LoadProgress::shown : LoadProgress::hidden);
  } else if (!start) {
    model.init_weights(run.seed);  // the same seed on every rank: the replicas start identical
  }
  return run_training(c, {.world = &world,
                          .model = &model,
                          .train = train.get(),
                          .validation = valid.get(),
                          .seq_len = seq_len,
                          .data_description = data.description,
                          .summary = summary,
                          .companion_files = tokenizer_files,
                          .base_model = start ? start->record : std::nullopt});
}

}  // namespace hone
