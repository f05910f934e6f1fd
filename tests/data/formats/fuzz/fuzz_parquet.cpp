// libFuzzer target: a Parquet file, every column of every row group read.
#include <cstring>
#include <vector>

#include "hone/core/error.hpp"
#include "hone/data/formats/parquet.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hone::data;
  std::vector<std::byte> bytes(size);
  if (size > 0) std::memcpy(bytes.data(), data, size);
  try {
    const ParquetFile file(std::move(bytes), "fuzz.parquet");
    size_t values = 0;
    for (size_t g = 0; g < file.row_groups(); ++g) {
      for (const std::string& column : file.column_names()) {
        try {
          for (const auto& row : file.read_rows(g, {column})) values += row.size();
        } catch (const hone::Error&) {
        }
      }
    }
    if (values == size_t(-1)) return 1;  // keeps the reads from being optimised away
  } catch (const hone::Error&) {
  }
  return 0;
}
