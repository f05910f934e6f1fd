#pragma once
// Token documents with random access: what the pretraining stream samples from.
// Megatron indexed datasets, MDS shards and generated (mock) data implement it.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hone::data {

class DocumentSource {
 public:
  virtual ~DocumentSource() = default;
  virtual int64_t num_documents() const = 0;
  virtual int64_t document_length(int64_t doc) const = 0;
  // Copies tokens [offset, offset + out.size()) of document `doc` into out.
  virtual void read(int64_t doc, int64_t offset, std::span<int32_t> out) const = 0;
  virtual std::string describe() const = 0;  // for logs and error messages
};

// Documents whose tokens are generated from (seed, document): each is an
// arithmetic progression modulo the vocabulary with a per-document start and
// stride, so a model can learn to continue it and its loss falls far below
// ln(vocab). For tests, benchmarks and trying a config without data.
class MockDocuments final : public DocumentSource {
 public:
  MockDocuments(int64_t num_documents, int64_t document_length, int64_t vocab_size, uint64_t seed);
  int64_t num_documents() const override { return num_documents_; }
  int64_t document_length(int64_t) const override { return document_length_; }
  void read(int64_t doc, int64_t offset, std::span<int32_t> out) const override;
  std::string describe() const override;

 private:
  int64_t num_documents_, document_length_, vocab_size_;
  uint64_t seed_;
};

// Documents held in memory (tests, small corpora).
class InMemoryDocuments final : public DocumentSource {
 public:
  explicit InMemoryDocuments(std::vector<std::vector<int32_t>> documents);
  int64_t num_documents() const override { return int64_t(documents_.size()); }
  int64_t document_length(int64_t doc) const override { return int64_t(documents_[size_t(doc)].size()); }
  void read(int64_t doc, int64_t offset, std::span<int32_t> out) const override;
  std::string describe() const override;

 private:
  std::vector<std::vector<int32_t>> documents_;
};

}  // namespace hone::data
