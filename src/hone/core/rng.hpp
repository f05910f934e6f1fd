#pragma once
// Counter-based random numbers (Philox4x32-10, the generator of cuRAND and of
// PyTorch's CUDA backend). Draw i of a stream depends only on (seed, stream, i),
// so every result is the same for any number of threads and on any device.
#include <cstdint>
#include <span>

#include "hone/core/error.hpp"
#include "hone/core/philox.hpp"

namespace hone {

// What a seed's random numbers are for. Each use draws from streams of its
// own, the use in a stream's top byte, so no two uses read the same numbers
// (the embeddings' init and the data order, say).
enum class RandomUse : uint64_t {
  weight_init = 0,     // index: the parameter's
  lora_init = 1,       // the adapter matrix's
  lora_dropout = 2,    // the adapter's << 32 | the forward pass's round
  pretrain_order = 3,  // the shuffle's tag << 55 | the source's << 32 | the pass
  finetune_order = 4,  // the epoch
  mock_documents = 5,  // none: a document's tokens are its Philox block
  sampling = 6,        // the prompt's << 32 | the sample's
  benchmark = 7,       // the operand's
};
// The stream of `use` numbered `index`, which must be below 2^56 (each use
// checks its numbers where it makes them).
inline uint64_t random_stream(RandomUse use, uint64_t index) {
  HONE_ASSERT(index < uint64_t(1) << 56);
  return uint64_t(use) << 56 | index;
}

class Generator {
 public:
  // The complete state; saved in checkpoints so a resumed run draws the same numbers.
  struct State {
    uint64_t seed = 0;
    uint64_t stream = 0;  // independent sequences under one seed (e.g. one per use)
    uint64_t offset = 0;  // Philox blocks consumed so far
  };

  explicit Generator(uint64_t seed = 0, uint64_t stream = 0) : state_{seed, stream, 0} {}

  // Normal(mean, std) / Uniform[low, high) samples; element i uses block offset + i/2.
  template <typename T>
  void normal(std::span<T> out, double mean, double std);
  template <typename T>
  void uniform(std::span<T> out, double low, double high);

  uint64_t next_u64();
  double next_double();  // uniform in [0, 1) with 53 random bits
  uint64_t next_below(uint64_t bound);  // uniform in [0, bound), unbiased

  State state() const { return state_; }
  void set_state(const State& state) { state_ = state; }

 private:
  PhiloxBlock next_block();
  State state_;
};

}  // namespace hone
