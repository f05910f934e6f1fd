#include "hone/data/documents.hpp"

#include <algorithm>
#include <fmt/core.h>

#include "hone/core/error.hpp"
#include "hone/core/rng.hpp"

namespace hone::data {

MockDocuments::MockDocuments(int64_t num_documents, int64_t document_length, int64_t vocab_size, uint64_t seed)
    : num_documents_(num_documents), document_length_(document_length), vocab_size_(vocab_size), seed_(seed) {
  HONE_CHECK(num_documents > 0 && document_length > 0 && vocab_size > 1,
             "mock data needs documents, a length and a vocabulary (got {}, {}, {})", num_documents, document_length,
             vocab_size);
}

void MockDocuments::read(int64_t doc, int64_t offset, std::span<int32_t> out) const {
  HONE_ASSERT(doc >= 0 && doc < num_documents_ && offset + int64_t(out.size()) <= document_length_);
  const auto r = philox4x32(seed_, uint64_t(doc), random_stream(RandomUse::mock_documents, 0));
  const int64_t start = int64_t(r[0] % uint64_t(vocab_size_));
  const int64_t stride = 1 + int64_t(r[1] % 7);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = int32_t((start + stride * (offset + int64_t(i))) % vocab_size_);
  }
}

std::string MockDocuments::describe() const {
  return fmt::format("mock data ({} documents of {} tokens)", num_documents_, document_length_);
}

InMemoryDocuments::InMemoryDocuments(std::vector<std::vector<int32_t>> documents) : documents_(std::move(documents)) {}

void InMemoryDocuments::read(int64_t doc, int64_t offset, std::span<int32_t> out) const {
  const auto& d = documents_[size_t(doc)];
  HONE_ASSERT(offset >= 0 && offset + int64_t(out.size()) <= int64_t(d.size()));
  std::copy_n(d.begin() + offset, out.size(), out.begin());
}

std::string InMemoryDocuments::describe() const { return fmt::format("{} in-memory documents", documents_.size()); }

}  // namespace hone::data
