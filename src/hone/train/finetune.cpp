// The full_finetune, lora_finetune, lora_dpo and full_dpo recipes: a model
// loaded from any format hone reads (Hugging Face folder, hone model or
// checkpoint folder, run directory, llm.c / llama2.c file), trained on an
// instruct or chat dataset (DPO: on preference pairs) by the shared training
// loop, and exported at the end if asked.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "hone/core/parallel.hpp"
#include "hone/core/text.hpp"
#include "hone/data/instruct.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/io/convert.hpp"
#include "hone/io/peft.hpp"
#include "hone/train/data_sources.hpp"
#include "hone/train/dpo.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/run_config.hpp"
#include "hone/train/trainer.hpp"

namespace hone {

namespace fs = std::filesystem;

namespace {

std::optional<LoraConfig> lora_config_from(const Config& c) {
  if (!c.has("model.lora_rank")) return std::nullopt;
  return LoraConfig{.rank = c.get<int64_t>("model.lora_rank"),
                    .alpha = c.get<double>("model.lora_alpha"),
                    .dropout = c.get<double>("model.lora_dropout"),
                    .attn_modules = c.get<std::vector<std::string>>("model.lora_attn_modules"),
                    .apply_to_mlp = c.get<bool>("model.apply_lora_to_mlp"),
                    .apply_to_output = c.get<bool>("model.apply_lora_to_output"),
                    .use_dora = c.get<bool>("model.use_dora")};
}

// dataset.max_seq_len, or when it is unset 512 tokens cut to what the model takes.
int64_t sample_length(const Config& c, const ModelConfig& model) {
  return sequence_length_for(c, "dataset.max_seq_len", 512, model);
}

// What would make the exports fail after training, checked before it: a
// destination taken or that cannot be made, a shape the format cannot hold,
// export.peft and export.hf in one folder (each is written whole), and an
// export in output_dir's place or among its checkpoints (the run makes that folder).
// The export folders against the run's own and each other: the config alone tells.
void check_export_folders(const Config& c) {
  const auto normal = [&](const std::string& path) {
    const fs::path p = fs::absolute(path).lexically_normal();
    return p.filename().empty() ? p.parent_path() : p;  // "out/hf/" is out/hf
  };
  const auto within = [](const fs::path& inner, const fs::path& outer) {
    return std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end()).first == outer.end();
  };
  const fs::path output_dir = normal(c.get<std::string>("output_dir"));
  for (const char* key : {"export.peft", "export.hf"}) {
    if (!c.has(key)) continue;
    const fs::path out = normal(c.get<std::string>(key));
    // output_dir itself and its step folders (an export beside them in it is fine).
    const bool taken = out == output_dir ||
                       (within(out, output_dir) && out.lexically_relative(output_dir).begin()->string().starts_with("step_"));
    HONE_CHECK(!taken, "{}: {} {} is the run's own folder (output_dir {}, or a checkpoint in it): give another",
               c.origin_of(key), key, c.get<std::string>(key), c.get<std::string>("output_dir"));
  }
  if (!c.has("export.peft") || !c.has("export.hf")) return;
  const fs::path peft = normal(c.get<std::string>("export.peft")), hf = normal(c.get<std::string>("export.hf"));
  HONE_CHECK(!within(peft, hf) && !within(hf, peft),
             "{}: export.peft {} and export.hf {} overlap: give each a folder of its own (each is written whole, and "
             "PEFT and transformers each read their own)",
             c.origin_of("export"), c.get<std::string>("export.peft"), c.get<std::string>("export.hf"));
}

void check_exports(const Config& c, const ModelConfig& model, const std::optional<LoraConfig>& lora) {
  if (c.has("export.peft")) check_peft_export(model, *lora, c.get<std::string>("export.peft"));
  if (c.has("export.hf")) check_hf_export(model, c.get<std::string>("export.hf"));
  check_export_folders(c);
}

// lora.adapter of lora_finetune: adapters to start from, which must have the
// run's LoRA shape; what to set where they do not.
void check_starting_adapters(const LoraAdapters& start, const LoraConfig& run) {
  const LoraConfig& a = start.lora;
  std::vector<std::string> fix;
  if (a.rank != run.rank || std::abs(a.scale() - run.scale()) > 1e-9 * run.scale()) {
    fix.push_back(fmt::format("model.lora_rank={} model.lora_alpha={}", a.rank, a.alpha));
  }
  auto modules = a.attn_modules, wanted = run.attn_modules;
  std::sort(modules.begin(), modules.end());
  std::sort(wanted.begin(), wanted.end());
  if (modules != wanted) fix.push_back(fmt::format("model.lora_attn_modules=[{}]", fmt::join(a.attn_modules, ",")));
  if (a.apply_to_mlp != run.apply_to_mlp) fix.push_back(fmt::format("model.apply_lora_to_mlp={}", a.apply_to_mlp));
  if (a.apply_to_output != run.apply_to_output) {
    fix.push_back(fmt::format("model.apply_lora_to_output={}", a.apply_to_output));
  }
  if (a.use_dora != run.use_dora) fix.push_back(fmt::format("model.use_dora={}", a.use_dora));
  HONE_CHECK(fix.empty(), "lora.adapter: {} are not of this run's LoRA shape; to start from them set {}",
             start.description, fmt::join(fix, " "));
}

// The model runs on batch_size sequences per micro-batch, DPO on batch_size pairs of them.
TrainingShape shape_of(const Config& c, const ModelConfig& model) {
  return {.model = model,
          .batch_size = c.get<int64_t>("batch_size") * (trains_preferences(c) ? 2 : 1),
          .seq_len = sample_length(c, model),
          .lora = lora_config_from(c)};
}

// full_dpo with a loss that compares with a reference: a frozen copy of the
// model (LoRA's reference is its base with the adapters off; SimPO needs none).
bool has_reference_copy(const Config& c) {
  return trains_preferences(c) && !c.has("model.lora_rank") && dpo_config_from(c).uses_reference();
}

// The model the run starts from: the one checkpoint.path names now (a run
// directory: its latest step folder, which the checkpoints record), or on a
// resume of a run whose base still matters (LoRA's adapters, full DPO's
// reference) the one its checkpoint records, where checkpoint.path no longer
// leads to it (a pretraining run that went on since). `notes` says so.
BaseModelRecord base_model_of(const Config& c, std::vector<std::string>& notes) {
  const std::string path = c.get<std::string>("checkpoint.path");
  const BaseModelRecord now = base_model_record(path);
  if (!c.has("resume") || !(c.has("model.lora_rank") || has_reference_copy(c))) return now;
  const std::optional<std::string> folder =
      find_checkpoint(c.get<std::string>("output_dir"), c.get<std::string>("resume"));
  const std::optional<BaseModelRecord> trained_on = folder ? checkpoint_base_model(*folder) : std::nullopt;
  if (!trained_on || same_base_model(now, *trained_on)) return now;
  const std::string role = c.has("model.lora_rank") ? "its adapters" : "DPO's reference";
  HONE_CHECK(fs::exists(trained_on->folder) && same_base_model(base_model_record(trained_on->folder), *trained_on),
             "{}: resume: {} was trained from {}, which is not found here ({} only mean something on it), and "
             "checkpoint.path {} is {}: give checkpoint.path where that model is now",
             c.origin_of("checkpoint.path"), *folder, describe(*trained_on), role, path, describe(now));
  notes.push_back(fmt::format("note: checkpoint.path {} is {} now; the run goes on from {}, which {} was trained "
                              "from ({} only mean something on it)",
                              path, describe(now), trained_on->folder, *folder, role));
  return *trained_on;
}

// The checkpoint a full fine-tune (no adapters, no DPO reference) resumes from,
// where it records its base: the whole model and its tokenizer are there.
std::optional<std::string> whole_model_resume(const Config& c) {
  if (!c.has("resume") || c.has("model.lora_rank") || has_reference_copy(c)) return std::nullopt;
  const std::optional<std::string> folder =
      find_checkpoint(c.get<std::string>("output_dir"), c.get<std::string>("resume"));
  return folder && checkpoint_base_model(*folder) ? folder : std::nullopt;
}

// The run's tokenizer (a resumed full fine-tune's checkpoint carries it) and
// its folder, checked against the model's vocabulary and the chat format.
std::pair<std::string, std::unique_ptr<Tokenizer>> load_finetuning_tokenizer(const Config& c,
                                                                             const std::optional<std::string>& resumed,
                                                                             int64_t vocab_size) {
  const bool in_checkpoint = resumed && !c.has("tokenizer.path") && !tokenizer_files_in(*resumed).empty();
  const std::string folder = in_checkpoint ? *resumed : tokenizer_path_for_model(c);
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(folder);
  check_fits_vocabulary(*tokenizer, vocab_size, c.origin());
  HONE_CHECK(data::end_of_answer_token(*tokenizer, instruct_options_from(c)), "{}: the tokenizer {} has no EOS token "
             "to end answers with (nanoGPT's characters have none)", c.origin(), folder);
  return {folder, std::move(tokenizer)};
}

// How the rows of a batch are cut (dataset.pad_to_multiple_of), for the banner.
std::string describe_cut(int64_t multiple, int64_t seq_len) {
  if (multiple == 0 || multiple >= seq_len) return "";
  return fmt::format(" (at most: each batch is cut to its longest sample, in multiples of {} tokens)", multiple);
}

// `from`: the model's folder (checkpoint.path before the run resolves it).
// `estimate`, where given, receives the memory estimate.
std::vector<std::string> summarize(const Config& c, const TrainingShape& shape, const std::string& from,
                                   int data_parallel_ranks = 1, MemoryEstimate* estimate = nullptr) {
  const RunSettings run = run_settings_from(c);
  const ModelConfig& model = shape.model;
  const std::optional<LoraConfig>& lora = shape.lora;
  MemoryEstimate m =
      estimate_training_memory(model, run.dtype, shape.batch_size, shape.seq_len, activation_options_from(c), lora,
                               int(c.get<int64_t>("distributed.zero")), data_parallel_ranks, run.device);
  if (has_reference_copy(c)) {
    m.reference = reference_model_bytes(model, run.dtype, shape.batch_size, shape.seq_len, run.device);
  }
  const int64_t trained = lora ? lora_parameter_count(model, *lora) : model.num_params();
  return {
      fmt::format("model: {} ({} family) from {}, {:.1f}M parameters, {:.2f}M trained{}", model.name,
                  family_name(model.family), from, double(model.num_params()) / 1e6,
                  double(trained) / 1e6,
                  lora ? fmt::format(" ({} rank {})", lora->use_dora ? "DoRA" : "LoRA", lora->rank) : std::string()),
      "batch: " + describe_batch(shape.batch_size, shape.seq_len, c.get<int64_t>("gradient_accumulation_steps")) +
          (trains_preferences(c) ? fmt::format(" ({} preference pairs)", shape.batch_size / 2) : "") +
          describe_cut(sample_length_multiple(c, run.device), shape.seq_len),
      describe(m, run),
  };
}

// DPO's loss, for the banner; its keys checked (hone validate too).
std::vector<std::string> describe_loss(const Config& c) {
  if (!trains_preferences(c)) return {};
  const std::string reference =
      c.has("model.lora_rank")
          ? "the base (adapters off)"
          : fmt::format("a frozen copy of the model ({} weights, held whole by every rank)",
                        dtype_name(run_settings_from(c).dtype));
  return {describe(dpo_config_from(c), reference)};
}

}  // namespace

