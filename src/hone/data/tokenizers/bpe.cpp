#include "hone/data/tokenizers/bpe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <queue>
#include <span>

#include "hone/core/error.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone {

uint64_t hash_bytes(std::string_view bytes) {
  const char* p = bytes.data();
  size_t n = bytes.size();
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
  const auto mix = [](uint64_t x) {
    x ^= x >> 32;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 32;
    return x;
  };
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix(h ^ w) * 0x9E3779B97F4A7C15ull;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = mix(h ^ w) * 0x9E3779B97F4A7C15ull;
  }
  return mix(h);
}

// ---- StringIdMap ----

bool StringIdMap::insert(std::string_view key, int32_t id) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const uint64_t h = hash_bytes(key);
  const size_t mask = slots_.size() - 1;
  for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.id < 0) {
      s.hash = h;
      s.offset = uint32_t(keys_.size());
      s.length = uint32_t(key.size());
      s.id = id;
      keys_.append(key);
      ++count_;
      return true;
    }
    if (s.hash == h && std::string_view(keys_).substr(s.offset, s.length) == key) return false;
  }
}

std::optional<int32_t> StringIdMap::find(std::string_view key) const {
  if (slots_.empty()) return std::nullopt;
  const uint64_t h = hash_bytes(key);
  const size_t mask = slots_.size() - 1;
  for (size_t i = size_t(h) & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return std::nullopt;
    if (s.hash == h && s.length == key.size() && std::memcmp(keys_.data() + s.offset, key.data(), key.size()) == 0)
      return s.id;
  }
}

void StringIdMap::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(std::max<size_t>(16, old.size() * 2), Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    size_t i = size_t(s.hash) & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

// ---- PairMap ----

void PairMap::reserve(size_t count) {
  while ((count + 1) * 2 > slots_.size()) grow();
}

void PairMap::assign(int32_t left, int32_t right, uint64_t value) {
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  for (size_t i = index(key);; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.value = value;
      return;
    }
    if (s.key == kEmpty) {
      s.key = key;
      s.value = value;
      ++count_;
      return;
    }
  }
}

void PairMap::grow() {
  std::vector<Slot> old = std::move(slots_);
  const size_t size = std::max<size_t>(16, old.size() * 2);
  slots_.assign(size, Slot{});
  mask_ = size - 1;
  shift_ = 64 - __builtin_ctzll(size);
  for (const Slot& s : old) {
    if (s.key == kEmpty) continue;
    size_t i = index(s.key);
    while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

// ---- BpeModel ----

namespace {

std::atomic<uint64_t> next_model_uid{1};

// Per-thread cache of piece -> ids for the few models a thread uses at a time.
// Pieces repeat a lot in natural text (Zipf), so most are answered from here.
class PieceCache {
 public:
  static constexpr uint32_t kMaxPiece = 64;  // longer pieces are rare: not cached

  bool lookup(uint64_t hash, std::string_view piece, std::vector<int32_t>& out) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = size_t(hash) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.key_length == kEmpty) return false;
      if (s.hash == hash && s.key_length == piece.size() &&
          std::memcmp(keys_.data() + s.key_offset, piece.data(), piece.size()) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids_offset, ids_.begin() + s.ids_offset + s.ids_length);
        return true;
      }
    }
  }

  void insert(uint64_t hash, std::string_view piece, std::span<const int32_t> ids) {
    if (count_ + 1 > kMaxEntries) clear();
    const size_t mask = slots_.size() - 1;
    size_t i = size_t(hash) & mask;
    while (slots_[i].key_length != kEmpty) i = (i + 1) & mask;
    slots_[i] = Slot{hash, uint32_t(keys_.size()), uint32_t(piece.size()), uint32_t(ids_.size()),
                     uint32_t(ids.size())};
    keys_.append(piece);
    ids_.insert(ids_.end(), ids.begin(), ids.end());
    ++count_;
  }

  void clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    count_ = 0;
  }

  uint64_t owner = 0;
  uint64_t last_use = 0;

 private:
  static constexpr uint32_t kEmpty = ~0u;
  static constexpr size_t kMaxEntries = 1 << 16;
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_offset = 0, key_length = kEmpty, ids_offset = 0, ids_length = 0;
  };
  std::vector<Slot> slots_ = std::vector<Slot>(kMaxEntries * 2);
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t count_ = 0;
};

