#pragma once
// What `hone preprocess` writes tokenized documents into: a Megatron indexed
// dataset or MDS shards. Documents go in input order; OrderedDocumentSink
// (ordered_sink.hpp) restores that order when several threads tokenize.
#include <cstdint>
#include <span>

namespace hone::data {

class TokenWriter {
 public:
  virtual ~TokenWriter() = default;

  // One document. `sequence_lengths` splits it into sequences (Megatron's
  // --split-sentences); empty means the whole document is one sequence.
  virtual void add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths = {}) = 0;
  // Completes the output and moves it into place. Without finish() (an error, an
  // exception, a crash) no file with a final name appears.
  virtual void finish() = 0;
};

}  // namespace hone::data
