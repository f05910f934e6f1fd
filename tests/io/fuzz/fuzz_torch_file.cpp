// libFuzzer target: a torch.save archive in memory. Parsing either fails with a
// hone::Error or yields tensors that lie inside the input with the size their
// dtype and shape need, each listed once; anything else (another exception, a
// crash, a hang, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "hone/io/torch_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto contents = hone::TorchFile::parse(file, "fuzz.pt");
    if (contents.order.size() != contents.entries.size() + contents.unreadable.size()) __builtin_trap();
    for (const auto& [name, e] : contents.entries) {
      if (e.bytes.size() != size_t(e.shape.numel()) * hone::dtype_size(e.dtype)) __builtin_trap();
      if (e.bytes.empty()) continue;
      if (e.bytes.data() < file.data() || e.bytes.data() + e.bytes.size() > file.data() + file.size()) {
        __builtin_trap();
      }
      volatile std::byte sink = e.bytes.front() ^ e.bytes.back();  // ASan checks the bounds
      (void)sink;
    }
  } catch (const hone::Error&) {
  }
  return 0;
}
