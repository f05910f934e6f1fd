#pragma once
// Incremental decoding with a key/value cache: the inference half of the
// Transformer. A prompt is run through the model's own forward pass (prefill)
// and its keys and values (after RoPE) are kept; each later token then costs one
// row through every layer, attending to the cache of its sequence. Several
// sequences of different lengths decode together, one token each per step.
#include <span>
#include <vector>

#include "hone/model/transformer.hpp"

namespace hone {

class Decoder {
 public:
  // Caches for `max_sequences` sequences of up to `capacity` tokens each
  // (capacity <= the model's max_seq_len).
  Decoder(Transformer& model, int64_t max_sequences, int64_t capacity);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Runs prompts[i] into cache slot slots[i] (replacing what it held) for
  // every i; returns the logits that follow each prompt, [prompts, vocab] on the
  // host. Prompts run together, packed into rows of up to kPrefillRowTokens
  // tokens (or the longest prompt) in which each attends within itself, as
  // training's packed samples: one pass over the weights for many short prompts,
  // and no more activation memory than one long prompt takes.
  Tensor prefill(std::span<const int64_t> slots, std::span<const std::vector<int32_t>> prompts);
  // One prompt into one slot; the logits that follow it, [vocab] on the host.
  Tensor prefill(int64_t slot, std::span<const int32_t> prompt);
  // Slot `to` holds what slot `from` holds (a prompt drawn from several times
  // is prefilled once).
  void copy_slot(int64_t from, int64_t to);
  static constexpr int64_t kPrefillRowTokens = 2048;
  // Appends tokens[i] to slot slots[i] for every i; returns the logits that
  // follow each, [rows, vocab] on the host.
  Tensor decode(std::span<const int64_t> slots, std::span<const int32_t> tokens);

  int64_t length(int64_t slot) const { return lengths_[size_t(slot)]; }
  int64_t capacity() const { return capacity_; }
  size_t cache_bytes() const;

 private:
  // slot's first `length` cache rows of one layer's cache, as [length, KV·head_dim].
  Tensor slot_rows(const Tensor& cache, int64_t slot, int64_t length) const;
  // The prompts as one packed row into their slots; the logits that follow
  // each into its row of `logits` ([prompts, vocab], the model's device).
  void prefill_row(std::span<const int64_t> slots, std::span<const std::vector<int32_t>> prompts, const Tensor& logits);

  Transformer& model_;
  int64_t capacity_;
  std::vector<Tensor> k_cache_, v_cache_;  // per layer: [slots, capacity, KV·head_dim]
  std::vector<int64_t> lengths_;
  bool model_was_checkpointing_;  // prefill needs every layer's keys: off while decoding
};

}  // namespace hone