int run_finetune(const Config& c) {
  check_output_dir(c);
  check_one_validation_source(c, kFinetuningValidationFraction);
  const RunSettings run = run_settings_from(c);
  if (run.threads > 0) set_num_threads(run.threads);
  std::vector<std::string> base_notes;
  // A full fine-tune resumes from its checkpoint, which holds the whole model
  // (the one it started from may have moved or gone since) and its tokenizer.
  const std::optional<std::string> resumed = whole_model_resume(c);
  const BaseModelRecord base = resumed ? *checkpoint_base_model(*resumed) : base_model_of(c, base_notes);
  const std::unique_ptr<WeightSource> weights =
      resumed ? open_weights(*resumed) : open_weights(base.folder, c.get<std::string>("checkpoint.format"));
  const TrainingShape shape = shape_of(c, weights->config());
  const ModelConfig& model_config = shape.model;
  const std::optional<LoraConfig>& lora = shape.lora;
  const int64_t seq_len = shape.seq_len;

  // export.hf's default: the base model's dtype (a checkpoint stores fp32 master weights), or where that
  // is gone, the run's.
  const DType export_dtype = !resumed                       ? weights->stored_dtype()
                             : fs::exists(base.folder) ? open_weights(base.folder)->stored_dtype()
                                                       : run.dtype;
  const auto [tokenizer_dir, tokenizer] = load_finetuning_tokenizer(c, resumed, model_config.vocab_size);
  data::InstructOptions options = instruct_options_from(c);
  options.max_seq_len = seq_len;
  const std::string path = c.get<std::string>("dataset.path");
  // DPO: samples come in pairs (a chosen and a rejected sequence), which
  // batches and held-out validation keep together.
  const bool preferences = trains_preferences(c);
  const int64_t group = preferences ? 2 : 1;
  const char* sample_name = preferences ? "pair" : "sample";
  const auto load = [&](const std::string& file) {
    return preferences ? data::load_preference_dataset(file, *tokenizer, options)
                       : data::load_instruct_dataset(file, *tokenizer, options);
  };
  data::InstructDataset dataset = load(path);
  std::vector<data::TokenizedSample> validation;
  int64_t validation_truncated = 0, validation_dropped = 0;  // of dataset.validation_path's
  std::string data_description;
  if (c.has("dataset.validation_path")) {
    // Validation records of their own (an eval split); training on every record of dataset.path.
    const std::string validation_path = c.get<std::string>("dataset.validation_path");
    data::InstructDataset held = load(validation_path);
    validation = std::move(held.samples);  // never empty
    validation_truncated = held.truncated;
    validation_dropped = held.dropped;
    const int64_t count = int64_t(validation.size()) / group;
    data_description = fmt::format("{}; validation: {} ({} {})", path, validation_path, count, plural(count, sample_name));
  } else {
    // The last validation_fraction of the records is held out.
    const double fraction = c.get<double>("dataset.validation_fraction");
    const int64_t samples = int64_t(dataset.samples.size()) / group;
    const int64_t held_out = int64_t(double(samples) * fraction + 0.5);
    HONE_CHECK(held_out < samples, "{}: nothing left to train on after holding out {} {}", c.origin(), held_out,
               plural(held_out, sample_name));
    validation.assign(dataset.samples.end() - ptrdiff_t(held_out * group), dataset.samples.end());
    dataset.samples.resize(size_t((samples - held_out) * group));
    data_description = fmt::format("{} ({} {} held out)", path, held_out, plural(held_out, sample_name));
  }
  const int32_t pad = tokenizer->pad_id().value_or(tokenizer->eos_id().value_or(0));
  const int64_t batch = c.get<int64_t>("batch_size");  // samples (DPO: pairs) per micro-batch
  const bool packed = c.get<bool>("dataset.packed");
  TrainingWorld world(c, run.device);
  const data::SampleStreamOptions batching{.batch_size = batch,
                                           .seq_len = seq_len,
                                           .length_multiple = sample_length_multiple(c, world.device()),
                                           .seed = run.seed,
                                           .shuffle = c.get<bool>("dataset.shuffle"),
                                           .group_by_length = c.get<bool>("dataset.group_by_length"),
                                           .packed = packed,
                                           .pad_id = pad,
                                           .rank = world.dp_rank(),
                                           .world_size = world.dp_size(),
                                           .group_size = group};
  const int64_t training_samples = int64_t(dataset.samples.size());
  data::SampleStream train(std::move(dataset.samples), batching);
  if (packed) {
    data_description += fmt::format("; {} {} packed into {} rows", training_samples,
                                    plural(training_samples, "sample"), train.samples_per_epoch());
  }
  std::unique_ptr<data::SampleStream> valid;
  if (!validation.empty()) {
    data::SampleStreamOptions in_order = batching;  // eval.max_batches: the same first batches every time
    in_order.shuffle = in_order.group_by_length = false;
    valid = std::make_unique<data::SampleStream>(std::move(validation), in_order);
  }

  std::optional<LoraAdapters> start;
  if (c.has("lora.adapter")) {
    start = open_lora_adapters(c.get<std::string>("lora.adapter"), base.folder, model_config, *weights);
    for (const std::string& note : start->notes) base_notes.push_back("note: " + note);
    check_starting_adapters(*start, *lora);
  }
  check_exports(c, model_config, lora);
  MemoryEstimate estimate;
  std::vector<std::string> summary = summarize(c, shape, base.folder, world.dp_size(), &estimate);
  check_fits_host_memory(estimate, run, c);
  Transformer model(model_config, run.dtype, world.device(), lora, world.model_placement());
  const LoadProgress progress = world.is_main() ? LoadProgress::shown : LoadProgress::hidden;
  if (!resumed) load_weights(*weights, model, progress);  // a resume's come with its checkpoint
  // Full-weight DPO's reference: the model as it starts, frozen.
  std::unique_ptr<Transformer> reference;
  if (has_reference_copy(c)) {
    reference = make_reference_model(model_config, run.dtype, world.device());
    load_weights(*weights, *reference, progress);
  }
  model.init_lora(run.seed);
  if (start) load_adapters(start->read, model);  // their weights; the optimizer and schedule start anew
  summary.insert(summary.end(), base_notes.begin(), base_notes.end());
  for (std::string& line : describe_loss(c)) summary.push_back(std::move(line));
  const auto cut = [&](const char* what, int64_t truncated, int64_t dropped) {
    if (truncated == 0 && dropped == 0) return;
    summary.push_back(fmt::format("{}: {} {} cut to {} tokens, {} {} dropped with nothing left to learn", what,
                                  truncated, plural(truncated, "sample"), seq_len, dropped,
                                  plural(dropped, sample_name)));
  };
  cut("data", dataset.truncated, dataset.dropped);
  cut("validation data (dataset.validation_path)", validation_truncated, validation_dropped);
  std::unique_ptr<Objective> objective;
  if (preferences) {
    HONE_CHECK(world.tp_size() == 1, "{}: DPO with tensor parallelism is not supported (set distributed.tp to 1)",
               c.origin_of("distributed.tp"));
    objective = dpo_objective(dpo_config_from(c), reference.get());
  }
  return run_training(c, {.world = &world,
                          .model = &model,
                          .objective = objective.get(),
                          .train = &train,
                          .validation = valid.get(),
                          .seq_len = seq_len,
                          .data_description = data_description,
                          .summary = summary,
                          .companion_files = tokenizer_companion_files(tokenizer_dir),
                          .chat_template = data::chat_template(*tokenizer, options),
                          .base_model = base,
                          .on_finish = [&](RunConsole& console, const std::optional<std::string>& checkpoint,
                                           const std::vector<std::string>& companion_files) {
                            // The trained weights in memory, or, where they are not whole on
                            // this rank, in the final checkpoint (read a tensor at a time).
                            if (c.has("export.peft")) {
                              const std::string dir = c.get<std::string>("export.peft");
                              const std::string base = c.get<std::string>("checkpoint.path");
                              if (checkpoint) export_peft(*checkpoint, model_config, *lora, dir, base);
                              else export_peft(model, dir, base);
                              console.line(fmt::format("PEFT adapter: {}", dir));
                              // PEFT loads the base named by base_model_name_or_path with transformers.
                              if (model_format(base) != "hf") {
                                console.line(fmt::format(
                                    "note: the adapter's base_model_name_or_path, {}, is no Hugging Face model: give "
                                    "PEFT the base as one (hone convert {} DIR --to hf)",
                                    base, base));
                              }
                            }
                            if (c.has("export.hf")) {
                              std::unique_ptr<WeightSource> trained;
                              if (checkpoint) {
                                trained = open_trained_model(*checkpoint, *weights, lora);
                              } else {
                                model.merge_lora();
                                trained = transformer_weights(model);
                              }
                              HfExportOptions hf;
                              // The base model's dtype unless asked (the master weights a run keeps in fp32
                              // would double a bf16 model's files).
                              hf.dtype = c.has("export.dtype") ? parse_dtype(c.get<std::string>("export.dtype"))
                                                               : export_dtype;
                              // Training checked the tokenizer has an end of answer.
                              hf.special_tokens = {tokenizer->bos_id(), tokenizer->eos_id(), tokenizer->pad_id(),
                                                   {*data::end_of_answer_token(*tokenizer, options)}};
                              const HfExportSummary exported =
                                  export_hf(*with_companion_files(std::move(trained), companion_files),
                                            c.get<std::string>("export.hf"), hf);
                              for (const std::string& note : exported.notes) console.line("note: " + note);
                              console.line(fmt::format("Hugging Face model{}: {}", lora ? " (adapters merged)" : "",
                                                       c.get<std::string>("export.hf")));
                            }
                          }});
}

