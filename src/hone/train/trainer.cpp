// The training loop every training recipe shares: logging, validation,
// checkpoints, exact resume, non-finite-step handling and graceful stop on
// SIGINT/SIGTERM.
#include "hone/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

#include "hone/core/files.hpp"
#include "hone/core/parallel.hpp"
#include "hone/core/stop_signals.hpp"
#include "hone/core/text.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/io/model_json.hpp"
#include "hone/io/weights.hpp"
#include "hone/kernels/cpu/gemm.hpp"
#include "hone/ops/ops.hpp"
#include "hone/train/bench.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/run_config.hpp"
#include "hone/train/step.hpp"

namespace hone {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// The samples an `epochs` budget asks for (a fraction of an epoch rounded up).
int64_t epochs_budget_samples(const Config& c, int64_t samples_per_epoch) {
  return int64_t(std::ceil(c.get<double>("epochs") * double(samples_per_epoch)));
}

// What the training data is to a budget: its samples per epoch and the tokens
// a sample holds on average (seq_len in pretraining; in fine-tuning the
// samples' own, padding left out, as Composer counts a token budget).
struct DataSize {
  int64_t samples_per_epoch;
  double tokens_per_sample;
  bool whole_rows;  // every sample seq_len tokens

  DataSize(const data::BatchSource& source, int64_t seq_len)
      : samples_per_epoch(source.samples_per_epoch()),
        tokens_per_sample(source.tokens_per_epoch() ? double(*source.tokens_per_epoch()) / double(samples_per_epoch)
                                                    : double(seq_len)),
        whole_rows(!source.tokens_per_epoch()) {}
};

// Optimizer steps of the run, from whichever budget the config gives: those
// done (`state`, a resumed run's) and what is left of the budget at this run's
// batch, so a resumed run whose batch changed still trains the epochs or tokens
// asked for. A token budget takes the steps whose samples hold that many
// tokens on average, the samples trained so far counted at that average too:
// counted as they were (fine-tuning's vary), a resume with nothing changed
// would plan another number of steps than the run it resumes, its learning
// rates and the rest of the run then differing.
int64_t total_steps_of(const Config& c, const DataSize& data, int64_t global_batch, const TrainerState& state) {
  check_training_settings(c);
  const auto steps_for = [&](double budget, double used, double per_step) {
    return state.step + int64_t(std::ceil(std::max(budget - used, 0.0) / per_step));
  };
  int64_t steps = 0;
  if (c.has("max_steps")) steps = c.get<int64_t>("max_steps");
  if (c.has("epochs")) {
    steps = steps_for(double(epochs_budget_samples(c, data.samples_per_epoch)), double(state.samples_seen),
                      double(global_batch));
  }
  if (c.has("max_tokens")) {
    steps = steps_for(double(c.get<int64_t>("max_tokens")), double(state.samples_seen) * data.tokens_per_sample,
                      double(global_batch) * data.tokens_per_sample);
  }
  HONE_CHECK(steps > 0, "{}: the run would take {} steps; it needs at least one", c.origin(), steps);
  return steps;
}

// Two spellings of one path (absolute and relative, "./x" and "x"); a Megatron
// prefix names no file itself.
bool same_path(const std::string& a, const std::string& b) {
  std::error_code error_a, error_b;
  const fs::path canonical_a = fs::weakly_canonical(a, error_a), canonical_b = fs::weakly_canonical(b, error_b);
  return !error_a && !error_b && canonical_a == canonical_b;
}

// A note when the budget is not whole steps: epochs whose samples the global
// batch does not divide (the run takes the next whole step, into the next
// pass, where torchtune's drop_last stops a step short), or max_tokens below one
// step (the run still takes one).
std::optional<std::string> budget_in_whole_steps(const Config& c, const DataSize& data, int64_t global_batch,
                                                 int64_t seq_len) {
  if (c.has("epochs")) {
    const int64_t samples_per_epoch = data.samples_per_epoch;
    const int64_t samples = epochs_budget_samples(c, samples_per_epoch);
    if (samples % global_batch == 0) return std::nullopt;
    const int64_t steps = (samples + global_batch - 1) / global_batch;
    return fmt::format("note: epochs {:g} is {} of {} samples, {} the global batch of {}: the run takes {} {} ({} "
                       "samples, {} of them the next pass's){}",
                       c.get<double>("epochs"), samples, samples_per_epoch,
                       samples < global_batch ? "less than" : "not a multiple of", global_batch, steps,
                       plural(steps, "step"), steps * global_batch, steps * global_batch - samples,
                       steps > 1 ? fmt::format("; max_steps={} stops before them, as torchtune's drop_last", steps - 1)
                                 : std::string());
  }
  const double step_tokens = double(global_batch) * data.tokens_per_sample;
  if (c.has("max_tokens") && double(c.get<int64_t>("max_tokens")) < step_tokens) {
    return fmt::format("note: max_tokens {} is less than one step's {} tokens ({}): the run takes one step",
                       c.get<int64_t>("max_tokens"), int64_t(std::round(step_tokens)),
                       data.whole_rows ? fmt::format("global batch {} x seq_len {}", global_batch, seq_len)
                                       : fmt::format("global batch {} x {:.1f} tokens a sample holds on average",
                                                     global_batch, data.tokens_per_sample));
  }
  return std::nullopt;
}

// Composer's memory/* metrics are in gigabytes.
constexpr double kGigabyte = 1e9;

// Settings a resumed run keeps: they shape the model (LoRA's adapters
// included), its data and their order, or its loss (the recipe: DPO's pairs
// are no SFT samples). The budget, the optimizer, the batch, logging and
// checkpointing may change.
constexpr const char* kKeptOnResume[] = {"recipe", "model", "seed", "dataset", "tokenizer", "checkpoint.path",
                                         "checkpoint.format"};

// A config tree whose model section is written out as the model it makes: a
// built-in model's value left unset and the same value given compare equal, and
// a model's name is no setting (it only labels the shape).
Json with_model_written_out(const Json& tree) {
  Config model;
  if (tree.contains("model")) model.set("model", tree["model"]);
  if (!model.has("model.name") && !model.has("model.family")) return tree;  // a fine-tuned checkpoint's model
  Json out = tree;
  const Json written = model_config_to_json(model_config_from(model));
  for (const auto& [key, value] : written.items()) out["model"][key] = value;
  out["model"].erase("name");
  return out;
}

// An error naming the kept settings (kKeptOnResume) `c` changes from those
// `folder` was trained with; a path may change (the files moved), with a note
// (returned) that it must hold what it held, or be given where it was not, but
// not be dropped (a tokenizer.path left out would leave later checkpoints without
// the tokenizer).
std::vector<std::string> check_kept_on_resume(const Config& c, const Json& trained_with, const std::string& folder) {
  std::map<std::string, const Json*> before;
  const Json trained = with_model_written_out(trained_with), now_written = with_model_written_out(c.tree());
  for (const auto& [key, value] : config_leaves(trained)) before[key] = value;
  std::vector<std::string> changed, notes;
  for (const auto& [key, now] : config_leaves(now_written)) {
    const Json& value = *now;
    const bool kept = std::ranges::any_of(kKeptOnResume, [&](std::string_view k) {
      return key == k || (key.starts_with(k) && key[k.size()] == '.');
    });
    const auto it = before.find(key);  // a key the checkpoint lacks came with a later hone: its default
    if (!kept || it == before.end() || *it->second == value) continue;
    // A path given now where there was none: a tokenizer the run's checkpoints
    // lacked, or one in place of that they carry (their base model's).
    if (key.ends_with("path") && it->second->is_null()) {
      if (key == "tokenizer.path" && !tokenizer_files_in(folder).empty()) {
        notes.push_back(fmt::format("note: tokenizer.path is {} now, where {} was trained with the tokenizer it "
                                    "carries: it must be the same",
                                    value.dump(), folder));
      }
      continue;
    }
    if (key.ends_with("path") && !value.is_null()) {
      // The same folder spelled another way (absolute, relative): no change.
      if (value.is_string() && it->second->is_string() &&
          same_path(value.get<std::string>(), it->second->get<std::string>())) {
        continue;
      }
      notes.push_back(fmt::format("note: {} was {} when {} was saved: it must hold the same", key, it->second->dump(),
                                  folder));
    } else {
      const auto shown = [](const Json& v) { return v.is_null() ? std::string("unset") : v.dump(); };
      changed.push_back(fmt::format("{} {} -> {}", key, shown(*it->second), shown(value)));
    }
  }
  HONE_CHECK(changed.empty(),
             "{}: resume: {} was trained with other settings ({}), which a resumed run keeps, since they shape the "
             "model, its data or its loss: resume with them as they were, or start a new run in another output_dir",
             c.origin(), folder, fmt::join(changed, ", "));
  // Another precision may go on from a checkpoint (its master weights are the same), but its steps differ.
  if (const auto dtype = before.find("dtype"); dtype != before.end() && dtype->second->is_string() &&
                                               dtype->second->get<std::string>() != c.get<std::string>("dtype")) {
    notes.push_back(fmt::format("note: {} was trained in {}; this run goes on in {}, so its steps from here differ "
                                "from those of a run that kept {}",
                                folder, dtype->second->get<std::string>(), c.get<std::string>("dtype"),
                                dtype->second->get<std::string>()));
  }
  return notes;
}

// The tokenizer files every checkpoint carries, copied into
// output_dir/tokenizer/ at the start (written by the main rank): their source
// may change or go while the run trains (a step folder, this run's or another's,
// rotated away by keep_last_n). Those of output_dir itself (chat_template.jinja)
// and of that folder stay where they are.
std::vector<std::string> keep_copies_in_the_run(const std::vector<std::string>& files, const std::string& output_dir,
                                                bool write) {
  const fs::path kept = fs::path(output_dir) / "tokenizer";
  const fs::path run = fs::weakly_canonical(output_dir);
  std::vector<std::string> copies;
  for (const std::string& file : files) {
    const fs::path folder = fs::weakly_canonical(file).parent_path();
    if (folder == run || folder == run / "tokenizer") {
      copies.push_back(file);
      continue;
    }
    const std::string copy = (kept / companion_name(file)).string();
    if (write) {
      if (!fs::is_directory(kept)) create_folders("output_dir", kept.string());
      copy_file(file, copy);
    }
    copies.push_back(copy);
  }
  return copies;
}

}  // namespace

