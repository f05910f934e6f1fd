#pragma once
// The on-disk datasets as DocumentSources for the pretraining stream.
#include <memory>
#include <optional>

#include "hone/data/documents.hpp"
#include "hone/data/formats/mapped_file.hpp"
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

// A file of token ids one after another, as nanoGPT and llm.c train on:
//  - nanoGPT's train.bin / val.bin (its prepare.py scripts write a numpy uint16
//    array with tofile): the tokens alone;
//  - llm.c's data shards (dev/data/data_common.py's write_datafile): a header of
//    256 int32 (magic 20240520 and version 1 for GPT-2's uint16 tokens, 20240801
//    and 7 for Llama 3's uint32 ones; then the token count), then the tokens.
// Documents end after each `eod` token (GPT-2's <|endoftext|>, which both put
// between documents); without one the file is a single document. The file is
// read once when opened, for the documents and, with `vocab_size` > 0, for an
// id past the vocabulary (an error naming it, before any training).
class TokenFileDocuments final : public DocumentSource {
 public:
  TokenFileDocuments(const std::string& path, std::optional<int64_t> eod, int64_t vocab_size = 0);
  int64_t num_documents() const override { return int64_t(starts_.size()) - 1; }
  int64_t document_length(int64_t doc) const override { return starts_[size_t(doc) + 1] - starts_[size_t(doc)]; }
  void read(int64_t doc, int64_t offset, std::span<int32_t> out) const override;
  std::string describe() const override;
  // How many `eod` tokens the file holds (0 without one).
  int64_t eod_count() const { return eod_count_; }

 private:
  int64_t token(int64_t i) const;

  MappedFile file_;
  const char* format_ = "nanoGPT tokens";
  size_t header_bytes_ = 0, token_bytes_ = 2;
  int64_t tokens_ = 0, eod_count_ = 0;
  std::vector<int64_t> starts_;  // each document's first token, then the token count
};

}  // namespace hone::data