PieceCache& thread_cache(uint64_t uid) {
  constexpr int kCaches = 4;
  thread_local std::unique_ptr<PieceCache> caches[kCaches];
  thread_local uint64_t clock = 0;
  ++clock;
  int victim = 0;
  for (int i = 0; i < kCaches; ++i) {
    if (caches[i] && caches[i]->owner == uid) {
      caches[i]->last_use = clock;
      return *caches[i];
    }
    if (!caches[i] || (caches[victim] && caches[i]->last_use < caches[victim]->last_use)) victim = i;
  }
  if (!caches[victim]) caches[victim] = std::make_unique<PieceCache>();
  caches[victim]->clear();
  caches[victim]->owner = uid;
  caches[victim]->last_use = clock;
  return *caches[victim];
}

// Above this many symbols the quadratic scan gives way to a heap.
constexpr size_t kSmallPiece = 96;

}  // namespace

BpeModel::BpeModel() : uid_(next_model_uid.fetch_add(1)) {
  std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
  std::fill(std::begin(fallback_ids_), std::end(fallback_ids_), -1);
}

bool BpeModel::add_token(int32_t id, std::string_view bytes) {
  HONE_ASSERT(id >= 0);
  if (has_token(id) || !vocab_.insert(bytes, id)) return false;
  if (size_t(id) >= tokens_.size()) {
    tokens_.resize(size_t(id) + 1);
    present_.resize(size_t(id) + 1, false);
  }
  tokens_[size_t(id)] = std::string(bytes);
  present_[size_t(id)] = true;
  return true;
}

void BpeModel::finalize(const Options& options, std::string_view where) {
  HONE_ASSERT(!options.rank_by_concatenation || options.symbols == Symbols::bytes);
  options_ = options;
  if (options.symbols == Symbols::chars) {
    constexpr std::string_view kMetaspace = "\u2581";
    splits_before_metaspace_ = std::none_of(tokens_.begin(), tokens_.end(), [&](const std::string& t) {
      for (size_t p = t.find(kMetaspace, 1); p != std::string::npos; p = t.find(kMetaspace, p + 1))
        if (p < kMetaspace.size() || t.compare(p - kMetaspace.size(), kMetaspace.size(), kMetaspace) != 0) return true;
      return false;
    });
  }
  for (int b = 0; b < 256; ++b) {
    const char c = char(b);
    if (options.symbols == Symbols::bytes) {
      const auto id = vocab_.find(std::string_view(&c, 1));
      HONE_CHECK(id.has_value(), "{}: byte-level vocabulary has no token for byte 0x{:02X}", where, b);
      byte_ids_[b] = *id;
    } else {
      fallback_ids_[b] = vocab_.find(fmt::format("<0x{:02X}>", b)).value_or(-1);
    }
  }
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  symbols.clear();
  if (options_.symbols == Symbols::bytes) {
    for (const char c : piece) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
    return;
  }
  bool last_was_unk = false;
  for (size_t i = 0; i < piece.size();) {
    const size_t n = std::min<size_t>(size_t(utf8::char_length(static_cast<unsigned char>(piece[i]))),
                                      piece.size() - i);
    const std::string_view ch = piece.substr(i, n);
    i += n;
    if (const auto id = vocab_.find(ch)) {
      symbols.push_back(*id);
      last_was_unk = false;
      continue;
    }
    if (options_.byte_fallback &&
        std::all_of(ch.begin(), ch.end(), [&](char c) { return fallback_ids_[static_cast<unsigned char>(c)] >= 0; })) {
      for (const char c : ch) symbols.push_back(fallback_ids_[static_cast<unsigned char>(c)]);
      last_was_unk = false;
      continue;
    }
    if (!options_.unk_id) continue;  // HF drops unknown characters when there is no unk token
    if (!(options_.fuse_unk && last_was_unk)) symbols.push_back(*options_.unk_id);
    last_was_unk = true;
  }
}