void check_training_settings(const Config& c) {
  std::vector<std::string> given, from_file, from_command_line, unset_on_command_line;
  for (const char* key : {"max_steps", "epochs", "max_tokens"}) {
    if (!c.has(key) && !c.set_by_file(key)) unset_on_command_line.push_back(fmt::format("{}=null", key));
    if (!c.has(key)) continue;
    given.push_back(key);
    if (c.set_by_file(key)) {
      from_file.push_back(fmt::format("{}=null", key));
    } else {
      from_command_line.push_back(key);
    }
  }
  // A config's epochs: 1 with max_steps=N on the command line: the way out is to null the config's.
  const bool overridden = given.size() > 1 && from_file.size() < given.size() && !from_file.empty();
  HONE_CHECK(given.size() == 1, "{}: give exactly one of max_steps, epochs and max_tokens (got {}){}",
             overridden ? fmt::format("{} with {} from the command line", c.origin(), fmt::join(from_command_line, ", "))
             : given.empty() && !unset_on_command_line.empty()
                 ? fmt::format("{} with {} from the command line", c.origin(), fmt::join(unset_on_command_line, " "))
                 : c.origin(),
             given.empty() ? "none" : fmt::format("{}", fmt::join(given, ", ")),
             overridden ? fmt::format(": add {} to drop the config's", fmt::join(from_file, " ")) : "");
  adamw_config_from(c);
}

