// libFuzzer target: a Megatron .idx followed by its .bin. The header's counts say
// where the index ends; when they point past the input, all of it is the index.
#include <cstring>
#include <vector>

#include "hone/data/formats/megatron.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hone::data;
  size_t idx_size = size;
  if (size >= kMegatronHeaderBytes) {
    uint64_t n, d;
    std::memcpy(&n, data + 18, 8);
    std::memcpy(&d, data + 26, 8);
    const unsigned __int128 need = kMegatronHeaderBytes + (unsigned __int128)n * 12 + (unsigned __int128)d * 8;
    if (need <= size) idx_size = size_t(need);
  }
  // The .bin goes to 8-byte aligned memory, as a mapping would be.
  std::vector<uint64_t> bin((size - idx_size + 7) / 8);
  if (size > idx_size) std::memcpy(bin.data(), data + idx_size, size - idx_size);
  try {
    MegatronDataset ds({reinterpret_cast<const std::byte*>(data), idx_size},
                       {reinterpret_cast<const std::byte*>(bin.data()), size - idx_size}, "fuzz.idx", "fuzz.bin");
    uint64_t sum = 0;
    for (uint64_t i = 0; i < ds.sequence_count(); ++i) {
      if (ds.dtype() == MegatronDType::u16)
        for (uint16_t t : ds.sequence<uint16_t>(i)) sum += t;
      try {
        for (int32_t t : ds.tokens(i)) sum += uint64_t(t);
      } catch (const hone::Error&) {
      }
    }
    for (uint64_t d = 0; d < ds.document_count(); ++d) {
      const auto [first, last] = ds.document_sequences(d);
      if (first > last || last > ds.sequence_count()) __builtin_trap();
    }
    if (sum == 1) return 0;  // keeps the reads from being optimised away
  } catch (const hone::Error&) {
  }
  return 0;
}