bool trains_preferences(const Config& c) { return c.has("loss.type"); }

DpoConfig dpo_config_from(const Config& c) {
  DpoConfig loss{.loss = parse_preference_loss(c.get<std::string>("loss.type"))};
  const bool simpo = loss.loss == PreferenceLoss::simpo;
  // A setting the chosen loss would ignore is an error, not a silent no-op
  // (label smoothing 0, which changes nothing, may stay in a config).
  const auto only_for = [&](const char* key, bool set, bool applies, const char* types) {
    HONE_CHECK(!set || applies, "{}: {} is for loss.type {}; this run's loss.type is {}", c.origin_of(key), key, types,
               preference_loss_name(loss.loss));
  };
  only_for("loss.label_smoothing", c.has("loss.label_smoothing") && c.get<double>("loss.label_smoothing") != 0,
           loss.loss == PreferenceLoss::dpo || simpo, "dpo and simpo");
  only_for("loss.gamma", c.has("loss.gamma"), simpo, "simpo");
  loss.beta = c.has("loss.beta") ? c.get<double>("loss.beta") : simpo ? 2.0 : 0.1;
  if (c.has("loss.label_smoothing")) loss.label_smoothing = c.get<double>("loss.label_smoothing");
  if (c.has("loss.gamma")) loss.gamma = c.get<double>("loss.gamma");
  return loss;
}

