#include "hone/data/pretrain_stream.hpp"

#include <algorithm>
#include <numeric>

#include "hone/core/error.hpp"
#include "hone/core/rng.hpp"

namespace hone::data {

std::pair<DocumentRange, DocumentRange> split_documents(std::shared_ptr<const DocumentSource> source,
                                                        double validation_fraction) {
  HONE_CHECK(validation_fraction >= 0 && validation_fraction < 1,
             "dataset.validation_fraction must be in [0, 1), got {}", validation_fraction);
  const int64_t n = source->num_documents();
  int64_t held_out = int64_t(double(n) * validation_fraction + 0.5);
  if (validation_fraction > 0 && held_out == 0 && n > 1) held_out = 1;
  return {DocumentRange{source, 0, n - held_out}, DocumentRange{source, n - held_out, n}};
}

PretrainStream::PretrainStream(std::vector<DocumentRange> ranges, std::vector<double> weights, StreamOptions options)
    : options_(options) {
  HONE_CHECK(!ranges.empty(), "the dataset has no sources");
  HONE_CHECK(weights.empty() || weights.size() == ranges.size(), "{} blend weights for {} datasets", weights.size(),
             ranges.size());
  HONE_CHECK(options.seq_len > 0 && options.batch_size > 0, "seq_len and batch_size must be positive");
  HONE_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
             "rank {} is outside a world of {}", options.rank, options.world_size);
  // A source's shuffles draw from streams numbered by it (arrange()).
  HONE_CHECK(ranges.size() < (size_t(1) << 23), "a blend of {} datasets: at most 8388607", ranges.size());
  double weight_sum = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    Source s;
    s.range = ranges[i];
    int64_t tokens = 0;
    for (int64_t d = s.range.first; d < s.range.end; ++d) tokens += s.range.source->document_length(d);
    // Each sample needs seq_len + 1 tokens; consecutive samples share one.
    s.samples = (tokens - 1) / options.seq_len;
    HONE_CHECK(s.samples > 0, "{} (documents {} to {}) has {} tokens: not one sample of {} + 1", s.range.source->describe(),
               s.range.first, s.range.end, tokens, options.seq_len);
    s.weight = weights.empty() ? double(s.samples) : weights[i];
    HONE_CHECK(s.weight > 0, "blend weight {} of {} must be positive", s.weight, s.range.source->describe());
    weight_sum += s.weight;
    samples_per_epoch_ += s.samples;
    sources_.push_back(std::move(s));
  }
  for (Source& s : sources_) s.weight /= weight_sum;
}

std::pair<size_t, int64_t> PretrainStream::choose() {
  // Megatron's blending (build_blending_indices): take from the source furthest
  // behind its share of max(position, 1) samples, the first of equals.
  size_t best = 0;
  double best_error = -1e300;
  for (size_t i = 0; i < sources_.size(); ++i) {
    const double error = sources_[i].weight * std::max(double(position_), 1.0) - double(sources_[i].taken);
    if (error > best_error) {
      best_error = error;
      best = i;
    }
  }
  ++position_;
  return {best, sources_[best].taken++};
}

void PretrainStream::arrange(Source& s, int64_t cycle) {
  const int64_t documents = s.range.end - s.range.first;
  s.documents.resize(size_t(documents));
  std::iota(s.documents.begin(), s.documents.end(), int64_t(0));
  // Each pass draws from its own Philox stream: documents and samples, per source.
  HONE_CHECK(cycle < (int64_t(1) << 32), "{}: pass {} over it: at most 2^32 passes", s.range.source->describe(),
             cycle);
  const uint64_t stream = uint64_t(&s - sources_.data()) << 32 | uint64_t(cycle);
  auto permute = [&](std::vector<int64_t>& v, uint64_t tag) {  // Fisher-Yates
    Generator g(options_.seed, random_stream(RandomUse::pretrain_order, tag << 55 | stream));
    for (int64_t i = int64_t(v.size()) - 1; i > 0; --i) std::swap(v[size_t(i)], v[g.next_below(uint64_t(i + 1))]);
  };
  s.order.clear();
  if (options_.shuffle) {
    permute(s.documents, 1);
    s.order.resize(size_t(s.samples));
    std::iota(s.order.begin(), s.order.end(), int64_t(0));
    permute(s.order, 0);
  }
  s.starts.assign(1, 0);
  for (const int64_t d : s.documents) {
    s.starts.push_back(s.starts.back() + s.range.source->document_length(s.range.first + d));
  }
  s.cycle = cycle;
}

