#include "hone/data/format_documents.hpp"

#include <algorithm>
#include <fmt/core.h>
#include <fmt/ranges.h>

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

}  // namespace hone::data