Schema finetune_schema(FinetuneKind kind) {
  const bool lora = kind == FinetuneKind::lora || kind == FinetuneKind::lora_dpo;
  const bool dpo = kind == FinetuneKind::lora_dpo || kind == FinetuneKind::full_dpo;
  Schema s;
  s.add(run_schema()).add(training_schema());
  s.add(model_source_schema("the model to start from"));
  s.add({"tokenizer.path", ValueType::string, nullptr, "tokenizer file or folder (default: the model's folder)"});
  s.add({"dataset.path", ValueType::string, nullptr,
         dpo ? "preference records (chosen and rejected message lists, or a prompt with chosen and rejected answers) "
               "in a .jsonl, .json or .parquet file, a folder or glob pattern of such shards, or an MDS folder"
             : "a .jsonl, .json or .parquet file of records, a folder or glob pattern of such shards, or an MDS folder "
               "(LLM Foundry's prompt/response shards, or its pre-tokenized turns)",
         {}, true});
  s.add(instruct_dataset_schema(dpo ? "chat" : "alpaca"));
  if (dpo) {
    s.add({"loss.type", ValueType::string, "dpo",
           "the preference loss: dpo (the sigmoid loss, torchtune's DPOLoss), ipo (IPOLoss), rso (the hinge loss, "
           "RSOLoss) or simpo (SimPOLoss: per-token mean log-probabilities, no reference model)",
           {"dpo", "ipo", "rso", "simpo"}});
    s.add({"loss.beta", ValueType::number, nullptr,
           "how far the trained model may move from the reference (IPO's tau, RSO's gamma; SimPO: the reward "
           "scale); unset: 0.1, for simpo 2.0"},
          Range::positive());
    s.add({"loss.label_smoothing", ValueType::number, nullptr,
           "dpo and simpo: the share of pairs assumed mislabelled (conservative DPO; unset: 0)"},
          Range{.low = 0, .high = 0.5, .high_open = true});
    s.add({"loss.gamma", ValueType::number, nullptr, "simpo: the target reward margin (unset: 0.5)"},
          Range::not_negative());
  }
  s.add({"dataset.max_seq_len", ValueType::integer, nullptr,
         "tokens per sample, longer ones are cut (unset: 512, or the model's max_seq_len if smaller)"},
        Range{.low = 2});
  s.add({"dataset.validation_path", ValueType::string, nullptr,
         "validation records of their own (a file or MDS folder read as dataset.path is), instead of records held "
         "out of dataset.path"});
  s.add({"dataset.validation_fraction", ValueType::number, kFinetuningValidationFraction,
         "records held out for validation (without dataset.validation_path)"},
        Range::fraction());
  s.add({"dataset.shuffle", ValueType::boolean, true, "shuffle samples every epoch"});
  s.add({"dataset.pad_to_multiple_of", ValueType::integer, nullptr,
         "each batch's rows are cut to its longest sample, rounded up to a multiple of this (unset: 64 on the CPU, "
         "128 on a GPU, whose fused attention takes multiples of 128; 0: every row dataset.max_seq_len tokens long)"},
        Range::not_negative());
  s.add({"dataset.group_by_length", ValueType::boolean, false,
         "batches of samples of similar length (every 50 batches' samples taken longest first): less padding, as "
         "transformers' group_by_length"});
  s.add({"dataset.packed", ValueType::boolean, false,
         dpo ? "false only: DPO's pairs are not packed (a config's packed: false is taken)"
             : "pack several samples into each max_seq_len row (each attends only to itself)"});
  s.add(mds_tokens_schema());
  s.add_foreign("tokenizer.max_seq_len", "torchtune's; hone cuts samples at dataset.max_seq_len");
  s.add({"export.hf", ValueType::string, nullptr, "write the trained model as a Hugging Face folder here"});
  s.add({"export.dtype", ValueType::string, nullptr,
         "dtype of export.hf's weights (default: the base model's, as checkpoint.path stores them; where a resumed "
         "run's base is gone, the run's dtype)",
         {"fp32", "bf16", "fp16"}});
  if (lora) {
    s.add({"model.lora_rank", ValueType::integer, 8, "LoRA rank"}, Range::positive());
    s.add({"model.lora_alpha", ValueType::number, 16.0, "LoRA alpha (scale = alpha / rank)"}, Range::positive());
    s.add({"model.lora_dropout", ValueType::number, 0.05, "dropout on the adapters' input"}, Range::fraction());
    s.add({"model.lora_attn_modules", ValueType::string_list, Json::array({"q_proj", "v_proj"}),
           "attention projections with adapters: q_proj, k_proj, v_proj, output_proj"});
    s.add({"model.apply_lora_to_mlp", ValueType::boolean, false, "adapters on the MLP projections"});
    s.add({"model.apply_lora_to_output", ValueType::boolean, false, "an adapter on the output projection"});
    s.add({"model.use_dora", ValueType::boolean, false,
           "DoRA: each adapted row also learns its magnitude (weight-decomposed LoRA, torchtune's use_dora)"});
    s.add({"export.peft", ValueType::string, nullptr, "write the adapters in PEFT form here"});
    if (dpo) {
      s.add_foreign("lora.adapter",
                    "DPO's reference model is checkpoint.path without adapters, so fine-tuned adapters go into the "
                    "model first: hone convert MODEL MERGED --to hf --adapter ADAPTERS, then checkpoint.path=MERGED");
    } else {
      s.add({"lora.adapter", ValueType::string, nullptr,
             "adapters to start from (a lora_finetune checkpoint folder or run directory, or a PEFT folder) instead "
             "of new ones: their weights, with the optimizer and schedule anew (resume=latest continues a run)"});
    }
  }
  return s;
}