std::optional<std::string> output_dir_conflict(const Config& c) {
  const std::string output_dir = c.get<std::string>("output_dir");
  if (fs::exists(output_dir) && !fs::is_directory(output_dir)) {
    return fmt::format("output_dir {} is a file, not a folder for the run", output_dir);
  }
  // What a run writes there, each of the kind it writes (a folder where metrics.jsonl goes would hang its reading).
  for (const auto& [name, folder] : {std::pair{"metrics.jsonl", false}, {"train.log", false},
                                     {"perf_summary.csv", false}, {"tensorboard", true}}) {
    const fs::path path = fs::path(output_dir) / name;
    if (fs::exists(path) && fs::is_directory(path) != folder) {
      return fmt::format("{} is a {}, where the run keeps its {} {}: move it away", path.string(),
                         folder ? "file" : "folder", name, folder ? "folder" : "file");
    }
  }
  if (c.has("resume")) return std::nullopt;
  const std::optional<std::string> earlier = find_checkpoint(output_dir, "latest");
  if (!earlier && fs::exists(fs::path(output_dir) / "metrics.jsonl")) {
    return fmt::format("output_dir {} already holds a run's metrics.jsonl (and no checkpoint to go on from): give "
                       "resume=latest to start over there (its records are replaced), or another output_dir",
                       output_dir);
  }
  if (!earlier) return std::nullopt;
  return fmt::format(
      "output_dir {} already holds a run (latest checkpoint {}): give resume=latest to go on from it, or another "
      "output_dir",
      output_dir, *earlier);
}

std::optional<std::string> resume_conflict(const Config& c) {
  if (!c.has("resume")) return std::nullopt;
  try {
    const std::optional<std::string> folder =
        find_checkpoint(c.get<std::string>("output_dir"), c.get<std::string>("resume"));
    if (folder) check_kept_on_resume(c, checkpoint_config(*folder), *folder);
  } catch (const Error& e) {
    return e.what();
  }
  return std::nullopt;
}

namespace {

void check_no_other_run(const Config& c) {
  if (const std::optional<std::string> conflict = output_dir_conflict(c)) {
    fail("{}: {}", c.origin_of("output_dir"), *conflict);
  }
}

}  // namespace

void check_output_dir(const Config& c) {
  check_no_other_run(c);
  // Before the model is made or the data read: a resume that changes them is refused as such.
  if (const std::optional<std::string> conflict = resume_conflict(c)) fail("{}", *conflict);
}

PausesLeft pauses_left(int64_t step, int64_t total_steps, int64_t eval_every, int64_t checkpoint_every,
                       bool save_final) {
  if (step >= total_steps) return {};
  // Validation every eval_every steps before the last, and once after it.
  const int64_t evaluations = 1 + (eval_every > 0 ? (total_steps - 1) / eval_every - step / eval_every : 0);
  const bool regular_final = checkpoint_every > 0 && total_steps % checkpoint_every == 0;
  const int64_t saves = (checkpoint_every > 0 ? total_steps / checkpoint_every - step / checkpoint_every : 0) +
                        (save_final && !regular_final ? 1 : 0);
  return {.evaluations = evaluations, .saves = saves};
}

