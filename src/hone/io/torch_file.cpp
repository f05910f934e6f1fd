#include "hone/io/torch_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <string_view>

#include "hone/core/error.hpp"
#include "hone/core/pickle.hpp"

namespace hone {

namespace {

using Json = nlohmann::ordered_json;

static_assert(std::endian::native == std::endian::little, "torch.save archives are read in place, little-endian");

template <typename T>
T load_le(const std::byte* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

// bytes [offset, offset + size) of `file`, or an error naming what lies there.
std::span<const std::byte> bytes_at(std::span<const std::byte> file, uint64_t offset, uint64_t size,
                                    const std::string& path, std::string_view what) {
  HONE_CHECK(offset <= file.size() && size <= file.size() - offset,
             "{}: {} at offset {} ({} bytes) runs past the end of the file ({} bytes)", path, what, offset, size,
             file.size());
  return file.subspan(size_t(offset), size_t(size));
}

// ---- zip ----

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEndRecord = 0x06054b50,
                   kEndRecord64 = 0x06064b50, kEndLocator64 = 0x07064b50;

// The entries of a zip archive by name: where each one's bytes lie. Every entry
// must be stored uncompressed, as torch.save stores them.
std::map<std::string, std::span<const std::byte>> zip_entries(std::span<const std::byte> file,
                                                              const std::string& path) {
  HONE_CHECK(file.size() >= 22, "{}: {} bytes is too short for a zip archive", path, file.size());
  // The end record is the file's last 22 bytes, unless a comment (at most 64 KiB) follows it.
  std::optional<uint64_t> end;
  const int64_t lowest = std::max<int64_t>(0, int64_t(file.size()) - 22 - 65535);
  for (int64_t at = int64_t(file.size()) - 22; !end && at >= lowest; --at) {
    if (load_le<uint32_t>(&file[size_t(at)]) == kEndRecord) end = uint64_t(at);
  }
  HONE_CHECK(end.has_value(), "{}: not a zip archive (no end-of-central-directory record)", path);
  const std::byte* record = &file[*end];
  uint64_t count = load_le<uint16_t>(record + 10), dir_size = load_le<uint32_t>(record + 12),
           dir_offset = load_le<uint32_t>(record + 16);
  if (count == 0xFFFF || dir_size == 0xFFFFFFFF || dir_offset == 0xFFFFFFFF) {
    // ZIP64: a locator right before the end record points at the 64-bit end record.
    HONE_CHECK(*end >= 20 && load_le<uint32_t>(&file[*end - 20]) == kEndLocator64,
               "{}: a ZIP64 archive without its end-record locator", path);
    const uint64_t at = load_le<uint64_t>(&file[*end - 20 + 8]);
    const auto record64 = bytes_at(file, at, 56, path, "the ZIP64 end record");
    HONE_CHECK(load_le<uint32_t>(record64.data()) == kEndRecord64, "{}: no ZIP64 end record at offset {}", path, at);
    count = load_le<uint64_t>(record64.data() + 32);
    dir_size = load_le<uint64_t>(record64.data() + 40);
    dir_offset = load_le<uint64_t>(record64.data() + 48);
  }
  const auto directory = bytes_at(file, dir_offset, dir_size, path, "the central directory");
  std::map<std::string, std::span<const std::byte>> entries;
  uint64_t pos = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const auto header = bytes_at(directory, pos, 46, path, "a central directory entry");
    HONE_CHECK(load_le<uint32_t>(header.data()) == kCentralHeader,
               "{}: central directory entry {} (offset {}) is damaged", path, i, dir_offset + pos);
    const uint16_t method = load_le<uint16_t>(header.data() + 10);
    uint64_t compressed = load_le<uint32_t>(header.data() + 20), size = load_le<uint32_t>(header.data() + 24),
             local = load_le<uint32_t>(header.data() + 42);
    const uint16_t name_length = load_le<uint16_t>(header.data() + 28),
                   extra_length = load_le<uint16_t>(header.data() + 30),
                   comment_length = load_le<uint16_t>(header.data() + 32);
    const auto name_bytes = bytes_at(directory, pos + 46, name_length, path, "an entry's name");
    const std::string name(reinterpret_cast<const char*>(name_bytes.data()), name_bytes.size());
    // ZIP64's extra field holds, in this order, each of the three that reads 0xFFFFFFFF above.
    const auto extra = bytes_at(directory, pos + 46 + name_length, extra_length, path, "'" + name + "''s extra field");
    for (size_t at = 0; at + 4 <= extra.size();) {
      const uint16_t id = load_le<uint16_t>(&extra[at]), length = load_le<uint16_t>(&extra[at + 2]);
      const auto field = bytes_at(extra, at + 4, length, path, "'" + name + "''s extra field");
      if (id == 1) {
        size_t next = 0;
        for (uint64_t* value : {&size, &compressed, &local}) {
          if (*value != 0xFFFFFFFF) continue;
          HONE_CHECK(next + 8 <= field.size(), "{}: '{}' has a short ZIP64 extra field", path, name);
          *value = load_le<uint64_t>(&field[next]);
          next += 8;
        }
      }
      at += 4 + length;
    }
    HONE_CHECK(method == 0 && compressed == size,
               "{}: '{}' is compressed (method {}); torch.save stores its entries uncompressed", path, name, method);
    const auto local_header = bytes_at(file, local, 30, path, "the local header of '" + name + "'");
    HONE_CHECK(load_le<uint32_t>(local_header.data()) == kLocalHeader, "{}: no local header for '{}' at offset {}",
               path, name, local);
    const uint64_t data =
        local + 30 + load_le<uint16_t>(local_header.data() + 26) + load_le<uint16_t>(local_header.data() + 28);
    entries[name] = bytes_at(file, data, size, path, "'" + name + "'");
    pos += 46 + uint64_t(name_length) + extra_length + comment_length;
  }
  return entries;
}

// ---- pickle ----

using pickle::Unpickler;
using pickle::Value;
using pickle::ValuePtr;

// The storage classes a persistent id names, with the dtype hone reads them as
// (none: hone has no such dtype) and their element size.
struct StorageType {
  const char* name;
  std::optional<DType> dtype;
  size_t element;
};
constexpr StorageType kStorageTypes[] = {
    {"torch.FloatStorage", DType::f32, 4},  {"torch.BFloat16Storage", DType::bf16, 2},
    {"torch.HalfStorage", DType::f16, 2},   {"torch.DoubleStorage", DType::f64, 8},
    {"torch.LongStorage", DType::i64, 8},   {"torch.IntStorage", DType::i32, 4},
    {"torch.ByteStorage", DType::u8, 1},    {"torch.ShortStorage", std::nullopt, 2},
    {"torch.CharStorage", std::nullopt, 1}, {"torch.BoolStorage", std::nullopt, 1},
    {"torch.ComplexFloatStorage", std::nullopt, 8}, {"torch.ComplexDoubleStorage", std::nullopt, 16},
};

// The objects the hooks make of a persistent id and of a tensor's rebuild.
struct TorchStorage {
  std::span<const std::byte> bytes;
  const StorageType* type = nullptr;
};
struct TorchTensor {
  std::span<const std::byte> bytes;  // the part of its storage it reads
  const StorageType* type = nullptr;
  Shape shape;
  std::string unreadable;  // why hone cannot read it
};

// `v`'s object as a T, or null.
template <typename T>
const T* as(const Value& v) {
  return v.kind == Value::Kind::object ? std::any_cast<T>(&v.object) : nullptr;
}

ValuePtr object_of(std::any object) {
  ValuePtr v = pickle::make(Value::Kind::object);
  v->object = std::move(object);
  return v;
}

std::vector<int64_t> integers(const Unpickler& at, const Value& v, const char* what) {
  at.check(v.kind == Value::Kind::tuple, "a tensor's {} is not a tuple", what);
  std::vector<int64_t> values;
  for (const ValuePtr& item : v.items) {
    at.check(item->kind == Value::Kind::integer && item->integer >= 0, "a tensor's {} holds a non-size", what);
    values.push_back(item->integer);
  }
  return values;
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, ...): a view of
// the storage; hone reads the row-major ones, which a state dict's are.
ValuePtr rebuild_tensor(const Unpickler& at, const std::vector<ValuePtr>& args) {
  const TorchStorage* storage = as<TorchStorage>(*args[0]);
  at.check(storage != nullptr && args[1]->kind == Value::Kind::integer && args[1]->integer >= 0,
           "a tensor without a storage and offset");
  const std::vector<int64_t> size = integers(at, *args[2], "size"), stride = integers(at, *args[3], "stride");
  at.check(size.size() == stride.size(), "a tensor of {} sizes and {} strides", size.size(), stride.size());
  // Row-major: each dimension's stride is the product of the sizes after it
  // (that product, in the end the element count, checked for overflow).
  int64_t elements = 1;
  bool row_major = true;
  for (size_t d = size.size(); d-- > 0;) {
    if (size[d] != 1 && stride[d] != elements) row_major = false;
    at.check(!__builtin_mul_overflow(elements, size[d], &elements), "a tensor's {} sizes overflow an element count",
             size.size());
  }
  TorchTensor t;
  t.type = storage->type;
  t.shape = Shape(std::span<const int64_t>(size));
  const uint64_t offset = uint64_t(args[1]->integer);
  const uint64_t storage_elements = storage->bytes.size() / storage->type->element;
  if (!row_major) {
    t.unreadable = fmt::format("a strided view (sizes {}, strides {}) of its storage", t.shape.str(),
                               Shape(std::span<const int64_t>(stride)).str());
  } else {
    at.check(elements == 0 || (offset <= storage_elements && uint64_t(elements) <= storage_elements - offset),
             "a tensor of {} elements at offset {} of a storage of {}", elements, offset, storage_elements);
    const size_t element = storage->type->element;
    if (elements > 0) t.bytes = storage->bytes.subspan(offset * element, size_t(elements) * element);
  }
  if (!storage->type->dtype) {
    t.unreadable = fmt::format("stored as {}, which hone has no dtype for", storage->type->name);
  }
  return object_of(std::move(t));
}

// The calls a state dict's pickle makes; any other is refused.
ValuePtr rebuild(const Unpickler& at, const std::string& name, const Value& args) {
  if (name == "torch._utils._rebuild_tensor_v2" && args.items.size() >= 4) return rebuild_tensor(at, args.items);
  if ((name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") &&
      !args.items.empty() && as<TorchTensor>(*args.items[0])) {
    return args.items[0];
  }
  at.error("the pickle calls {}: hone reads tensors and the dicts that hold them, nothing else", name);
}

// The values the top dict's plain data may hold together, and its entries kept:
// the memo can make a tree of billions from a few bytes (a list holding itself
// twice, nested), and a checkpoint's plain entries are a handful.
constexpr size_t kPlainDataBudget = size_t(1) << 16;
constexpr size_t kPlainEntries = 1024;
// A key naming tensors: longer ones are refused (the memo can reuse one key of
// megabytes for millions of tensors, each a copy).
constexpr size_t kMaxKeyBytes = 4096;

// Adds the tensors of `dict` and of the dicts in it to `contents`, each named by
// its keys from the top joined with dots. A dict reached again (the memo) is
// not walked again; dicts nested deeper than pickle::kMaxNesting are refused.
void add_tensors(const Value& dict, const std::string& prefix, int depth, std::set<const Value*>& walked,
                 TorchFile::Contents& contents, const std::string& path) {
  HONE_CHECK(depth <= pickle::kMaxNesting, "{}: dicts nested more than {} deep", path, pickle::kMaxNesting);
  if (!walked.insert(&dict).second) return;
  for (size_t i = 0; i < dict.items.size(); i += 2) {
    const Value& value = *dict.items[i + 1];
    const TorchTensor* tensor = as<TorchTensor>(value);
    if (value.kind != Value::Kind::dict && !tensor) continue;
    const std::optional<std::string> key = pickle::key_text(*dict.items[i]);
    if (!key) continue;
    HONE_CHECK(key->size() <= kMaxKeyBytes, "{}: a dict key of {} bytes names tensors (at most {})", path, key->size(),
               kMaxKeyBytes);
    const std::string name = prefix + *key;
    if (!tensor) {
      add_tensors(value, name + ".", depth + 1, walked, contents, path);
      continue;
    }
    if (!contents.entries.contains(name) && !contents.unreadable.contains(name)) contents.order.push_back(name);
    contents.entries.erase(name);
    contents.unreadable.erase(name);
    if (tensor->unreadable.empty()) {
      contents.entries.insert_or_assign(name, TensorFile::Entry{*tensor->type->dtype, tensor->shape, tensor->bytes});
    } else {
      contents.unreadable[name] = tensor->unreadable;
    }
  }
}

}  // namespace

bool is_torch_archive(const std::string& path) {
  char magic[4] = {};
  std::ifstream(path, std::ios::binary).read(magic, sizeof magic);
  return load_le<uint32_t>(reinterpret_cast<const std::byte*>(magic)) == kLocalHeader;
}

TorchFile::Contents TorchFile::parse(std::span<const std::byte> file, const std::string& path) {
  HONE_CHECK(file.size() < 4 || load_le<uint32_t>(file.data()) == kLocalHeader || uint8_t(file[0]) != 0x80,
             "{}: PyTorch's legacy format (torch.save before 1.6, or _use_new_zipfile_serialization=False): load it "
             "and save it again with torch.save, or as safetensors",
             path);
  const auto entries = zip_entries(file, path);
  // Every name is PREFIX/...: PREFIX/data.pkl, PREFIX/data/KEY, PREFIX/byteorder.
  std::string prefix;
  for (const auto& [name, bytes] : entries) {
    if (name.ends_with("/data.pkl") && std::count(name.begin(), name.end(), '/') == 1) {
      prefix = name.substr(0, name.size() - 8);
    }
  }
  HONE_CHECK(!prefix.empty(), "{}: a zip archive without data.pkl (not written by torch.save)", path);
  if (auto order = entries.find(prefix + "byteorder"); order != entries.end()) {
    const std::string_view text(reinterpret_cast<const char*>(order->second.data()), order->second.size());
    HONE_CHECK(text == "little", "{}: saved on a {}-endian machine; hone reads little-endian tensors", path, text);
  }

  std::map<std::string, ValuePtr> storages;
  // ('storage', torch.XStorage, KEY, location, elements) -> the bytes of PREFIX/data/KEY.
  const auto load_storage = [&](const Unpickler& at, const Value& id) -> ValuePtr {
    const auto& f = id.items;
    at.check(id.kind == Value::Kind::tuple && f.size() == 5 && f[0]->kind == Value::Kind::text &&
                 f[0]->text == "storage" && f[1]->kind == Value::Kind::global && f[2]->kind == Value::Kind::text &&
                 f[4]->kind == Value::Kind::integer && f[4]->integer >= 0,
             "a persistent id that is not a storage");
    const StorageType* type = nullptr;
    for (const StorageType& t : kStorageTypes) {
      if (f[1]->text == t.name) type = &t;
    }
    at.check(type != nullptr, "a storage of type {}, which hone does not know", f[1]->text);
    auto& storage = storages[f[2]->text];
    if (storage) return storage;
    const std::string record = prefix + "data/" + f[2]->text;
    auto found = entries.find(record);
    at.check(found != entries.end(), "storage {} is not in the archive ({} is missing)", f[2]->text, record);
    const uint64_t elements = uint64_t(f[4]->integer);
    at.check(elements <= found->second.size() / type->element, "storage {} of {} elements holds only {} bytes",
             f[2]->text, elements, found->second.size());
    storage = object_of(TorchStorage{found->second.first(size_t(elements * type->element)), type});
    return storage;
  };
  Unpickler unpickler(entries.at(prefix + "data.pkl"), path + ": " + prefix + "data.pkl", rebuild, load_storage);
  const ValuePtr root = unpickler.run();
  HONE_CHECK(root->kind == Value::Kind::dict,
             "{}: holds no dict of tensors (a state dict, as model.state_dict() is, was expected)", path);

  Contents contents;
  std::set<const Value*> walked;
  add_tensors(*root, "", 0, walked, contents, path);
  contents.values = Json::object();
  size_t budget = kPlainDataBudget;
  for (size_t i = 0; i < root->items.size() && budget > 0 && contents.values.size() < kPlainEntries; i += 2) {
    const std::optional<std::string> key = pickle::key_text(*root->items[i]);
    std::optional<Json> value = key ? pickle::plain_data(*root->items[i + 1], 0, budget) : std::nullopt;
    if (value) contents.values[*key] = std::move(*value);
  }
  HONE_CHECK(!contents.order.empty(), "{}: its dict holds no tensors", path);
  return contents;
}

TorchFile::TorchFile(const std::string& path) : file_(path), contents_(parse(file_.bytes(), path)) {}

bool TorchFile::contains(const std::string& name) const {
  return contents_.entries.contains(name) || contents_.unreadable.contains(name);
}

const TorchFile::Entry& TorchFile::entry(const std::string& name) const {
  auto found = contents_.entries.find(name);
  if (found != contents_.entries.end()) return found->second;
  auto why = contents_.unreadable.find(name);
  HONE_CHECK(why == contents_.unreadable.end(), "{}: tensor '{}' is {}", path(), name, why->second);
  fail("{}: no tensor named '{}'", path(), name);
}

}  // namespace hone
