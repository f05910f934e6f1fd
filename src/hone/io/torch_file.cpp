#include "hone/io/torch_file.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <set>
#include <string_view>

#include "hone/core/error.hpp"

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

struct Value;
using ValuePtr = std::shared_ptr<Value>;

// A value of the pickle: what a state dict's pickle builds, no more.
struct Value {
  enum class Kind { none, boolean, integer, number, text, tuple, list, dict, global, storage, tensor };
  Kind kind = Kind::none;
  int64_t integer = 0;
  double number = 0;
  std::string text;             // a string; a global's "module.name"; a storage's type
  std::vector<ValuePtr> items;  // a tuple's or list's items; a dict's keys and values in turn
  // A storage's bytes, or the part of them a tensor reads.
  std::span<const std::byte> bytes;
  const StorageType* type = nullptr;  // storage and tensor
  Shape shape;                        // tensor
  std::string unreadable;             // tensor: why hone cannot read it

  Value() = default;
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  // A pickle can nest lists a million deep (each APPENDed to the one below):
  // freed a level at a time, not by a recursion that would overflow the stack.
  ~Value() {
    std::vector<ValuePtr> pending = std::move(items);
    while (!pending.empty()) {
      ValuePtr v = std::move(pending.back());
      pending.pop_back();
      if (v.use_count() != 1) continue;  // held elsewhere too: not freed here
      std::move(v->items.begin(), v->items.end(), std::back_inserter(pending));
      v->items.clear();
    }
  }
};