int run_training(const Config& c, TrainingJob job) {
  const RunSettings run = run_settings_from(c);
  TrainingWorld& world = *job.world;
  const int64_t batch_size = c.get<int64_t>("batch_size");
  const int64_t accumulation = c.get<int64_t>("gradient_accumulation_steps");
  const int64_t seq_len = job.seq_len;
  const std::unique_ptr<Objective> default_objective = job.objective ? nullptr : language_model_objective();
  Objective& objective = job.objective ? *job.objective : *default_objective;
  const int64_t rows_per_sample = objective.rows_per_sample();
  const char* sample_name = job.train->sample_name() ? job.train->sample_name() : objective.sample_name();
  // Samples per optimizer step, over all data-parallel ranks.
  const int64_t global_batch = batch_size * accumulation * world.dp_size();
  total_steps_of(c, DataSize(*job.train, seq_len), global_batch, {});  // its errors before any folder is made
  // From here a stop signal is heard: during the setup (a large model loads for
  // minutes) as before the next step. The run finishes its step, saves a
  // checkpoint and exits 0; one stopped before its first step exits 128 + the
  // signal, its new folder removed.
  catch_stop_signals();

  // A run that ends in an error before its first step (a mistake in the config
  // or the data) leaves no folder behind: the error is on stderr. The main rank
  // makes the folder, and removes it so, before the other ranks make it too
  // (each node may see a file system of its own); were one of them first, the
  // main rank would not know the folder as its own.
  NewFolders new_folders;
  if (world.is_main()) new_folders.create("output_dir", run.output_dir);
  world.barrier();
  if (!world.is_main()) create_folders("output_dir", run.output_dir);
  std::optional<FolderLock> output_dir_lock;  // the main rank's, for the whole run
  if (world.is_main()) {
    try {
      output_dir_lock.emplace("output_dir", run.output_dir);
      // The folder was looked at before the model and data loaded (minutes for a
      // large one): another run may have trained there since, and ended. Again,
      // now that no other run can start there (a resume's checkpoint is checked
      // as it loads, below).
      check_no_other_run(c);
    } catch (const Error&) {
      new_folders.keep();  // the folder is the other run's now
      throw;
    }
  }
  RunConsole console(run.output_dir, world.is_main());
  Transformer& model = *job.model;
  data::BatchSource& train = *job.train;
  data::BatchSource* valid = job.validation;
  const ModelConfig& model_config = model.config();
  const ActivationOptions activations = activation_options_from(c);
  model.set_activation_checkpointing(activations.checkpointing);
  model.set_activation_offloading(activations.offload_inputs);
  // The longest batch's activations now: a run that does not fit fails before
  // step 1, and shorter batches (fine-tuning's are cut to their longest sample)
  // are planned in this memory.
  model.reserve(batch_size * rows_per_sample, seq_len);
  world.adopt(model);
  const auto [shard_offset, shard_count] = world.optimizer_shard(model.trainable_params().values().numel());
  AdamW optimizer(model.trainable_params(), adamw_config_from(c), shard_offset, shard_count);
  const double max_grad_norm = c.get<double>("optimizer.max_grad_norm");

  TrainerState state;
  state.config = c.tree();
  state.base_model = job.base_model;
  if (c.has("resume")) {
    if (auto folder = find_checkpoint(run.output_dir, c.get<std::string>("resume"))) {
      console.transient(fmt::format("loading {} ...", *folder));
      const std::vector<std::string> notes = check_kept_on_resume(c, checkpoint_config(*folder), *folder);
      state = load_checkpoint(*folder, model, optimizer);
      state.config = c.tree();  // what this run's checkpoints were trained with (a LoRA merge reads its alpha)
      state.base_model = job.base_model;  // the model this run loaded (on a LoRA resume, the checkpoint's again)
      try {
        train.restore(state.data_state);
      } catch (const Error& e) {
        fail("{}: {}: resume: the data differs from the run's ({})", c.origin_of("dataset"), *folder, e.what());
      }
      console.line(fmt::format("resumed from {} at step {}", *folder, state.step));
      const std::optional<std::string> named = c.get<std::string>("resume") == "latest"
                                                   ? name_in_latest(run.output_dir)
                                                   : std::nullopt;
      if (named && !fs::exists(fs::path(run.output_dir) / *named)) {
        console.line(fmt::format("note: {} names {}, which is gone: resumed from the newest complete checkpoint instead",
                                 (fs::path(run.output_dir) / "latest").string(), *named));
      }
      for (const std::string& note : notes) console.line(note);
      if (!state.data_state.contains(data::kShuffleStreamsKey)) {
        console.line(fmt::format("note: {} was saved by an earlier hone, whose shuffles (and mock data) drew other "
                                 "random numbers: the data goes on in this hone's order, so the rest of the epoch it "
                                 "stopped in may repeat or leave out some of that epoch's samples",
                                 *folder));
      }
      // Row sums split among another number of threads round differently.
      if (world.device().is_cpu() && state.cpu_threads && *state.cpu_threads != num_threads()) {
        console.line(fmt::format("note: {} CPU threads now, where {} trained on {}: from here the losses and weights "
                                 "differ in their last bits from a run that goes on with {} (threads={} keeps them)",
                                 num_threads(), *folder, *state.cpu_threads, *state.cpu_threads,
                                 *state.cpu_threads));
      }
      // Another world size (or batch_size, accumulation) changes the batch its steps took.
      if (state.step > 0 && state.samples_seen % state.step == 0 && state.samples_seen / state.step != global_batch) {
        const int64_t before = state.samples_seen / state.step, per_micro_batch = batch_size * world.dp_size();
        console.line(fmt::format(
            "note: the global batch is {} {} per step now, where {} trained with {} (its world size, batch_size or "
            "gradient_accumulation_steps differ){}",
            global_batch, plural(global_batch, sample_name), *folder, before,
            before % per_micro_batch == 0
                ? fmt::format(": gradient_accumulation_steps={} keeps it", before / per_micro_batch)
                : std::string()));
      }
    } else {
      console.line(fmt::format("no checkpoint in {} yet: starting from step 0", run.output_dir));
    }
  }
  world.check_same_data("training samples per epoch", train.samples_per_epoch());
  world.check_same_data("validation samples", valid ? valid->samples_per_epoch() : 0);
  const DataSize data_size(train, seq_len);
  const int64_t total_steps = total_steps_of(c, data_size, global_batch, state);
  if (state.step == 0) {
    if (const auto note = budget_in_whole_steps(c, data_size, global_batch, seq_len)) {
      console.line(*note);
    }
  }
  const LrSchedule schedule = lr_schedule_from(c, total_steps);
  // A resumed run whose budget, batch or schedule changed goes on at another
  // learning rate than the one it stopped at (a longer max_steps stretches the decay).
  if (state.next_lr && std::abs(schedule.at(state.step) - *state.next_lr) > 1e-6 * std::abs(*state.next_lr) + 1e-12) {
    console.line(fmt::format("note: step {} takes learning rate {:.4g}, where the schedule of the run it resumes gave "
                             "{:.4g}: the schedule now spans {} steps (the budget, the batch, optimizer.lr or "
                             "lr_scheduler changed)",
                             state.step + 1, schedule.at(state.step), *state.next_lr, total_steps));
  }
  state.cpu_threads = world.device().is_cpu() ? std::optional<int64_t>(num_threads()) : std::nullopt;
  std::vector<std::string> companion_files = job.companion_files;
  if (job.chat_template) {
    const std::string path = (fs::path(run.output_dir) / "chat_template.jinja").string();
    std::erase_if(companion_files, [](const std::string& f) { return fs::path(f).filename() == "chat_template.jinja"; });
    companion_files.push_back(path);
    if (world.is_main()) {
      AtomicFile file(path);
      file.write(*job.chat_template);
      file.commit();
    }
  }
  companion_files = keep_copies_in_the_run(companion_files, run.output_dir, world.is_main());
  // The settings the run trains with, written once it has trained a step: a
  // resume stopped before its first keeps the config its checkpoints were trained with.
  const auto write_config = [&] {
    if (!world.is_main()) return;
    AtomicFile resolved((fs::path(run.output_dir) / "config.yaml").string());
    resolved.write(c.to_yaml());
    resolved.commit();
  };
  for (const std::string& line : job.summary) console.line(line);
  if (world.size() > 1) {
    // ZeRO: what this rank holds (two fp32 numbers per element of its shard) against the whole.
    const auto two_fp32 = [](int64_t elements) { return format_bytes(8.0 * double(elements)); };
    // One data-parallel rank (all ranks tensor-parallel) has nothing to shard: the stage is as 0, as the estimate says.
    const int stage = world.dp_size() > 1 ? world.zero_stage() : 0;
    std::string zero;
    if (stage > 0) {
      zero = fmt::format(", ZeRO stage {}: AdamW moments {} per rank (of {})", stage, two_fp32(shard_count),
                         two_fp32(model.trainable_params().numel()));
    } else if (world.zero_stage() > 0) {
      zero = fmt::format(", ZeRO stage {} over 1 data-parallel rank: nothing sharded", world.zero_stage());
    }
    if (stage == 2) zero += fmt::format(", gradients {} per rank", format_bytes(4.0 * double(shard_count)));
    if (stage == 3) zero += fmt::format(", master weights and gradients {} per rank", two_fp32(shard_count));
    std::string layout = "data parallel";
    if (world.tp_size() > 1) {
      const std::string vocabulary =
          model.splits_vocabulary()
              ? "vocabulary split"
              : fmt::format("embeddings and output head whole on every rank (vocabulary {} is not a multiple of {})",
                            model.config().vocab_size, world.tp_size());
      layout = fmt::format("tensor parallel {} (with sequence parallelism, {}) x data parallel {}", world.tp_size(),
                           vocabulary, world.dp_size());
    }
    console.line(fmt::format("ranks: {} ({}), {}{}", world.size(), world.device().is_cuda() ? "NCCL" : "MPI", layout,
                             zero));
    // Megatron's --global-batch-size: what one optimizer step takes over all ranks.
    console.line(fmt::format("global batch: {} {} per step (batch_size {} x {} {} x {} data-parallel {})",
                             global_batch, plural(global_batch, sample_name), batch_size, accumulation,
                             plural(accumulation, "micro-batch", "micro-batches"), world.dp_size(),
                             plural(world.dp_size(), "rank")));
    if (world.zero_stage() == 3) {
      console.line("gradients: reduce-scattered a unit at a time while backward runs; weights gathered a unit ahead");
    } else if (world.zero_stage() == 2) {
      console.line("gradients: a unit at a time while backward runs, each rank's part reduced to it");
    } else {
      console.line(world.bucket_bytes() > 0
                       ? fmt::format("gradients: reduced in buckets of {} while backward runs",
                                     format_bytes(double(world.bucket_bytes())))
                       : "gradients: reduced after backward, in one piece (distributed.bucket_mb 0)");
    }
  }
  const int64_t steps_to_run = std::max<int64_t>(total_steps - state.step, 0);  // a resumed run may be past the end
  console.line(fmt::format("data: {} {} per epoch ({}){}, {} {} to run", train.samples_per_epoch(),
                           plural(train.samples_per_epoch(), sample_name), job.data_description,
                           data_size.whole_rows ? std::string()
                                                : fmt::format(", {:.1f} tokens each on average", data_size.tokens_per_sample),
                           steps_to_run, plural(steps_to_run, "step")));

  MetricsWriter metrics(run.output_dir, c.get<bool>("logging.tensorboard"), world.is_main(), state.step);
  if (metrics.dropped_records() > 0) {
    console.line(state.step > 0 ? fmt::format("note: metrics.jsonl: {} {} of steps after {} dropped (written after the "
                                              "checkpoint this run goes on from)",
                                              metrics.dropped_records(), plural(metrics.dropped_records(), "record"),
                                              state.step)
                                : fmt::format("note: metrics.jsonl: {} {} dropped (written by a run that saved no "
                                              "checkpoint: this one starts over)",
                                              metrics.dropped_records(), plural(metrics.dropped_records(), "record")));
  }
  const bool datasheet_peak = c.has("mfu_peak_tflops");
  const double peak_tflops =
      datasheet_peak ? c.get<double>("mfu_peak_tflops") : measure_gemm_peak_tflops(run.dtype, world.device());
  // The thread count a CPU run's sums were split by: its results are bit-reproducible with it.
  const std::string threads =
      world.device().is_cpu() ? fmt::format(" on {} {}", num_threads(), plural(num_threads(), "thread")) : "";
  console.line(datasheet_peak
                   ? fmt::format("mfu: against mfu_peak_tflops, {:.4g} TFLOP/s{}", peak_tflops, threads)
                   : fmt::format("mfu: against this device's measured {} matrix-product peak{}, {:.4g} TFLOP/s "
                                 "(mfu_peak_tflops takes a datasheet's)",
                                 dtype_name(run.dtype), threads, peak_tflops));
  if (run.dtype == DType::bf16 && world.device().is_cpu() && !kernels::cpu::native_bf16_products_available()) {
    console.line("note: this CPU has no bf16 matrix products (they need AVX-512): bf16's are widened to f32, so "
                 "dtype fp32 trains faster here (1.37x on the quickstart's model), bf16 in less memory");
  }
  if (schedule.warmup_steps >= total_steps && steps_to_run > 0) {
    console.line(fmt::format("note: lr_scheduler.warmup_steps {} covers the whole run of {} steps: the learning "
                             "rate rises all along (to optimizer.lr {:g} at step {}) and does not decay",
                             schedule.warmup_steps, total_steps, schedule.peak_lr, schedule.warmup_steps));
  } else if (schedule.kind == LrScheduleKind::wsd && steps_to_run > 0 && schedule.wsd_decay_clamped()) {
    console.line(fmt::format("note: lr_scheduler.decay_fraction {:g} of {} steps would reach into the warmup of {}: "
                             "the decay takes the {} {} after it",
                             schedule.decay_fraction, total_steps, schedule.warmup_steps, schedule.wsd_decay_steps(),
                             plural(schedule.wsd_decay_steps(), "step")));
  }
  const int64_t log_every = std::max<int64_t>(1, c.get<int64_t>("log_every_n_steps"));
  const int64_t eval_every = c.get<int64_t>("eval.every_n_steps");
  if (!valid && (eval_every > 0 || c.get<bool>("eval.first"))) {
    const double fraction = c.get<double>("dataset.validation_fraction");
    console.line(fraction == 0 ? std::string("note: no validation data (dataset.validation_fraction 0 and no "
                                             "dataset.validation_path): eval.* runs no validation")
                               : fmt::format("note: no validation data (dataset.validation_fraction {:g} holds out "
                                             "nothing of data this small, and no dataset.validation_path): eval.* "
                                             "runs no validation",
                                             fraction));
  }
  const int64_t checkpoint_every = c.get<int64_t>("checkpoint.every_n_steps");
  const bool save_final = c.get<bool>("checkpoint.save_final");
  const int64_t keep_last_n = c.get<int64_t>("checkpoint.keep_last_n");
  const int64_t max_nonfinite = c.get<int64_t>("max_consecutive_nonfinite");
  Allocator& memory = allocator_for(world.device());
  memory.reset_peak();  // training's peak: the GEMM-peak probe's operands (800 MB on a GPU in fp32) are not part of it

  // The time validation and saving took so far, for the ETA (Composer's
  // RuntimeEstimator counts evaluation too): a mean of each, times how many remain.
  struct Pauses {
    double seconds = 0;
    int64_t count = 0;
    void add(double s) {
      seconds += s;
      ++count;
    }
    double mean() const { return count == 0 ? 0 : seconds / double(count); }
  } evaluations, saves;
  // A large model's weights and AdamW state take a while to save: said while it
  // runs, and how long it took (which helps choose checkpoint.every_n_steps).
  auto save = [&] {
    state.data_state = train.state();
    state.next_lr = schedule.at(state.step);
    console.transient(fmt::format("step {}: saving a checkpoint ...", state.step));
    const auto started = std::chrono::steady_clock::now();
    const std::string folder =
        world.save_checkpoint(run.output_dir, model, optimizer, state, keep_last_n, companion_files);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    saves.add(seconds);
    console.line(fmt::format("step {}: checkpoint {} ({})", state.step, folder, format_duration(seconds)));
  };
  // Batches of a step's samples, whatever the micro-batches: the same validation
  // at any split of the global batch (Megatron's --eval-iters).
  const int64_t max_eval_batches = c.get<int64_t>("eval.max_batches") == 0
                                       ? std::numeric_limits<int64_t>::max()
                                       : c.get<int64_t>("eval.max_batches") * accumulation;
  const int64_t eval_batches =
      valid ? std::min(max_eval_batches, (valid->samples_per_epoch() + batch_size * world.dp_size() - 1) /
                                             (batch_size * world.dp_size()))
            : 0;
  // A stop request (the ranks agree before each batch) cuts a validation short:
  // the run saves at once, without that validation's loss.
  const auto validation_progress = [&](int64_t done) {
    if (world.any(stop_requested())) throw Stopped{};
    console.transient(fmt::format("step {}: validation, batch {} of {} ...", state.step, done + 1, eval_batches));
  };
  auto run_evaluation = [&] {
    if (!valid) return;
    const auto started = Clock::now();
    try {
      const Objective::Evaluation e = objective.evaluate(model, *valid, max_eval_batches, world, validation_progress);
      evaluations.add(seconds_between(started, Clock::now()));
      metrics.write(state.step, e.metrics);
      console.line(fmt::format("step {}: {}", state.step, e.summary));
    } catch (const Stopped&) {
      console.line(fmt::format("step {}: validation stopped by the stop request", state.step));
    }
  };

  const auto start = Clock::now();
  double train_seconds = 0, window_seconds = 0, last_loss = NAN;
  // Tokens are those of the samples, padding left out (Composer's count, for
  // tokens/s and time/token); the FLOPs are those of every position computed
  // (a fine-tuning batch is cut to its longest sample): both batch by batch.
  double window_flops = 0, flops_this_run = 0;
  int64_t window_tokens = 0, window_samples = 0, window_steps = 0, consecutive_nonfinite = 0;
  int64_t samples_this_run = 0, tokens_this_run = 0;  // excludes what a resumed run trained before
  const int64_t first_step = state.step;  // of this run: a resumed run's checkpoint
  int64_t last_saved = state.step;        // a resumed run does not re-save what it loaded
  StepStats last_stats;
  bool mfu_above_peak_noted = false;
  // The steps left at the window's pace, and the validations and saves left at theirs.
  const auto eta = [&] {
    const int64_t left = total_steps - state.step;
    const PausesLeft pauses =
        pauses_left(state.step, total_steps, eval_every, checkpoint_every, save_final);
    return window_seconds / double(window_steps) * double(left) + evaluations.mean() * double(pauses.evaluations) +
           saves.mean() * double(pauses.saves);
  };
  // One record of the steps since the last (Composer's names), and its console line.
  const auto log_window = [&] {
    if (window_steps == 0) return;
    const MemoryStats mem = memory.stats();
    const double tokens_per_sec = double(window_tokens) / window_seconds;
    const double samples_per_sec = double(window_samples) / window_seconds;
    const double seconds_left = eta();
    const StepStats& s = last_stats;
    const double mfu = window_flops / window_seconds / world.size() / (peak_tflops * 1e12);
    if (mfu > 1 && !mfu_above_peak_noted) {
      console.line(fmt::format(
          "note: MFU {:.0f}% is above 100%: {}", mfu * 100,
          datasheet_peak
              ? fmt::format("mfu_peak_tflops ({:.4g} TFLOP/s) is below what this device reaches", peak_tflops)
              : fmt::format("the matrix-product peak measured at the start ({:.4g} TFLOP/s) was low, the device "
                            "busier then than now; mfu_peak_tflops sets the peak to divide by",
                            peak_tflops)));
      mfu_above_peak_noted = true;
    }
    Metrics logged = {{"loss/train/total", s.loss}};
    logged.insert(logged.end(), s.metrics.begin(), s.metrics.end());
    logged.insert(logged.end(), {{"throughput/samples_per_sec", samples_per_sec},
                                 {"throughput/device/samples_per_sec", samples_per_sec / world.size()},
                                 {"throughput/tokens_per_sec", tokens_per_sec},
                                 {"throughput/device/tokens_per_sec", tokens_per_sec / world.size()},
                                 {"throughput/mfu", mfu},
                                 {"memory/allocated_mem", double(mem.allocated) / kGigabyte},
                                 {"memory/reserved_mem", double(mem.reserved) / kGigabyte},
                                 {"memory/peak_allocated_mem", double(mem.peak_allocated) / kGigabyte},
                                 {"lr", s.lr},
                                 {"grad_norm", s.grad_norm},
                                 {"time/train", state.train_seconds / 3600.0},  // resumed runs' included
                                 {"time/token", double(state.tokens_seen)}});
    metrics.write(state.step, logged);
    console.status_line(fmt::format("step {}/{}: loss {:.4f} | lr {:.3g} | grad norm {:.3f} | {:.0f} tokens/s | ETA {}",
                                    state.step, total_steps, s.loss, s.lr, s.grad_norm, tokens_per_sec,
                                    format_duration(seconds_left)));
    window_seconds = window_flops = 0;
    window_tokens = window_samples = window_steps = 0;
  };
  std::vector<Batch> micro(static_cast<size_t>(accumulation));
  if (valid && state.step < total_steps) {
    // The validation batches read once before the first step (what every
    // validation reads, all of the held-out data with eval.max_batches 0): data
    // the model cannot take there (ids past its vocabulary) is an error now,
    // before the output_dir holds a run, not at the first validation after training.
    valid->rewind();
    for (int64_t i = 0; i < max_eval_batches && !valid->pass_done(); ++i) valid->next();
  }
  if (world.any(stop_requested())) {
    console.line(fmt::format("stop requested before step {}: nothing trained{}", state.step + 1,
                             state.step == 0 ? "" : ", nothing to save"));
    new_folders.discard();  // a folder this run made holds nothing worth keeping
    return 128 + stop_signal();
  }
  if (c.get<bool>("eval.first") && state.step == 0) run_evaluation();
  if (state.step >= total_steps) console.line(fmt::format("the run is at step {} of {}: nothing to train", state.step, total_steps));
  // A signal may reach the ranks at different steps: they agree before each step.
  bool interrupted = false;
  while (state.step < total_steps && !(interrupted = world.any(stop_requested()))) {
    const auto step_start = Clock::now();
    int64_t step_tokens = 0;
    double step_flops = 0;
    for (Batch& b : micro) {
      b = train.next().to(world.device());
      const int64_t rows = b.tokens.size(0) * world.dp_size(), length = b.tokens.size(1);
      step_tokens += b.sample_tokens > 0 ? b.sample_tokens : rows * length;
      step_flops += double(rows * length) * objective.flops_per_token(model_config, model.lora(), length);
    }
    const StepStats s =
        objective.step(model, optimizer, micro, schedule.at(state.step), max_grad_norm, world.data_parallel());
    ops::synchronize(world.device());  // the step's last kernels may still be running on a GPU
    const double elapsed = seconds_between(step_start, Clock::now());
    ++state.step;
    new_folders.keep();
    if (state.step == first_step + 1) write_config();
    if (s.applied) {
      consecutive_nonfinite = 0;
    } else {
      ++state.nonfinite_steps;
      ++consecutive_nonfinite;
      console.line(fmt::format("step {}: loss {} / gradient norm {} is not finite: step skipped ({} in a row)",
                               state.step, s.loss, s.grad_norm, consecutive_nonfinite));
    }
    state.tokens_seen += step_tokens;
    state.samples_seen += global_batch;
    train_seconds += elapsed;
    state.train_seconds += elapsed;
    window_seconds += elapsed;
    window_tokens += step_tokens;
    window_flops += step_flops;
    window_samples += global_batch;
    samples_this_run += global_batch;
    tokens_this_run += step_tokens;
    flops_this_run += step_flops;
    ++window_steps;
    last_loss = s.loss;

    const double tokens_per_sec = double(window_tokens) / window_seconds;
    console.progress(state.step, total_steps, s.loss, tokens_per_sec, eta());
    last_stats = s;
    if (state.step % log_every == 0 || state.step == total_steps) log_window();
    if (max_nonfinite > 0 && consecutive_nonfinite >= max_nonfinite) {
      log_window();  // the steps that diverged, for the record
      const std::optional<std::string> last = find_checkpoint(run.output_dir, "latest");
      fail("stopping at step {}: {} steps in a row had a non-finite loss or gradient (the learning rate may be too "
           "high; {})",
           state.step, consecutive_nonfinite, last ? "the last checkpoint is " + *last : "no checkpoint was saved before");
    }
    if (eval_every > 0 && state.step % eval_every == 0 && state.step != total_steps) run_evaluation();
    if (checkpoint_every > 0 && state.step % checkpoint_every == 0) {
      save();
      last_saved = state.step;
    }
  }

  if (interrupted) {
    log_window();  // the steps since the last record: the step saved is in metrics.jsonl
    console.line(fmt::format("stop requested: saving step {} and exiting", state.step));
  }
  const size_t training_peak = memory.stats().peak_allocated;  // the steps', as logged (not the final validation's)
  if (!interrupted && steps_to_run > 0) run_evaluation();  // a finished run resumed has nothing new to validate
  // Exports of weights that are never whole on one rank read the final
  // checkpoint (a tensor at a time): it is saved for them if this run has not.
  const bool export_from_checkpoint = job.on_finish && !interrupted && !world.weights_whole_on_main();
  const std::string final_folder = (fs::path(run.output_dir) / checkpoint_folder_name(state.step)).string();
  const bool saved_final = last_saved == state.step && fs::exists(final_folder);
  if (((interrupted || save_final) && last_saved != state.step) ||
      (export_from_checkpoint && !saved_final)) {
    save();
  }
  const double wall = seconds_between(start, Clock::now());
  const double seconds = std::max(train_seconds, 1e-9);
  const double tokens_per_sec = double(tokens_this_run) / seconds;
  const double tokens_per_sec_per_device = tokens_per_sec / world.size();
  // A run that had nothing left to train measured nothing: no row.
  if (world.is_main() && samples_this_run > 0) {
    append_perf_summary(run.output_dir,
                        {.model = model_config.name,
                         .precision = std::string(dtype_name(run.dtype)),
                         .world_size = world.size(),
                         .global_batch_size = global_batch,
                         .seq_len = seq_len,
                         .tokens_per_sec = tokens_per_sec,
                         .samples_per_sec = double(samples_this_run) / seconds,
                         .tokens_per_sec_per_device = tokens_per_sec_per_device,
                         .mfu = flops_this_run / seconds / world.size() / (peak_tflops * 1e12),
                         .peak_memory_bytes = training_peak,
                         .final_loss = last_loss,
                         .first_step = first_step,
                         .last_step = state.step,
                         .train_seconds = train_seconds,
                         .finished_at = utc_timestamp()});
  }
  console.line(fmt::format("done: step {} ({} this run, {}); checkpoints in {}, metrics in {}", state.step,
                           samples_this_run / global_batch, format_duration(wall), run.output_dir,
                           (fs::path(run.output_dir) / "metrics.jsonl").string()));
  if (job.on_finish && !interrupted && world.is_main()) {
    job.on_finish(console, export_from_checkpoint ? std::optional(final_folder) : std::nullopt, companion_files);
  }
  return 0;
}

}  // namespace hone
