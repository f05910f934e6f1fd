#pragma once
// Megatron-LM indexed datasets (megatron/core/datasets/indexed_dataset.py):
// PREFIX.bin holds the tokens of all sequences back to back, PREFIX.idx says where
// each sequence starts and which sequences form a document. Layout in docs/formats.md.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/data/formats/mapped_file.hpp"
#include "hone/data/formats/token_writer.hpp"

namespace hone {
class AtomicFile;
}

namespace hone::data {

// The codes of Megatron's DType enum, as stored in byte 17 of the .idx.
enum class MegatronDType : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };

size_t megatron_dtype_size(MegatronDType dtype);
std::string_view megatron_dtype_name(MegatronDType dtype);  // numpy's name: "uint16", "int32", ...
// Megatron's DType.optimal_dtype: uint16 for vocabularies under 65500 tokens, else int32.
MegatronDType megatron_dtype_for_vocab(uint64_t vocab_size);
// "PREFIX_KEY_document" (or "_sentence"): the names tools/preprocess_data.py gives its outputs.
std::string megatron_output_prefix(const std::string& prefix, const std::string& key, bool split_sentences);

template <typename T>
constexpr MegatronDType megatron_dtype_of() {
  if constexpr (std::is_same_v<T, uint8_t>) return MegatronDType::u8;
  else if constexpr (std::is_same_v<T, int8_t>) return MegatronDType::i8;
  else if constexpr (std::is_same_v<T, int16_t>) return MegatronDType::i16;
  else if constexpr (std::is_same_v<T, int32_t>) return MegatronDType::i32;
  else if constexpr (std::is_same_v<T, int64_t>) return MegatronDType::i64;
  else if constexpr (std::is_same_v<T, double>) return MegatronDType::f64;
  else if constexpr (std::is_same_v<T, float>) return MegatronDType::f32;
  else {
    static_assert(std::is_same_v<T, uint16_t>, "not a Megatron dtype");
    return MegatronDType::u16;
  }
}

// magic (9) + version (8) + dtype (1) + sequence count (8) + document count (8).
inline constexpr size_t kMegatronHeaderBytes = 34;

// Streams tokens into PREFIX.bin.tmp.PID; finish() writes the index and renames
// both files into place. Memory use is 4 bytes per sequence plus 8 per document.
class MegatronWriter final : public TokenWriter {
 public:
  // `dtype` is uint16 or int32. A known vocab_size (> 0) is checked against it here,
  // before anything is written; token ids are checked as they come.
  MegatronWriter(std::string prefix, MegatronDType dtype, uint64_t vocab_size = 0);
  ~MegatronWriter() override;

  // An empty document adds a document boundary and no sequence, as Megatron's builder does.
  void add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths = {}) override;
  void finish() override;

  uint64_t documents() const { return document_ends_.size() - 1; }
  uint64_t sequences() const { return lengths_.size(); }

 private:
  void flush();

  std::string prefix_;
  MegatronDType dtype_;
  std::unique_ptr<AtomicFile> bin_;
  std::vector<std::byte> buffer_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_ends_{0};
  bool finished_ = false;
};

// A validated, memory-mapped Megatron dataset. Opening checks every length,
// pointer and document index against the file sizes, so reads cannot go out of bounds.
class MegatronDataset {
 public:
  explicit MegatronDataset(const std::string& prefix);  // PREFIX.idx and PREFIX.bin
  // The same checks over bytes in memory (tests, fuzzing); the names appear in errors.
  MegatronDataset(std::span<const std::byte> idx, std::span<const std::byte> bin, std::string idx_name,
                  std::string bin_name);

  MegatronDType dtype() const { return dtype_; }
  uint64_t sequence_count() const { return sequences_; }
  uint64_t document_count() const { return documents_; }
  uint64_t sequence_length(uint64_t i) const;
  // Byte offset of sequence i in the .bin.
  uint64_t sequence_pointer(uint64_t i) const;
  // Document d is sequences [first, second).
  std::pair<uint64_t, uint64_t> document_sequences(uint64_t d) const;

  // The tokens of sequence i, in place; T must be the dataset's dtype.
  template <typename T>
  std::span<const T> sequence(uint64_t i) const {
    HONE_CHECK(megatron_dtype_of<T>() == dtype_, "{}: holds {}, read as {}", idx_name_, megatron_dtype_name(dtype_),
               megatron_dtype_name(megatron_dtype_of<T>()));
    const std::byte* p = bin_.data() + sequence_pointer(i);
    HONE_ASSERT(reinterpret_cast<uintptr_t>(p) % alignof(T) == 0);
    return {reinterpret_cast<const T*>(p), size_t(sequence_length(i))};
  }
  // The tokens of sequence i as int32 (from any integer dtype; ids must fit).
  std::vector<int32_t> tokens(uint64_t i) const;

 private:
  void validate();
  void check_index(uint64_t i, uint64_t count, const char* what) const;

  std::unique_ptr<MappedFile> idx_file_, bin_file_;
  std::span<const std::byte> idx_, bin_;
  std::string idx_name_, bin_name_;
  MegatronDType dtype_ = MegatronDType::u16;
  uint64_t sequences_ = 0, documents_ = 0;
};

}  // namespace hone::data
