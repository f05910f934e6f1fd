#include "hone/data/formats/ordered_sink.hpp"

#include "hone/core/error.hpp"

namespace hone::data {

OrderedDocumentSink::OrderedDocumentSink(TokenWriter& writer, size_t window)
    : writer_(writer), window_(window < 1 ? 1 : window) {}

void OrderedDocumentSink::submit(uint64_t index, std::vector<int32_t> tokens, std::vector<int32_t> sequence_lengths) {
  std::unique_lock lock(mutex_);
  advanced_.wait(lock, [&] { return error_ || index < next_ + window_; });
  if (error_) std::rethrow_exception(error_);
  HONE_CHECK(index >= next_ && !pending_.contains(index), "document {} was submitted twice", index);
  pending_.emplace(index, Pending{std::move(tokens), std::move(sequence_lengths)});
  // Whoever completes the run of consecutive documents writes it.
  try {
    for (auto it = pending_.begin(); it != pending_.end() && it->first == next_; it = pending_.erase(it), ++next_)
      writer_.add_document(it->second.tokens, it->second.sequence_lengths);
  } catch (...) {
    error_ = std::current_exception();
    advanced_.notify_all();
    throw;
  }
  advanced_.notify_all();
}

void OrderedDocumentSink::finish() {
  std::unique_lock lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  HONE_CHECK(pending_.empty(), "document {} was never submitted ({} later ones wait for it)", next_, pending_.size());
  writer_.finish();
}

uint64_t OrderedDocumentSink::written() const {
  std::lock_guard lock(mutex_);
  return next_;
}

}  // namespace hone::data
