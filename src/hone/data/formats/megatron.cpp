#include "hone/data/formats/megatron.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "hone/io/atomic_file.hpp"

namespace hone::data {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
// Tokens are buffered so that a document costs no system call.
constexpr size_t kFlushBytes = size_t(1) << 20;

bool is_integer(MegatronDType dtype) { return dtype != MegatronDType::f32 && dtype != MegatronDType::f64; }

template <typename T>
void append(std::vector<std::byte>& out, T value) {
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), p, p + sizeof value);
}

}  // namespace

size_t megatron_dtype_size(MegatronDType dtype) {
  switch (dtype) {
    case MegatronDType::u8:
    case MegatronDType::i8: return 1;
    case MegatronDType::i16:
    case MegatronDType::u16: return 2;
    case MegatronDType::i32:
    case MegatronDType::f32: return 4;
    case MegatronDType::i64:
    case MegatronDType::f64: return 8;
  }
  HONE_ASSERT(false);
}

std::string_view megatron_dtype_name(MegatronDType dtype) {
  switch (dtype) {
    case MegatronDType::u8: return "uint8";
    case MegatronDType::i8: return "int8";
    case MegatronDType::i16: return "int16";
    case MegatronDType::i32: return "int32";
    case MegatronDType::i64: return "int64";
    case MegatronDType::f64: return "float64";
    case MegatronDType::f32: return "float32";
    case MegatronDType::u16: return "uint16";
  }
  HONE_ASSERT(false);
}

MegatronDType megatron_dtype_for_vocab(uint64_t vocab_size) {
  return vocab_size < 65500 ? MegatronDType::u16 : MegatronDType::i32;
}

std::string megatron_output_prefix(const std::string& prefix, const std::string& key, bool split_sentences) {
  return fmt::format("{}_{}_{}", prefix, key, split_sentences ? "sentence" : "document");
}

// ---------------------------------------------------------------------------------------------
// Writer

MegatronWriter::MegatronWriter(std::string prefix, MegatronDType dtype, uint64_t vocab_size)
    : prefix_(std::move(prefix)), dtype_(dtype) {
  HONE_CHECK(dtype == MegatronDType::u16 || dtype == MegatronDType::i32,
             "{}.bin: hone writes Megatron token files as uint16 or int32, not {}", prefix_,
             megatron_dtype_name(dtype));
  HONE_CHECK(dtype != MegatronDType::u16 || vocab_size <= 65536,
             "{}.bin: a vocabulary of {} tokens does not fit uint16 (ids 0..65535); use int32", prefix_, vocab_size);
  HONE_CHECK(vocab_size <= uint64_t(std::numeric_limits<int32_t>::max()) + 1,
             "{}.bin: a vocabulary of {} tokens does not fit int32", prefix_, vocab_size);
  bin_ = std::make_unique<AtomicFile>(prefix_ + ".bin");
  buffer_.reserve(2 * kFlushBytes);
}

MegatronWriter::~MegatronWriter() = default;

void MegatronWriter::add_document(std::span<const int32_t> tokens, std::span<const int32_t> sequence_lengths) {
  HONE_ASSERT(!finished_);
  const uint64_t document = documents();
  const int32_t max_id = dtype_ == MegatronDType::u16 ? 65535 : std::numeric_limits<int32_t>::max();
  for (size_t i = 0; i < tokens.size(); ++i) {
    HONE_CHECK(tokens[i] >= 0 && tokens[i] <= max_id,
               "{}.bin: document {} has token id {} at position {}, outside {} (0..{})", prefix_, document, tokens[i],
               i, megatron_dtype_name(dtype_), max_id);
  }
  if (sequence_lengths.empty()) {
    HONE_CHECK(tokens.size() <= size_t(std::numeric_limits<int32_t>::max()),
               "{}.bin: document {} has {} tokens; a Megatron sequence holds at most 2^31-1", prefix_, document,
               tokens.size());
    if (!tokens.empty()) lengths_.push_back(int32_t(tokens.size()));
  } else {
    uint64_t total = 0;
    for (int32_t length : sequence_lengths) {
      HONE_CHECK(length >= 0, "{}.bin: document {} has a sequence of negative length {}", prefix_, document, length);
      total += uint64_t(length);
    }
    HONE_CHECK(total == tokens.size(), "{}.bin: the sequence lengths of document {} add up to {}, it has {} tokens",
               prefix_, document, total, tokens.size());
    lengths_.insert(lengths_.end(), sequence_lengths.begin(), sequence_lengths.end());
  }
  document_ends_.push_back(int64_t(lengths_.size()));
  const size_t item = megatron_dtype_size(dtype_);
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t n = std::min(tokens.size() - begin, kFlushBytes / item);
    const size_t at = buffer_.size();
    buffer_.resize(at + n * item);
    if (dtype_ == MegatronDType::u16) {
      for (size_t i = 0; i < n; ++i) {
        const auto t = uint16_t(tokens[begin + i]);
        std::memcpy(buffer_.data() + at + i * 2, &t, 2);
      }
    } else {
      std::memcpy(buffer_.data() + at, tokens.data() + begin, n * 4);
    }
    begin += n;
    if (buffer_.size() >= kFlushBytes) flush();
  }
}

