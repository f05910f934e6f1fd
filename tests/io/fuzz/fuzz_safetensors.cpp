// libFuzzer target: a safetensors file in memory. Parsing either fails with a
// hone::Error or yields entries that lie inside the input, with the size their
// dtype and shape need, without overlaps; anything else (another exception, a
// crash, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "hone/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto header = hone::SafetensorsFile::parse(file, "fuzz.safetensors");
    if (header.order.size() != header.entries.size()) __builtin_trap();
    const std::byte* previous_end = nullptr;
    for (const std::string& name : header.order) {
      const auto& e = header.entries.at(name);
      if (e.bytes.data() < file.data() || e.bytes.data() + e.bytes.size() > file.data() + file.size()) {
        __builtin_trap();
      }
      if (e.bytes.size() != size_t(e.shape.numel()) * hone::dtype_size(e.dtype)) __builtin_trap();
      if (previous_end != nullptr && e.bytes.data() < previous_end) __builtin_trap();
      previous_end = e.bytes.data() + e.bytes.size();
      volatile std::byte sink{};  // touch the first and last byte: ASan checks the bounds
      if (!e.bytes.empty()) sink = e.bytes.front() ^ e.bytes.back();
    }
  } catch (const hone::Error&) {
  }
  return 0;
}
