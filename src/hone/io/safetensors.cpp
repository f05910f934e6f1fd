#include "hone/io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "hone/core/json_text.hpp"
#include "hone/io/atomic_file.hpp"

namespace hone {

namespace {

// Headers beyond this are not real checkpoints (HF's own reader caps them too).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

}  // namespace

std::string safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f64: return "F64";
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::i64: return "I64";
    case DType::i32: return "I32";
    case DType::u16: return "U16";
    case DType::u8: return "U8";
    case DType::fp8_e4m3: return "F8_E4M3";
    case DType::fp8_e5m2: return "F8_E5M2";
  }
  HONE_ASSERT(false);
}

namespace {

std::optional<DType> held_dtype(const std::string& name) {
  for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::u16, DType::u8,
                  DType::fp8_e4m3, DType::fp8_e5m2}) {
    if (safetensors_dtype_name(d) == name) return d;
  }
  return std::nullopt;
}

// Element bytes of the safetensors dtypes hone has no DType for: a file may hold
// such tensors (GPT-2's BOOL attention masks) beside the weights a model takes.
std::optional<size_t> unheld_dtype_size(const std::string& name) {
  static const std::map<std::string, size_t> sizes = {{"BOOL", 1}, {"I8", 1}, {"I16", 2}, {"U32", 4}, {"U64", 8}};
  const auto found = sizes.find(name);
  return found == sizes.end() ? std::nullopt : std::optional<size_t>(found->second);
}

}  // namespace

DType parse_safetensors_dtype(const std::string& name, const std::string& context) {
  const std::optional<DType> dtype = held_dtype(name);
  HONE_CHECK(dtype, "{}: unsupported safetensors dtype '{}'", context, name);
  return *dtype;
}

SafetensorsFile::Header SafetensorsFile::parse(std::span<const std::byte> file, const std::string& path) {
  HONE_CHECK(file.size() >= 8, "{}: {} bytes is too short for a safetensors file (needs an 8-byte header length)",
             path, file.size());
  uint64_t header_len;
  std::memcpy(&header_len, file.data(), 8);
  HONE_CHECK(header_len <= kMaxHeaderBytes && header_len <= file.size() - 8,
             "{}: header length {} at offset 0 exceeds the file size {}", path, header_len, file.size());
  const std::string_view header_text(reinterpret_cast<const char*>(file.data() + 8), header_len);
  // The format pads the header with spaces; a NUL byte ends nlohmann's input early.
  const size_t nul = header_text.find('\0');
  HONE_CHECK(nul == std::string_view::npos, "{}: the header (bytes 8 to {}) holds a NUL byte at offset {} (safetensors "
             "pads it with spaces)", path, 8 + header_len, 8 + nul);
  // A name given twice would be read as its last entry: an error, as in the reference reader.
  std::string repeated;
  const nlohmann::json::parser_callback_t no_repeats = [&, seen = std::set<std::string>()](
      int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) mutable {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && !seen.insert(parsed.get<std::string>()).second &&
        repeated.empty()) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text, no_repeats);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the header (bytes 8 to {}) is not valid JSON ({})", path, 8 + header_len, json_error_text(e, 8));
  }
  HONE_CHECK(header.is_object(), "{}: the header (bytes 8 to {}) is not a JSON object", path, 8 + header_len);
  HONE_CHECK(repeated.empty(), "{}: the header names tensor '{}' twice", path, repeated);
  const size_t data_start = 8 + header_len;
  const size_t data_size = file.size() - data_start;
  Header parsed;
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> by_offset;  // begin, end, name
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      HONE_CHECK(info.is_object(), "{}: __metadata__ is not an object", path);
      for (auto& [key, value] : info.items()) {
        HONE_CHECK(value.is_string(), "{}: __metadata__.{} is not a string", path, key);
        parsed.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string context = path + ": tensor '" + name + "'";
    HONE_CHECK(info.is_object() && info.contains("dtype") && info["dtype"].is_string() && info.contains("shape") &&
                   info["shape"].is_array() && info.contains("data_offsets") && info["data_offsets"].is_array() &&
                   info["data_offsets"].size() == 2,
               "{}: expected {{dtype, shape, data_offsets: [begin, end]}}", context);
    const std::string dtype_name = info["dtype"].get<std::string>();
    const std::optional<DType> dtype = held_dtype(dtype_name);
    const std::optional<size_t> unheld_size = dtype ? std::nullopt : unheld_dtype_size(dtype_name);
    if (!dtype && !unheld_size) parse_safetensors_dtype(dtype_name, context);  // the error naming it
    const size_t element_bytes = dtype ? dtype_size(*dtype) : *unheld_size;
    HONE_CHECK(info["shape"].size() <= size_t(Shape::kMaxDims), "{}: {} dimensions, hone handles at most {}", context,
               info["shape"].size(), Shape::kMaxDims);
    std::vector<int64_t> dims;
    uint64_t numel = 1;
    for (auto& d : info["shape"]) {
      HONE_CHECK(d.is_number_unsigned(), "{}: shape entries must be non-negative integers", context);
      dims.push_back(d.get<int64_t>());
      HONE_CHECK(dims.back() < (int64_t(1) << 40) && (numel *= uint64_t(dims.back())) < (uint64_t(1) << 48),
                 "{}: shape is implausibly large", context);
    }
    auto& offsets = info["data_offsets"];
    HONE_CHECK(offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
               "{}: data_offsets must be non-negative integers", context);
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    HONE_CHECK(begin <= end, "{}: data_offsets [{}, {}] end before they begin", context, begin, end);
    HONE_CHECK(end <= data_size, "{}: data_offsets [{}, {}] reach past the {} data bytes of the file", context, begin,
               end, data_size);
    HONE_CHECK(end - begin == numel * element_bytes, "{}: data_offsets span {} bytes but {} of shape [{}] need {}",
               context, end - begin, dtype_name, fmt::join(dims, ", "), numel * element_bytes);
    if (dtype) {
      parsed.entries.emplace(name, Entry{*dtype, Shape(std::span<const int64_t>(dims)),
                                         std::span<const std::byte>(file.data() + data_start + begin, end - begin)});
    } else {
      parsed.unreadable.emplace(name, fmt::format("stored as {}, which hone has no dtype for", dtype_name));
    }
    by_offset.push_back({begin, end, name});
  }
  // The tensors fill the data section, one after another, with no hole, overlap
  // or bytes after the last (the format's rule, which the reference reader checks).
  std::sort(by_offset.begin(), by_offset.end());
  uint64_t previous_end = 0;
  for (const auto& [begin, end, name] : by_offset) {
    HONE_CHECK(begin >= previous_end, "{}: tensor '{}' overlaps the tensor before it", path, name);
    HONE_CHECK(begin == previous_end, "{}: data bytes {} to {} before tensor '{}' belong to no tensor", path,
               previous_end, begin, name);
    previous_end = end;
    parsed.order.push_back(name);
  }
  HONE_CHECK(previous_end == data_size, "{}: the last {} data bytes (from {}) belong to no tensor",
             path, data_size - previous_end, previous_end);
  return parsed;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path), header_(parse(file_.bytes(), path)) {}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto found = header_.entries.find(name);
  if (found != header_.entries.end()) return found->second;
  auto why = header_.unreadable.find(name);
  HONE_CHECK(why == header_.unreadable.end(), "{}: tensor '{}' is {}", path(), name, why->second);
  fail("{}: no tensor named '{}'", path(), name);
}

