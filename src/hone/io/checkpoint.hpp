#pragma once
// Training checkpoints (docs/architecture.md, "Checkpoints"). A run directory
// holds step_NNNNNNN/ folders, each with model.safetensors, optimizer.safetensors,
// trainer_state.json and, written last, manifest.json with every file's size and
// XXH3-64 checksum. A folder is written under a temporary name, fsynced and
// renamed; the file `latest` (the folder's name) is then replaced atomically. A
// process killed at any moment leaves the previous checkpoint intact and loadable.
#include <optional>
#include <string>

#include "hone/config/config.hpp"
#include "hone/model/transformer.hpp"
#include "hone/optim/adamw.hpp"

namespace hone {

// Everything besides weights and optimizer moments that resuming needs.
struct TrainerState {
  int64_t step = 0;          // optimizer steps taken
  int64_t tokens_seen = 0;   // unmasked target tokens trained on
  int64_t samples_seen = 0;  // sequences trained on
  int64_t nonfinite_steps = 0;
  Json data_state = Json::object();  // the data loader's position
  Json config = Json::object();      // the resolved run config
};

// Writes step_<step>/ under run_dir and points `latest` at it; then removes the
// oldest checkpoints beyond keep_last_n (0 keeps all). Returns the folder path.
std::string save_checkpoint(const std::string& run_dir, const Transformer& model, const AdamW& optimizer,
                            const TrainerState& state, int64_t keep_last_n);

// The checkpoint folder `resume` refers to: "latest" (the folder `latest` in
// run_dir names; nullopt when the run has none yet) or a folder path.
std::optional<std::string> find_checkpoint(const std::string& run_dir, const std::string& resume);

// Verifies the manifest (sizes and checksums) and loads weights, moments and
// state. Any missing, truncated or corrupt file is an error naming it.
TrainerState load_checkpoint(const std::string& folder, Transformer& model, AdamW& optimizer);

// Verifies a checkpoint folder's manifest; throws hone::Error naming the first bad file.
void verify_checkpoint(const std::string& folder);

std::string checkpoint_folder_name(int64_t step);

}  // namespace hone
