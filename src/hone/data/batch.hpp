#pragma once
// What the data side hands the trainer, and the interface of anything that
// produces training batches with a position that can be saved and restored.
#include <nlohmann/json.hpp>
#include <optional>

#include "hone/core/tensor.hpp"

namespace hone {

struct Batch {
  Tensor tokens;     // i32 [batch, seq]
  Tensor targets;    // i32 [batch, seq]; data::kIgnoreTarget masks a position
  Tensor positions;  // packed batches only: i32 [batch, seq], each token's position in its sample
  // Fine-tuning: the tokens of the samples in this micro-batch over all
  // data-parallel ranks, padding left out (0: every position is a sample's).
  int64_t sample_tokens = 0;

  Batch to(Device device) const {
    return {tokens.to(device), targets.to(device), positions.defined() ? positions.to(device) : Tensor(),
            sample_tokens};
  }
};

namespace data {

// A target with no loss (ops::kIgnoreIndex, PyTorch's ignore_index).
inline constexpr int32_t kIgnoreTarget = -100;

// The key a data state marks its shuffles' random numbers with: a checkpoint
// without it was saved by a hone whose shuffles drew other numbers.
inline constexpr const char* kShuffleStreamsKey = "shuffle_streams";
inline constexpr const char* kShuffleStreams = "per use";

// The position a data state was saved at (samples read since the run began);
// throws hone::Error when it has none, or a negative one (a hand-edited checkpoint).
int64_t saved_position(const nlohmann::json& state);
// Throws hone::Error when the state was saved on data of another size.
void check_saved_epoch(const nlohmann::json& state, int64_t samples_per_epoch);

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual Batch next() = 0;
  // The position, saved in checkpoints; restore() continues exactly from it.
  virtual nlohmann::json state() const = 0;
  virtual void restore(const nlohmann::json& state) = 0;
  // Back to the first batch, for an evaluation pass (which walks the same
  // batches every time): until the next rewind, samples past one pass over the
  // data are left out, their rows padding without targets, so that a last,
  // partial batch counts each sample once, and pass_done() tells when every
  // sample has been read (on every data-parallel rank alike).
  virtual void rewind() = 0;
  virtual bool pass_done() const = 0;
  // Samples in one pass over the data (an epoch).
  virtual int64_t samples_per_epoch() const = 0;
  // The tokens of those samples, padding left out; null where each sample is a
  // whole row of the trainer's seq_len (pretraining).
  virtual std::optional<int64_t> tokens_per_epoch() const { return std::nullopt; }
  // What a sample of the batches is where it is not the objective's own
  // (packed fine-tuning's rows of several samples), or null.
  virtual const char* sample_name() const { return nullptr; }
};

}  // namespace data
}  // namespace hone