std::vector<std::string> summarize_finetune(const Config& c) {
  instruct_options_from(c);  // the dataset keys' errors, which need no data
  check_one_validation_source(c, kFinetuningValidationFraction);
  check_export_folders(c);
  if (const std::optional<LoraConfig> lora = lora_config_from(c)) {
    try {
      check_lora_config(*lora);
    } catch (const Error& e) {
      fail("{}: model.{}", c.origin_of_section("model"), e.what());
    }
  }
  // A full fine-tune's resume reads its model from the checkpoint (its base may be gone).
  const std::optional<std::string> resumed = whole_model_resume(c);
  const std::string path = resumed.value_or(c.get<std::string>("checkpoint.path"));
  std::vector<std::string> lines;
  if (fs::exists(path)) {
    const TrainingShape shape = finetune_shape(c);
    lines = summarize(c, shape, path);
    if (c.has("tokenizer.path") && !fs::exists(c.get<std::string>("tokenizer.path"))) {
      lines.push_back(fmt::format("tokenizer: {} does not exist here yet: checked against the model and the chat "
                                  "format once it does",
                                  c.get<std::string>("tokenizer.path")));
    } else {
      load_finetuning_tokenizer(c, resumed, shape.model.vocab_size);
    }
  } else {
    lines.push_back(
        fmt::format("model: {} does not exist here yet: parameter count and memory estimate once it does", path));
  }
  for (std::string& line : describe_loss(c)) lines.push_back(std::move(line));
  for (std::string& line : data_paths_not_here(c)) lines.push_back(std::move(line));
  // What the disk holds now: an export folder that is there already.
  for (const char* key : {"export.peft", "export.hf"}) {
    if (!c.has(key)) continue;
    try {
      check_new_folder(c.get<std::string>(key));
    } catch (const Error& e) {
      lines.push_back(fmt::format("note: hone run would refuse this now: {} {}", key, e.what()));
    }
  }
  return lines;
}

TrainingShape finetune_shape(const Config& c) {
  // A full fine-tune resumes from its checkpoint's whole model: its base may be gone.
  if (const std::optional<std::string> resumed = whole_model_resume(c)) {
    return shape_of(c, open_weights(*resumed)->config());
  }
  const std::string path = c.get<std::string>("checkpoint.path");
  HONE_CHECK(fs::exists(path), "{}: checkpoint.path {} does not exist here (a fine-tuning config's model is the one "
             "there)", c.origin_of("checkpoint.path"), path);
  return shape_of(c, open_weights(path, c.get<std::string>("checkpoint.format"))->config());
}

}  // namespace hone