void MegatronWriter::flush() {
  bin_->write(buffer_.data(), buffer_.size());
  buffer_.clear();
}

void MegatronWriter::finish() {
  HONE_ASSERT(!finished_);
  flush();
  std::vector<std::byte> idx;
  idx.reserve(kMegatronHeaderBytes + lengths_.size() * 12 + document_ends_.size() * 8);
  const auto* magic = reinterpret_cast<const std::byte*>(kMagic);
  idx.insert(idx.end(), magic, magic + sizeof kMagic);
  append(idx, kVersion);
  append(idx, uint8_t(dtype_));
  append(idx, uint64_t(lengths_.size()));
  append(idx, uint64_t(document_ends_.size()));
  for (int32_t length : lengths_) append(idx, length);
  int64_t pointer = 0;
  for (int32_t length : lengths_) {
    append(idx, pointer);
    pointer += int64_t(length) * int64_t(megatron_dtype_size(dtype_));
  }
  for (int64_t end : document_ends_) append(idx, end);

  AtomicFile idx_file(prefix_ + ".idx");
  idx_file.write(idx.data(), idx.size());
  // An index left from an earlier run must not pair with the new .bin if we stop
  // between the two renames below.
  const std::string idx_path = prefix_ + ".idx";
  HONE_CHECK(::unlink(idx_path.c_str()) == 0 || errno == ENOENT, "{}: cannot replace: {}", idx_path,
             std::strerror(errno));
  bin_->commit();
  idx_file.commit();
  finished_ = true;
}

// ---------------------------------------------------------------------------------------------
// Reader

MegatronDataset::MegatronDataset(const std::string& prefix)
    : idx_file_(std::make_unique<MappedFile>(prefix + ".idx")),
      bin_file_(std::make_unique<MappedFile>(prefix + ".bin")),
      idx_(idx_file_->bytes()),
      bin_(bin_file_->bytes()),
      idx_name_(prefix + ".idx"),
      bin_name_(prefix + ".bin") {
  validate();
}

MegatronDataset::MegatronDataset(std::span<const std::byte> idx, std::span<const std::byte> bin,
                                 std::string idx_name, std::string bin_name)
    : idx_(idx), bin_(bin), idx_name_(std::move(idx_name)), bin_name_(std::move(bin_name)) {
  validate();
}