ValuePtr make(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

class Unpickler {
 public:
  // Resolves a persistent id; `at` reports its errors where the pickle is.
  using PersistentLoad = std::function<ValuePtr(const Unpickler& at, const Value& id)>;
  Unpickler(std::span<const std::byte> pickle, std::string where, PersistentLoad load)
      : pickle_(pickle), where_(std::move(where)), load_(std::move(load)) {}
  // A value can only be reached twice through the memo, so every cycle a pickle
  // makes (a list appended to itself) runs through a memoized value: emptying
  // those frees them all.
  ~Unpickler() {
    for (auto& [key, value] : memo_) value->items.clear();
  }
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  ValuePtr run() {
    for (;;) {
      op_at_ = pos_;
      const auto op = uint8_t(take(1)[0]);
      switch (op) {
        case 0x80: take(1); break;                                         // PROTO
        case 0x95: take(8); break;                                         // FRAME
        case '.': check(stack_.size() == 1, "ends with {} values", stack_.size()); return stack_.back();  // STOP
        case '(': marks_.push_back(stack_.size()); break;                  // MARK
        case 'N': push(make(Value::Kind::none)); break;
        case 0x88: case 0x89: push(boolean(op == 0x88)); break;            // NEWTRUE, NEWFALSE
        case '}': push(make(Value::Kind::dict)); break;                    // EMPTY_DICT
        case ']': push(make(Value::Kind::list)); break;                    // EMPTY_LIST
        case ')': push(make(Value::Kind::tuple)); break;                   // EMPTY_TUPLE
        case 't': push(sequence(Value::Kind::tuple, pop_to_mark())); break;  // TUPLE
        case 'l': push(sequence(Value::Kind::list, pop_to_mark())); break;   // LIST
        case 0x85: case 0x86: case 0x87: {                                 // TUPLE1-3
          std::vector<ValuePtr> items(size_t(op - 0x84));
          for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop();
          push(sequence(Value::Kind::tuple, std::move(items)));
          break;
        }
        case 'd': {                                                        // DICT
          auto dict = make(Value::Kind::dict);
          add_items(*dict, pop_to_mark());
          push(dict);
          break;
        }
        case 'q': memo_[le(1)] = top(); break;                             // BINPUT
        case 'r': memo_[le(4)] = top(); break;                             // LONG_BINPUT
        case 0x94: memo_[memo_.size()] = top(); break;                     // MEMOIZE
        case 'h': push(memo(le(1))); break;                                // BINGET
        case 'j': push(memo(le(4))); break;                                // LONG_BINGET
        case 'K': push(integer(int64_t(le(1)))); break;                    // BININT1
        case 'M': push(integer(int64_t(le(2)))); break;                    // BININT2
        case 'J': push(integer(int64_t(int32_t(le(4))))); break;           // BININT
        case 0x8a: push(integer(long1())); break;                          // LONG1
        case 'G': push(number()); break;                                   // BINFLOAT
        case 'X': case 'T': case 'B': push(text(take(le(4)))); break;      // BINUNICODE, BINSTRING, BINBYTES
        case 0x8c: case 'U': case 'C': push(text(take(le(1)))); break;     // SHORT_BINUNICODE, -BINSTRING, -BINBYTES
        case 0x8d: case 0x8e: push(text(take(le(8)))); break;              // BINUNICODE8, BINBYTES8
        case 'c': {                                                        // GLOBAL
          const std::string module = line();
          push(global(module + "." + line()));
          break;
        }
        case 0x93: {                                                       // STACK_GLOBAL
          const ValuePtr name = pop(), module = pop();
          check(name->kind == Value::Kind::text && module->kind == Value::Kind::text, "STACK_GLOBAL of non-strings");
          push(global(module->text + "." + name->text));
          break;
        }
        case 'Q': push(load_(*this, *pop())); break;                       // BINPERSID
        case 'R': {                                                        // REDUCE
          const ValuePtr args = pop(), callable = pop();
          push(reduce(*callable, *args));
          break;
        }
        case 'b': pop(); break;  // BUILD: an object's attributes (a state dict's _metadata), not needed
        case 's': {                                                        // SETITEM
          const ValuePtr value = pop(), key = pop();
          add_items(*expect_kind(top(), Value::Kind::dict, "SETITEM"), {key, value});
          break;
        }
        case 'u': {                                                        // SETITEMS
          std::vector<ValuePtr> items = pop_to_mark();
          add_items(*expect_kind(top(), Value::Kind::dict, "SETITEMS"), std::move(items));
          break;
        }
        case 'a': {                                                        // APPEND
          const ValuePtr item = pop();
          expect_kind(top(), Value::Kind::list, "APPEND")->items.push_back(item);
          break;
        }
        case 'e': {                                                        // APPENDS
          std::vector<ValuePtr> items = pop_to_mark();
          auto& list = expect_kind(top(), Value::Kind::list, "APPENDS")->items;
          list.insert(list.end(), items.begin(), items.end());
          break;
        }
        default: error("opcode 0x{:02x} is not one torch.save writes", op);
      }
    }
  }

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{} (offset {}): {}", where_, op_at_, fmt::format(format, std::forward<Args>(args)...));
  }
  template <typename... Args>
  void check(bool ok, fmt::format_string<Args...> format, Args&&... args) const {
    if (!ok) error(format, std::forward<Args>(args)...);
  }

 private:
  std::span<const std::byte> take(uint64_t n) {
    check(n <= pickle_.size() - pos_, "needs {} bytes, {} are left", n, pickle_.size() - pos_);
    const auto bytes = pickle_.subspan(pos_, size_t(n));
    pos_ += size_t(n);
    return bytes;
  }
  uint64_t le(int n) {
    uint64_t value = 0;
    std::memcpy(&value, take(uint64_t(n)).data(), size_t(n));
    return value;
  }
  int64_t long1() {
    const auto n = size_t(le(1));
    check(n <= 8, "an integer of {} bytes", n);
    if (n == 0) return 0;
    uint64_t value = 0;
    std::memcpy(&value, take(n).data(), n);
    if (n < 8 && (value >> (8 * n - 1)) & 1) value |= ~uint64_t(0) << (8 * n);  // sign-extend
    return int64_t(value);
  }
  ValuePtr number() {
    auto v = make(Value::Kind::number);
    v->number = std::bit_cast<double>(__builtin_bswap64(le(8)));  // big-endian
    return v;
  }
  std::string line() {
    const auto rest = pickle_.subspan(pos_);
    const auto newline = std::find(rest.begin(), rest.end(), std::byte{'\n'});
    check(newline != rest.end(), "a GLOBAL name without its newline");
    std::string s(reinterpret_cast<const char*>(rest.data()), size_t(newline - rest.begin()));
    pos_ += s.size() + 1;
    return s;
  }

  void push(ValuePtr v) { stack_.push_back(std::move(v)); }
  ValuePtr pop() {
    check(!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back()), "pops an empty stack");
    ValuePtr v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  const ValuePtr& top() const {
    check(!stack_.empty(), "reads an empty stack");
    return stack_.back();
  }
  std::vector<ValuePtr> pop_to_mark() {
    check(!marks_.empty(), "no MARK to pop to");
    std::vector<ValuePtr> items(stack_.begin() + std::ptrdiff_t(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  ValuePtr memo(uint64_t key) const {
    auto found = memo_.find(key);
    check(found != memo_.end(), "memo entry {} was never stored", key);
    return found->second;
  }
  const ValuePtr& expect_kind(const ValuePtr& v, Value::Kind kind, const char* op) const {
    check(v->kind == kind, "{} on a value of another kind", op);
    return v;
  }
  void add_items(Value& dict, std::vector<ValuePtr> items) {
    check(items.size() % 2 == 0, "a dict's keys and values do not pair up");
    dict.items.insert(dict.items.end(), items.begin(), items.end());
  }

  static ValuePtr boolean(bool b) {
    auto v = make(Value::Kind::boolean);
    v->integer = b;
    return v;
  }
  static ValuePtr integer(int64_t i) {
    auto v = make(Value::Kind::integer);
    v->integer = i;
    return v;
  }
  static ValuePtr text(std::span<const std::byte> bytes) {
    auto v = make(Value::Kind::text);
    v->text.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return v;
  }
  static ValuePtr global(std::string name) {
    auto v = make(Value::Kind::global);
    v->text = std::move(name);
    return v;
  }
  static ValuePtr sequence(Value::Kind kind, std::vector<ValuePtr> items) {
    auto v = make(kind);
    v->items = std::move(items);
    return v;
  }

  // The calls a state dict's pickle makes; any other is refused.
  ValuePtr reduce(const Value& callable, const Value& args) {
    check(callable.kind == Value::Kind::global && args.kind == Value::Kind::tuple, "REDUCE of a non-global");
    const std::string& name = callable.text;
    if (name == "collections.OrderedDict" && args.items.empty()) return make(Value::Kind::dict);
    if (name == "torch._utils._rebuild_tensor_v2" && args.items.size() >= 4) return rebuild_tensor(args.items);
    if ((name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") &&
        !args.items.empty() && args.items[0]->kind == Value::Kind::tensor) {
      return args.items[0];
    }
    error("the pickle calls {}: hone reads tensors and the dicts that hold them, nothing else", name);
  }

  std::vector<int64_t> integers(const Value& v, const char* what) const {
    check(v.kind == Value::Kind::tuple, "a tensor's {} is not a tuple", what);
    std::vector<int64_t> values;
    for (const ValuePtr& item : v.items) {
      check(item->kind == Value::Kind::integer && item->integer >= 0, "a tensor's {} holds a non-size", what);
      values.push_back(item->integer);
    }
    return values;
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, ...): a view of
  // the storage; hone reads the row-major ones, which a state dict's are.
  ValuePtr rebuild_tensor(const std::vector<ValuePtr>& args) {
    const Value& storage = *args[0];
    check(storage.kind == Value::Kind::storage && args[1]->kind == Value::Kind::integer && args[1]->integer >= 0,
          "a tensor without a storage and offset");
    const std::vector<int64_t> size = integers(*args[2], "size"), stride = integers(*args[3], "stride");
    check(size.size() == stride.size(), "a tensor of {} sizes and {} strides", size.size(), stride.size());
    // Row-major: each dimension's stride is the product of the sizes after it
    // (that product, in the end the element count, checked for overflow).
    int64_t elements = 1;
    bool row_major = true;
    for (size_t d = size.size(); d-- > 0;) {
      if (size[d] != 1 && stride[d] != elements) row_major = false;
      check(!__builtin_mul_overflow(elements, size[d], &elements), "a tensor's {} sizes overflow an element count",
            size.size());
    }
    auto v = make(Value::Kind::tensor);
    v->type = storage.type;
    v->shape = Shape(std::span<const int64_t>(size));
    const uint64_t offset = uint64_t(args[1]->integer);
    const uint64_t storage_elements = storage.bytes.size() / storage.type->element;
    if (!row_major) {
      v->unreadable = fmt::format("a strided view (sizes {}, strides {}) of its storage", v->shape.str(),
                                  Shape(std::span<const int64_t>(stride)).str());
    } else {
      check(elements == 0 || (offset <= storage_elements && uint64_t(elements) <= storage_elements - offset),
            "a tensor of {} elements at offset {} of a storage of {}", elements, offset, storage_elements);
      const size_t element = storage.type->element;
      if (elements > 0) v->bytes = storage.bytes.subspan(offset * element, size_t(elements) * element);
    }
    if (!storage.type->dtype) {
      v->unreadable = fmt::format("stored as {}, which hone has no dtype for", storage.type->name);
    }
    return v;
  }

  std::span<const std::byte> pickle_;
  size_t pos_ = 0, op_at_ = 0;
  std::string where_;
  PersistentLoad load_;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, ValuePtr> memo_;
};

// A dict's key as a name: a string, or an integer (an optimizer's state is
// keyed by parameter index).
std::optional<std::string> key_text(const Value& key) {
  if (key.kind == Value::Kind::text) return key.text;
  if (key.kind == Value::Kind::integer) return std::to_string(key.integer);
  return std::nullopt;
}

// Dicts nested deeper are refused: a pickle can nest them a million deep, and
// a dict reached through the memo can hold itself.
constexpr int kMaxNesting = 64;
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
// not walked again.
void add_tensors(const Value& dict, const std::string& prefix, int depth, std::set<const Value*>& walked,
                 TorchFile::Contents& contents, const std::string& path) {
  HONE_CHECK(depth <= kMaxNesting, "{}: dicts nested more than {} deep", path, kMaxNesting);
  if (!walked.insert(&dict).second) return;
  for (size_t i = 0; i < dict.items.size(); i += 2) {
    const Value& value = *dict.items[i + 1];
    if (value.kind != Value::Kind::dict && value.kind != Value::Kind::tensor) continue;
    const std::optional<std::string> key = key_text(*dict.items[i]);
    if (!key) continue;
    HONE_CHECK(key->size() <= kMaxKeyBytes, "{}: a dict key of {} bytes names tensors (at most {})", path, key->size(),
               kMaxKeyBytes);
    const std::string name = prefix + *key;
    if (value.kind == Value::Kind::dict) add_tensors(value, name + ".", depth + 1, walked, contents, path);
    if (value.kind != Value::Kind::tensor) continue;
    if (!contents.entries.contains(name) && !contents.unreadable.contains(name)) contents.order.push_back(name);
    contents.entries.erase(name);
    contents.unreadable.erase(name);
    if (value.unreadable.empty()) {
      contents.entries.insert_or_assign(name, TensorFile::Entry{*value.type->dtype, value.shape, value.bytes});
    } else {
      contents.unreadable[name] = value.unreadable;
    }
  }
}

// `v` as JSON when it holds plain data only (None, booleans, numbers, strings,
// and tuples, lists and dicts of them), within `budget` values.
std::optional<Json> plain_data(const Value& v, int depth, size_t& budget) {
  if (depth > kMaxNesting || budget == 0) return std::nullopt;
  --budget;
  switch (v.kind) {
    case Value::Kind::none: return Json(nullptr);
    case Value::Kind::boolean: return Json(v.integer != 0);
    case Value::Kind::integer: return Json(v.integer);
    case Value::Kind::number: return Json(v.number);
    case Value::Kind::text: return Json(v.text);
    case Value::Kind::tuple:
    case Value::Kind::list: {
      Json array = Json::array();
      for (const ValuePtr& item : v.items) {
        std::optional<Json> plain = plain_data(*item, depth + 1, budget);
        if (!plain) return std::nullopt;
        array.push_back(std::move(*plain));
      }
      return array;
    }
    case Value::Kind::dict: {
      Json object = Json::object();
      for (size_t i = 0; i < v.items.size(); i += 2) {
        const std::optional<std::string> key = key_text(*v.items[i]);
        std::optional<Json> plain = key ? plain_data(*v.items[i + 1], depth + 1, budget) : std::nullopt;
        if (!plain) return std::nullopt;
        object[*key] = std::move(*plain);
      }
      return object;
    }
    default: return std::nullopt;
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
    storage = make(Value::Kind::storage);
    storage->type = type;
    storage->bytes = found->second.first(size_t(elements * type->element));
    return storage;
  };
  Unpickler pickle(entries.at(prefix + "data.pkl"), path + ": " + prefix + "data.pkl", load_storage);
  const ValuePtr root = pickle.run();
  HONE_CHECK(root->kind == Value::Kind::dict,
             "{}: holds no dict of tensors (a state dict, as model.state_dict() is, was expected)", path);

  Contents contents;
  std::set<const Value*> walked;
  add_tensors(*root, "", 0, walked, contents, path);
  contents.values = Json::object();
  size_t budget = kPlainDataBudget;
  for (size_t i = 0; i < root->items.size() && budget > 0 && contents.values.size() < kPlainEntries; i += 2) {
    const std::optional<std::string> key = key_text(*root->items[i]);
    std::optional<Json> value = key ? plain_data(*root->items[i + 1], 0, budget) : std::nullopt;
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