Tensor SafetensorsFile::load(const std::string& name) const {
  const Entry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  if (!e.bytes.empty()) std::memcpy(t.raw(), e.bytes.data(), e.bytes.size());
  return t;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Layout>& layout,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), layout_(layout), out_(path) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const Layout& t : layout_) {
    HONE_CHECK(t.name != "__metadata__" && !header.contains(t.name), "{}: duplicate or reserved tensor name '{}'",
               path, t.name);
    const uint64_t bytes = uint64_t(t.shape.numel()) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", std::vector<int64_t>(t.shape.begin(), t.shape.end())},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // the data section starts 8-byte aligned
  const uint64_t header_len = text.size();
  out_.write(&header_len, sizeof header_len);
  out_.write(text.data(), text.size());
}

void SafetensorsWriter::write(const Tensor& tensor) {
  HONE_CHECK(next_ < layout_.size(), "{}: more tensors written than the {} declared", path_, layout_.size());
  const Layout& expected = layout_[next_++];
  HONE_CHECK(tensor.dtype() == expected.dtype && tensor.shape() == expected.shape,
             "{}: tensor '{}' is {} {}, declared as {} {}", path_, expected.name, dtype_name(tensor.dtype()),
             tensor.shape().str(), dtype_name(expected.dtype), expected.shape.str());
  const Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
  out_.write(host.raw(), host.nbytes());
}

WrittenFile SafetensorsWriter::commit() {
  HONE_CHECK(next_ == layout_.size(), "{}: {} of {} declared tensors written", path_, next_, layout_.size());
  return out_.commit();
}

WrittenFile write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Layout> layout;
  for (const NamedTensor& nt : tensors) layout.push_back({nt.name, nt.tensor.dtype(), nt.tensor.shape()});
  SafetensorsWriter writer(path, layout, metadata);
  for (const NamedTensor& nt : tensors) writer.write(nt.tensor);
  return writer.commit();
}

}  // namespace hone