template <typename Rank>
void BpeModel::merge_small(std::vector<int32_t>& symbols, size_t piece_size, const Rank& rank) {
  // ranks[i]: (rank << 32 | merged) of the pair starting at symbol i; the
  // smallest value is the lowest rank, and the first of equals is the leftmost.
  // starts[i]: the piece offset where symbol i begins (starts[n] = the end).
  thread_local std::vector<uint64_t> ranks;
  thread_local std::vector<uint32_t> starts;
  size_t n = symbols.size();
  ranks.resize(n);
  starts.resize(n + 1);
  // Initial symbols are one byte each, or (chars mode, where offsets are unused) anything.
  for (size_t i = 0; i <= n; ++i) starts[i] = uint32_t(std::min(i, piece_size));
  const auto pair = [&](size_t i) { return rank(symbols[i], symbols[i + 1], starts[i], starts[i + 2]); };
  for (size_t i = 0; i + 1 < n; ++i) ranks[i] = pair(i);
  while (n > 1) {
    size_t best = 0;
    uint64_t best_rank = PairMap::kNone;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (ranks[i] < best_rank) {
        best_rank = ranks[i];
        best = i;
      }
    }
    if (best_rank == PairMap::kNone) break;
    symbols[best] = int32_t(uint32_t(best_rank));
    std::copy(symbols.begin() + ptrdiff_t(best) + 2, symbols.begin() + ptrdiff_t(n), symbols.begin() + ptrdiff_t(best) + 1);
    std::copy(ranks.begin() + ptrdiff_t(best) + 2, ranks.begin() + ptrdiff_t(n), ranks.begin() + ptrdiff_t(best) + 1);
    std::copy(starts.begin() + ptrdiff_t(best) + 2, starts.begin() + ptrdiff_t(n) + 1, starts.begin() + ptrdiff_t(best) + 1);
    --n;
    if (best > 0) ranks[best - 1] = pair(best - 1);
    ranks[best] = best + 1 < n ? pair(best) : PairMap::kNone;
  }
  symbols.resize(n);
}

template <typename Rank>
void BpeModel::merge_large(std::vector<int32_t>& symbols, size_t piece_size, const Rank& rank) {
  // A doubly linked list over the symbols and a heap of candidate merges ordered
  // by (rank, position); stale candidates are recognised when popped. A symbol
  // keeps the piece offset of its first byte, its position.
  const size_t n = symbols.size();
  std::vector<uint32_t> prev(n), next(n);
  constexpr uint32_t kEnd = ~0u;
  for (size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? kEnd : uint32_t(i - 1);
    next[i] = i + 1 == n ? kEnd : uint32_t(i + 1);
  }
  struct Candidate {
    uint64_t rank;  // rank << 32 | merged
    uint32_t pos;
    int32_t left, right;
    bool operator>(const Candidate& o) const { return rank >> 32 != o.rank >> 32 ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](uint32_t pos) {
    const uint32_t q = next[pos];
    if (q == kEnd) return;
    const size_t end = next[q] == kEnd ? piece_size : std::min<size_t>(next[q], piece_size);
    const uint64_t r = rank(symbols[pos], symbols[q], std::min<size_t>(pos, piece_size), end);
    if (r != PairMap::kNone) heap.push(Candidate{r, pos, symbols[pos], symbols[q]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(uint32_t(i));
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const uint32_t q = next[c.pos];
    if (!alive[c.pos] || q == kEnd || symbols[c.pos] != c.left || symbols[q] != c.right) continue;
    symbols[c.pos] = int32_t(uint32_t(c.rank));
    alive[q] = false;
    next[c.pos] = next[q];
    if (next[q] != kEnd) prev[next[q]] = c.pos;
    if (prev[c.pos] != kEnd) push(prev[c.pos]);
    push(c.pos);
  }
  size_t out = 0;
  for (uint32_t i = 0; i != kEnd && i < n; i = next[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

void BpeModel::encode_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options_.whole_piece_lookup) {
    if (const auto id = vocab_.find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  initial_symbols(piece, symbols);
  if (options_.rank_by_concatenation) {
    const auto rank = [&](int32_t, int32_t, size_t begin, size_t end) {
      const auto id = vocab_.find(piece.substr(begin, end - begin));
      return id ? (uint64_t(uint32_t(*id)) << 32) | uint32_t(*id) : PairMap::kNone;
    };
    symbols.size() <= kSmallPiece ? merge_small(symbols, piece.size(), rank)
                                  : merge_large(symbols, piece.size(), rank);
  } else {
    const auto rank = [&](int32_t left, int32_t right, size_t, size_t) { return merges_.find(left, right); };
    symbols.size() <= kSmallPiece ? merge_small(symbols, piece.size(), rank)
                                  : merge_large(symbols, piece.size(), rank);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > PieceCache::kMaxPiece) {
    encode_uncached(piece, out);
    return;
  }
  PieceCache& cache = thread_cache(uid_);
  const uint64_t h = hash_bytes(piece);
  if (cache.lookup(h, piece, out)) return;
  const size_t before = out.size();
  encode_uncached(piece, out);
  cache.insert(h, piece, std::span<const int32_t>(out).subspan(before));
}

}  // namespace hone
