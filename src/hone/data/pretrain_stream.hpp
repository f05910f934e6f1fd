#pragma once
// The pretraining stream: fixed-length samples of seq_len + 1 tokens cut from the
// concatenated documents of one or more sources (Megatron's packing: samples
// cross document boundaries, and consecutive samples share one token), blended
// by weight, and split across data-parallel ranks. With shuffle on, every pass
// over a source concatenates its documents in a fresh order and then visits the
// samples cut from them in a fresh order (Megatron's GPTDataset shuffles both).
// Every batch is a pure function of (seed, position), so a saved position
// resumes the exact batches an uninterrupted run would have seen.
#include <memory>
#include <vector>

#include "hone/data/batch.hpp"
#include "hone/data/documents.hpp"

namespace hone::data {

// A contiguous range of a source's documents (a train or validation split).
struct DocumentRange {
  std::shared_ptr<const DocumentSource> source;
  int64_t first = 0, end = 0;  // documents [first, end)
};

// Splits each source's documents into [train, validation) by fraction.
std::pair<DocumentRange, DocumentRange> split_documents(std::shared_ptr<const DocumentSource> source,
                                                        double validation_fraction);

struct StreamOptions {
  int64_t seq_len = 0;
  int64_t batch_size = 0;  // per rank
  uint64_t seed = 0;
  bool shuffle = true;
  int rank = 0, world_size = 1;
  int64_t vocab_size = 0;  // > 0: a token at or above it is an error naming its document
  // Each document of a sample a sequence of its own (Megatron's --reset-position-ids
  // with --reset-attention-mask): positions restart at its first token and
  // attention stays within it (Batch::positions).
  bool block_causal = false;
  // No loss where the input is a document's last token (its EOD, with
  // preprocess --append-eod): the next document's first token is not predicted
  // from another document (Megatron's --eod-mask-loss).
  bool eod_mask_loss = false;
};

class PretrainStream final : public BatchSource {
 public:
  // weights: one per range (normalised here); empty means proportional to size.
  PretrainStream(std::vector<DocumentRange> ranges, std::vector<double> weights, StreamOptions options);

  Batch next() override;
  nlohmann::json state() const override;
  void restore(const nlohmann::json& state) override;
  void rewind() override {
    replay_to(0);
    one_pass_ = true;
  }
  bool pass_done() const override { return one_pass_ && position_ >= samples_per_epoch_; }
  int64_t samples_per_epoch() const override { return samples_per_epoch_; }
  int64_t position() const { return position_; }

 private:
  struct Source {
    DocumentRange range;
    int64_t samples = 0;
    double weight = 0;
    int64_t taken = 0;  // samples drawn so far from this source (blending state)
    // The pass (epoch over this source) the three vectors below are for.
    int64_t cycle = -1;
    std::vector<int64_t> documents;  // this pass's document order (offsets into range)
    std::vector<int64_t> starts;  // token offset of each of them in the concatenation (+ total)
    std::vector<int64_t> order;  // this pass's sample order (empty: in order)
  };

  // Lays out pass `cycle` of a source: its document order and sample order.
  void arrange(Source& s, int64_t cycle);

  // The next global sample: which source, which of its samples.
  std::pair<size_t, int64_t> choose();
  // Reads sample `index` of s into out (seq_len + 1 tokens) and the offsets in
  // it, past 0, where a document starts into document_starts.
  void read_sample(Source& s, int64_t index, std::span<int32_t> out, std::vector<int64_t>& document_starts);
  void replay_to(int64_t position);

  std::vector<Source> sources_;
  StreamOptions options_;
  int64_t samples_per_epoch_ = 0;
  int64_t position_ = 0;  // global samples consumed (all ranks)
  bool one_pass_ = false;  // since rewind(): no sample past the first pass
};

}  // namespace hone::data