void PretrainStream::read_sample(Source& s, int64_t index, std::span<int32_t> out,
                                 std::vector<int64_t>& document_starts) {
  document_starts.clear();
  const int64_t cycle = options_.shuffle ? index / s.samples : 0;  // unshuffled passes are all alike
  if (s.cycle != cycle) arrange(s, cycle);
  int64_t sample = index % s.samples;
  if (!s.order.empty()) sample = s.order[size_t(sample)];
  // Tokens [sample·L, sample·L + L + 1) of the concatenated documents.
  int64_t offset = sample * options_.seq_len;
  size_t filled = 0;
  auto doc = std::upper_bound(s.starts.begin(), s.starts.end(), offset) - s.starts.begin() - 1;
  while (filled < out.size()) {
    if (filled > 0) document_starts.push_back(int64_t(filled));
    const int64_t in_doc = offset - s.starts[size_t(doc)];
    const int64_t take = std::min<int64_t>(int64_t(out.size() - filled), s.starts[size_t(doc) + 1] - offset);
    const std::span<int32_t> part = out.subspan(filled, size_t(take));
    const int64_t document = s.range.first + s.documents[size_t(doc)];
    s.range.source->read(document, in_doc, part);
    if (options_.vocab_size > 0) {
      for (const int32_t id : part) {
        HONE_CHECK(id >= 0 && id < options_.vocab_size,
                   "{}: document {} holds token id {}, outside the model's vocabulary of {} (tokenized for another "
                   "model?)",
                   s.range.source->describe(), document, id, options_.vocab_size);
      }
    }
    filled += size_t(take);
    offset += take;
    ++doc;
  }
}

Batch PretrainStream::next() {
  const int64_t L = options_.seq_len, B = options_.batch_size;
  Tensor tokens = Tensor::empty({B, L}, DType::i32), targets = Tensor::empty({B, L}, DType::i32);
  Tensor positions = options_.block_causal ? Tensor::empty({B, L}, DType::i32) : Tensor();
  std::vector<int32_t> sample(size_t(L + 1));
  std::vector<int64_t> document_starts;
  // Every rank walks the whole global batch (the blend depends on all of it) and
  // reads only its own rows.
  for (int64_t k = 0; k < int64_t(options_.world_size) * B; ++k) {
    const int64_t row = (k % B) * L;
    if (pass_done()) {  // an evaluation pass's end: the rest of the batch is padding
      if (k / B != options_.rank) continue;
      std::fill_n(tokens.data<int32_t>() + row, L, 0);
      std::fill_n(targets.data<int32_t>() + row, L, kIgnoreTarget);
      if (options_.block_causal) std::fill_n(positions.data<int32_t>() + row, L, 0);
      continue;
    }
    auto [source, index] = choose();
    if (k / B != options_.rank) continue;
    read_sample(sources_[source], index, sample, document_starts);
    std::copy_n(sample.begin(), L, tokens.data<int32_t>() + row);
    int32_t* row_targets = targets.data<int32_t>() + row;
    std::copy_n(sample.begin() + 1, L, row_targets);
    if (options_.eod_mask_loss) {
      for (const int64_t start : document_starts) row_targets[start - 1] = kIgnoreTarget;
    }
    if (options_.block_causal) {
      int32_t* row_positions = positions.data<int32_t>() + row;
      int64_t document_start = 0;
      auto next_start = document_starts.begin();
      for (int64_t t = 0; t < L; ++t) {
        if (next_start != document_starts.end() && *next_start == t) document_start = *next_start++;
        row_positions[t] = int32_t(t - document_start);
      }
    }
  }
  return {tokens, targets, positions};
}

nlohmann::json PretrainStream::state() const {
  return {{"position", position_}, {"samples_per_epoch", samples_per_epoch_}, {kShuffleStreamsKey, kShuffleStreams}};
}

void PretrainStream::replay_to(int64_t position) {
  position_ = 0;
  for (Source& s : sources_) s.taken = 0;
  while (position_ < position) choose();
}

void PretrainStream::restore(const nlohmann::json& state) {
  check_saved_epoch(state, samples_per_epoch_);
  replay_to(saved_position(state));
}

}  // namespace hone::data
