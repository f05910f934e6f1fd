#pragma once
// The on-disk datasets as DocumentSources for the pretraining stream.
#include <memory>

#include "hone/data/documents.hpp"
#include "hone/data/formats/mds.hpp"
#include "hone/data/formats/megatron.hpp"

namespace hone::data {

// A Megatron indexed dataset; each sequence is a document (preprocess writes one
// sequence per document unless sentences are split).
class MegatronDocuments final : public DocumentSource {
 public:
  explicit MegatronDocuments(const std::string& prefix);
  int64_t num_documents() const override { return int64_t(dataset_.sequence_count()); }
  int64_t document_length(int64_t doc) const override { return int64_t(dataset_.sequence_length(uint64_t(doc))); }
  void read(int64_t doc, int64_t offset, std::span<int32_t> out) const override;
  std::string describe() const override;

 private:
  std::string prefix_;
  MegatronDataset dataset_;
};

// MDS shards with a `tokens` column (an integer NDArray, or raw `bytes` integers of
// `bytes_dtype`, see decode_mds_tokens); each sample is a document. Sample lengths
// are read once when opened (decompressing zstd shards), since packing needs them
// all. Shards of text (LLM Foundry's `text` column, tokenized on the fly there) are
// an error that says how to tokenize them once with hone preprocess.
class MdsDocuments final : public DocumentSource {
 public:
  explicit MdsDocuments(const std::string& dir, std::string bytes_dtype = std::string(kDefaultBytesTokenType));
  int64_t num_documents() const override { return int64_t(lengths_.size()); }
  int64_t document_length(int64_t doc) const override { return lengths_[size_t(doc)]; }
  void read(int64_t doc, int64_t offset, std::span<int32_t> out) const override;
  std::string describe() const override;

 private:
  std::string dir_;
  MdsDataset dataset_;
  std::string bytes_dtype_;
  std::vector<int64_t> lengths_;
};

}  // namespace hone::data