void MegatronDataset::validate() {
  const std::string& f = idx_name_;
  HONE_CHECK(idx_.size() >= kMegatronHeaderBytes,
             "{}: {} bytes is too short for a Megatron index (the header alone is {} bytes)", f, idx_.size(),
             kMegatronHeaderBytes);
  HONE_CHECK(std::memcmp(idx_.data(), kMagic, sizeof kMagic) == 0,
             "{}: bytes 0..8 are not the magic MMIDIDX\\0\\0 of a Megatron-LM mmap index", f);
  const uint64_t version = load_le<uint64_t>(idx_.data() + 9);
  HONE_CHECK(version == kVersion, "{}: version {} at byte 9, expected {}", f, version, kVersion);
  const uint8_t code = load_le<uint8_t>(idx_.data() + 17);
  HONE_CHECK(code >= 1 && code <= 8, "{}: dtype code {} at byte 17, expected 1..8", f, code);
  dtype_ = MegatronDType(code);
  const uint64_t n = load_le<uint64_t>(idx_.data() + 18);
  const uint64_t d = load_le<uint64_t>(idx_.data() + 26);
  // 12 bytes per sequence and 8 per document index, counted in 128 bits so that
  // absurd counts cannot wrap around.
  const uint64_t body = idx_.size() - kMegatronHeaderBytes;
  const unsigned __int128 need = (unsigned __int128)n * 12 + (unsigned __int128)d * 8;
  HONE_CHECK(need == body,
             "{}: the header (bytes 18..33) declares {} sequences and {} document indices, which need {} bytes after "
             "the header; the file has {} ({})",
             f, n, d, need >> 64 ? std::string("over 2^64") : std::to_string(uint64_t(need)), body,
             need > body ? "truncated?" : "bytes after the index: another file's end, or a wrong count?");
  HONE_CHECK(d >= 1, "{}: no document indices (byte 26); a Megatron index has at least the leading 0", f);
  sequences_ = n;
  documents_ = d - 1;

  const size_t item = megatron_dtype_size(dtype_);
  // Megatron writes the sequences back to back: each pointer is the end of the one before.
  uint64_t expected_pointer = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const size_t length_at = kMegatronHeaderBytes + i * 4, pointer_at = kMegatronHeaderBytes + n * 4 + i * 8;
    const int32_t length = load_le<int32_t>(idx_.data() + length_at);
    const int64_t pointer = load_le<int64_t>(idx_.data() + pointer_at);
    HONE_CHECK(length >= 0, "{}: sequence {} has length {} (byte {}), expected >= 0", f, i, length, length_at);
    HONE_CHECK(pointer >= 0 && uint64_t(pointer) % item == 0,
               "{}: sequence {} has pointer {} (byte {}), expected a non-negative multiple of {} ({})", f, i, pointer,
               pointer_at, item, megatron_dtype_name(dtype_));
    HONE_CHECK(uint64_t(pointer) <= bin_.size() && uint64_t(length) * item <= bin_.size() - uint64_t(pointer),
               "{}: sequence {} (pointer at byte {}) covers bytes {}..{} of {}, which has {} bytes (truncated?)", f, i,
               pointer_at, pointer, uint64_t(pointer) + uint64_t(length) * item, bin_name_, bin_.size());
    HONE_CHECK(uint64_t(pointer) == expected_pointer,
               "{}: sequence {} has pointer {} (byte {}), expected {} ({}; Megatron writes the sequences back to "
               "back: a damaged index, or one of other data?)",
               f, i, pointer, pointer_at, expected_pointer,
               i == 0 ? std::string("the start of the file") : fmt::format("where sequence {} ends", i - 1));
    expected_pointer += uint64_t(length) * item;
  }
  HONE_CHECK(expected_pointer == bin_.size(),
             "{}: its sequences end at byte {} of {}, which has {} bytes (bytes after them: the index of other data?)",
             f, expected_pointer, bin_name_, bin_.size());
  const size_t documents_at = kMegatronHeaderBytes + n * 12;
  int64_t previous = 0;
  for (uint64_t k = 0; k < d; ++k) {
    const int64_t end = load_le<int64_t>(idx_.data() + documents_at + k * 8);
    const bool ok = k == 0 ? end == 0 : (end >= previous && uint64_t(end) <= n);
    HONE_CHECK(ok, "{}: document index {} (byte {}) is {}, expected {}", f, k, documents_at + k * 8, end,
               k == 0 ? std::string("0") : fmt::format("a sequence number in {}..{}", previous, n));
    previous = end;
  }
  HONE_CHECK(uint64_t(previous) == n, "{}: the last document index (byte {}) is {}, expected the sequence count {}", f,
             documents_at + (d - 1) * 8, previous, n);
}

void MegatronDataset::check_index(uint64_t i, uint64_t count, const char* what) const {
  HONE_CHECK(i < count, "{}: {} {} out of range (the dataset has {})", idx_name_, what, i, count);
}

uint64_t MegatronDataset::sequence_length(uint64_t i) const {
  check_index(i, sequences_, "sequence");
  return uint64_t(load_le<int32_t>(idx_.data() + kMegatronHeaderBytes + i * 4));
}

uint64_t MegatronDataset::sequence_pointer(uint64_t i) const {
  check_index(i, sequences_, "sequence");
  return uint64_t(load_le<int64_t>(idx_.data() + kMegatronHeaderBytes + sequences_ * 4 + i * 8));
}

std::pair<uint64_t, uint64_t> MegatronDataset::document_sequences(uint64_t d) const {
  check_index(d, documents_, "document");
  const std::byte* p = idx_.data() + kMegatronHeaderBytes + sequences_ * 12 + d * 8;
  return {uint64_t(load_le<int64_t>(p)), uint64_t(load_le<int64_t>(p + 8))};
}

std::vector<int32_t> MegatronDataset::tokens(uint64_t i) const {
  HONE_CHECK(is_integer(dtype_), "{}: holds {} values, not token ids", idx_name_, megatron_dtype_name(dtype_));
  const uint64_t length = sequence_length(i);
  const std::byte* p = bin_.data() + sequence_pointer(i);
  std::vector<int32_t> out(length);
  auto convert = [&]<typename T>(T) {
    for (uint64_t k = 0; k < length; ++k) {
      const T v = load_le<T>(p + k * sizeof(T));
      HONE_CHECK(v >= 0 && int64_t(v) <= std::numeric_limits<int32_t>::max(),
                 "{}: token {} of sequence {} (byte {}) is {}, not a token id", bin_name_, k, i,
                 sequence_pointer(i) + k * sizeof(T), int64_t(v));
      out[k] = int32_t(v);
    }
  };
  switch (dtype_) {
    case MegatronDType::u8: convert(uint8_t()); break;
    case MegatronDType::i8: convert(int8_t()); break;
    case MegatronDType::i16: convert(int16_t()); break;
    case MegatronDType::u16: convert(uint16_t()); break;
    case MegatronDType::i32: convert(int32_t()); break;
    case MegatronDType::i64: convert(int64_t()); break;
    case MegatronDType::f32:
    case MegatronDType::f64: HONE_ASSERT(false);
  }
  return out;
}

}  // namespace hone::data
