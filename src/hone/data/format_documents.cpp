#include "hone/data/format_documents.hpp"

#include <algorithm>
#include <filesystem>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include "hone/core/text.hpp"

namespace hone::data {

MegatronDocuments::MegatronDocuments(const std::string& prefix) : prefix_(prefix), dataset_(prefix) {
  HONE_CHECK(dataset_.dtype() == MegatronDType::u16 || dataset_.dtype() == MegatronDType::i32,
             "{}.idx: holds {} tokens; training reads uint16 or int32", prefix, megatron_dtype_name(dataset_.dtype()));
}

void MegatronDocuments::read(int64_t doc, int64_t offset, std::span<int32_t> out) const {
  auto copy = [&](auto tokens) {
    HONE_ASSERT(offset >= 0 && size_t(offset) + out.size() <= tokens.size());
    std::copy_n(tokens.begin() + offset, out.size(), out.begin());
  };
  if (dataset_.dtype() == MegatronDType::u16) copy(dataset_.sequence<uint16_t>(uint64_t(doc)));
  else copy(dataset_.sequence<int32_t>(uint64_t(doc)));
}

std::string MegatronDocuments::describe() const {
  return fmt::format("{} ({} documents)", prefix_, dataset_.sequence_count());
}

MdsDocuments::MdsDocuments(const std::string& dir, std::string bytes_dtype)
    : dir_(dir), dataset_(dir), bytes_dtype_(std::move(bytes_dtype)) {
  for (const MdsShardInfo& shard : dataset_.shards()) {
    const std::vector<std::string>& columns = shard.column_names;
    if (std::find(columns.begin(), columns.end(), "tokens") != columns.end()) continue;
    std::string name = dir;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    HONE_CHECK(std::find(columns.begin(), columns.end(), "text") == columns.end(),
               "{}: holds text (a 'text' column), not token ids: tokenize it once with `hone preprocess --input {} "
               "--output-prefix {}_tokens --format mds --tokenizer-model TOKENIZER --append-eod` and train on {}_tokens",
               dir, name, name, name);
    fail("{}: shard {} has no 'tokens' column (its columns: {}); pretraining reads token ids from 'tokens'", dir,
         shard.raw_data.basename, fmt::join(columns, ", "));
  }
  lengths_.reserve(size_t(dataset_.size()));
  for (uint64_t i = 0; i < dataset_.size(); ++i) lengths_.push_back(int64_t(dataset_.tokens(i, bytes_dtype_).size()));
}

void MdsDocuments::read(int64_t doc, int64_t offset, std::span<int32_t> out) const {
  const std::vector<int32_t> tokens = dataset_.tokens(uint64_t(doc), bytes_dtype_);
  HONE_ASSERT(offset >= 0 && size_t(offset) + out.size() <= tokens.size());
  std::copy_n(tokens.begin() + offset, out.size(), out.begin());
}

std::string MdsDocuments::describe() const { return fmt::format("{} ({} samples)", dir_, lengths_.size()); }

namespace {

// llm.c's data shard headers: magic, version, and the token size they mean.
struct LlmcShard {
  int32_t magic, version;
  size_t token_bytes;
  const char* model;
};
constexpr LlmcShard kLlmcShards[] = {{20240520, 1, 2, "GPT-2"}, {20240801, 7, 4, "Llama 3"}};
constexpr size_t kLlmcHeaderBytes = 256 * sizeof(int32_t);

}  // namespace

TokenFileDocuments::TokenFileDocuments(const std::string& path, std::optional<int64_t> eod, int64_t vocab_size)
    : file_(path) {
  // hone preprocess's (Megatron's) PREFIX.bin is no token file: its tokens may be
  // int32, and its index says where documents begin.
  if (const std::filesystem::path bin(path); bin.extension() == ".bin") {
    const std::filesystem::path index = std::filesystem::path(bin).replace_extension(".idx");
    HONE_CHECK(!std::filesystem::exists(index),
               "{}: a Megatron .bin file ({} is beside it): dataset.type=megatron dataset.path={} reads it with its "
               "index (nanoGPT's token files have none)",
               path, index.string(), std::filesystem::path(bin).replace_extension().string());
  }
  const std::span<const std::byte> bytes = file_.bytes();
  const int32_t magic = bytes.size() >= sizeof(int32_t) ? load_le<int32_t>(bytes.data()) : 0;
  for (const LlmcShard& shard : kLlmcShards) {
    if (magic != shard.magic) continue;
    HONE_CHECK(bytes.size() >= kLlmcHeaderBytes,
               "{}: starts as an llm.c data shard (magic {}) but is {} bytes, shorter than its {}-byte header", path,
               magic, bytes.size(), kLlmcHeaderBytes);
    const int32_t version = load_le<int32_t>(bytes.data() + 4);
    HONE_CHECK(version == shard.version, "{}: an llm.c data shard (magic {}) of version {}, where {}'s is {}", path,
               magic, version, shard.model, shard.version);
    const int64_t count = load_le<int32_t>(bytes.data() + 8);
    HONE_CHECK(count >= 0 && uint64_t(count) * shard.token_bytes == bytes.size() - kLlmcHeaderBytes,
               "{}: its llm.c header says {} tokens of {} bytes, but {} bytes follow it", path, count,
               shard.token_bytes, bytes.size() - kLlmcHeaderBytes);
    format_ = shard.token_bytes == 2 ? "llm.c GPT-2 shard" : "llm.c Llama 3 shard";
    header_bytes_ = kLlmcHeaderBytes;
    token_bytes_ = shard.token_bytes;
    break;
  }
  HONE_CHECK(header_bytes_ > 0 || bytes.size() % 2 == 0,
             "{}: {} bytes, not a whole number of uint16 tokens (nanoGPT's train.bin and val.bin), nor an llm.c data "
             "shard (its header starts with 20240520 or 20240801)",
             path, bytes.size());
  tokens_ = int64_t((bytes.size() - header_bytes_) / token_bytes_);
  HONE_CHECK(tokens_ > 0, "{}: holds no tokens", path);
  starts_.push_back(0);
  for (int64_t i = 0; i < tokens_; ++i) {
    const int64_t id = token(i);
    if (vocab_size > 0 && id >= vocab_size) {
      fail("{}: token id {} at token {} (document {}) is outside the model's vocabulary of {} (tokenized for another "
           "model?)",
           path, id, i, starts_.size() - 1, vocab_size);
    }
    if (!eod || id != *eod) continue;
    ++eod_count_;
    if (i + 1 < tokens_) starts_.push_back(i + 1);
  }
  starts_.push_back(tokens_);
}

int64_t TokenFileDocuments::token(int64_t i) const {
  const std::byte* at = file_.bytes().data() + header_bytes_ + size_t(i) * token_bytes_;
  return token_bytes_ == 2 ? int64_t(load_le<uint16_t>(at)) : int64_t(load_le<uint32_t>(at));
}

void TokenFileDocuments::read(int64_t doc, int64_t offset, std::span<int32_t> out) const {
  const int64_t first = starts_[size_t(doc)] + offset;
  HONE_ASSERT(offset >= 0 && first + int64_t(out.size()) <= starts_[size_t(doc) + 1]);
  // A uint32 token past int32's range is read as a negative id, which the stream's vocabulary check names.
  for (size_t i = 0; i < out.size(); ++i) out[i] = int32_t(token(first + int64_t(i)));
}

std::string TokenFileDocuments::describe() const {
  return fmt::format("{} ({}, {} tokens, {} {})", file_.path(), format_, tokens_, num_documents(),
                     plural(num_documents(), "document"));
}

}  // namespace hone::data
