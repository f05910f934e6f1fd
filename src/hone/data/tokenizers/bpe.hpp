#pragma once
// BpeModel: the byte-pair-encoding step shared by every BPE format. A piece of text
// (one pre-token) starts as a sequence of symbols, single bytes or single UTF-8
// characters; the adjacent pair with the lowest merge rank is merged, leftmost
// first among equals, until no pair has a rank. This is what GPT-2's encoder.py,
// tiktoken (rank of the concatenation) and HF tokenizers (rank of the merge rule)
// all compute. Merge-rule formats (GPT-2 files, tokenizer.json) load their rules
// as (left, right) -> (rank, merged); tiktoken ranks are looked up by the bytes of
// the concatenation, as tiktoken itself does.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hone {

// Open addressing from byte strings to ids; keys live in one buffer.
class StringIdMap {
 public:
  // Returns false (and keeps the old id) when `key` is already present.
  bool insert(std::string_view key, int32_t id);
  std::optional<int32_t> find(std::string_view key) const;

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, length = 0;
    int32_t id = -1;  // -1: empty
  };
  void grow();
  std::vector<Slot> slots_;
  std::string keys_;
  size_t count_ = 0;
};

// Open addressing from (left id, right id) to a 64-bit value.
class PairMap {
 public:
  static constexpr uint64_t kNone = ~0ull;
  void reserve(size_t count);
  void assign(int32_t left, int32_t right, uint64_t value);  // inserts or replaces
  uint64_t find(int32_t left, int32_t right) const {
    if (slots_.empty()) return kNone;
    const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
    for (size_t i = index(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == kEmpty) return kNone;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  struct Slot {
    uint64_t key = kEmpty;
    uint64_t value = kNone;
  };
  size_t index(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  void grow();
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t count_ = 0;
};

uint64_t hash_bytes(std::string_view bytes);

class BpeModel {
 public:
  enum class Symbols {
    bytes,  // byte-level BPE: every byte has a token (GPT-2, tiktoken, Llama 3, Qwen)
    chars,  // SentencePiece-style: UTF-8 characters, unknown ones as <0xXX> byte tokens or unk
  };
  struct Options {
    Symbols symbols = Symbols::bytes;
    // A piece that is itself a token is that token, merges or not (tiktoken; HF ignore_merges).
    bool whole_piece_lookup = false;
    // tiktoken: no merge rules; two adjacent parts merge when their concatenation is
    // a token, lowest id (rank) first. Bytes only.
    bool rank_by_concatenation = false;
    bool byte_fallback = false;  // chars: unknown characters become <0xXX> tokens
    std::optional<int32_t> unk_id;  // chars: otherwise they become unk (or are dropped without one)
    bool fuse_unk = false;          // consecutive unks become one
  };

  BpeModel();
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Token `id` stands for `bytes`; false if the id or the bytes already have a token.
  bool add_token(int32_t id, std::string_view bytes);
  std::optional<int32_t> find(std::string_view bytes) const { return vocab_.find(bytes); }
  // Merging left+right gives `merged`; lower ranks merge first. A pair given twice
  // keeps its last rank, as GPT-2's encoder.py and HF tokenizers (a map built in
  // order) do.
  void add_merge(int32_t left, int32_t right, int32_t merged, uint32_t rank) {
    merges_.assign(left, right, (uint64_t(rank) << 32) | uint32_t(merged));
  }
  void reserve_merges(size_t count) { merges_.reserve(count); }
  // Call once all tokens and merges are in; throws hone::Error (naming `where`) if
  // byte-level symbols lack a token for some byte.
  void finalize(const Options& options, std::string_view where);

  // Appends the ids of one piece to `out`. Results for short pieces are cached per thread.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  // SentencePiece-style vocabularies (chars) where no token has U+2581 right after
  // another character: no merge can join the two sides of such a place, so text may
  // be cut there into independent pieces (which the cache then serves).
  bool splits_before_metaspace() const { return splits_before_metaspace_; }

  int32_t size() const { return int32_t(tokens_.size()); }  // one more than the largest id
  bool has_token(int32_t id) const { return id >= 0 && id < size() && present_[size_t(id)]; }
  const std::string& token(int32_t id) const { return tokens_[size_t(id)]; }

 private:
  void encode_uncached(std::string_view piece, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  // `rank(left, right, begin, end)`: (rank << 32 | merged id) of merging two adjacent
  // symbols that cover piece bytes [begin, end), or PairMap::kNone.
  template <typename Rank>
  static void merge_small(std::vector<int32_t>& symbols, size_t piece_size, const Rank& rank);
  template <typename Rank>
  static void merge_large(std::vector<int32_t>& symbols, size_t piece_size, const Rank& rank);

  std::vector<std::string> tokens_;
  std::vector<bool> present_;
  StringIdMap vocab_;
  PairMap merges_;
  Options options_;
  int32_t byte_ids_[256];           // bytes: the token of each byte
  int32_t fallback_ids_[256];       // chars: the <0xXX> token of each byte, -1 if none
  uint64_t uid_;                    // tells this model's cache entries apart
  bool splits_before_metaspace_ = false;
};

}  // namespace hone
