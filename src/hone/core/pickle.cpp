#include "hone/core/pickle.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <unordered_map>

namespace hone::pickle {

// A pickle can nest lists a million deep (each APPENDed to the one below):
// freed a level at a time, not by a recursion that would overflow the stack.
Value::~Value() {
  std::vector<ValuePtr> pending = std::move(items);
  while (!pending.empty()) {
    ValuePtr v = std::move(pending.back());
    pending.pop_back();
    if (v.use_count() != 1) continue;  // held elsewhere too: not freed here
    std::move(v->items.begin(), v->items.end(), std::back_inserter(pending));
    v->items.clear();
  }
}

ValuePtr make(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

namespace {

ValuePtr boolean(bool b) {
  auto v = make(Value::Kind::boolean);
  v->integer = b;
  return v;
}
ValuePtr integer(int64_t i) {
  auto v = make(Value::Kind::integer);
  v->integer = i;
  return v;
}
ValuePtr text(std::span<const std::byte> bytes) {
  auto v = make(Value::Kind::text);
  v->text.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return v;
}
ValuePtr global(std::string name) {
  auto v = make(Value::Kind::global);
  v->text = std::move(name);
  return v;
}
ValuePtr sequence(Value::Kind kind, std::vector<ValuePtr> items) {
  auto v = make(kind);
  v->items = std::move(items);
  return v;
}

}  // namespace

Unpickler::Unpickler(std::span<const std::byte> pickle, std::string where, Reduce reduce, PersistentLoad load)
    : pickle_(pickle), where_(std::move(where)), reduce_(std::move(reduce)), load_(std::move(load)) {}

// A value can only be reached twice through the memo, so every cycle a pickle
// makes (a list appended to itself) runs through a memoized value: emptying
// those frees them all.
Unpickler::~Unpickler() {
  for (auto& [key, value] : memo_) value->items.clear();
}

ValuePtr Unpickler::run() {
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
      case 'Q': {                                                        // BINPERSID
        check(bool(load_), "a persistent id, which only the pickle of a torch.save archive holds");
        push(load_(*this, *pop()));
        break;
      }
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
      default: error("opcode 0x{:02x} is not one hone reads (dicts, lists, tuples, strings, numbers and torch.save's "
                     "tensors)", op);
    }
  }
}

std::span<const std::byte> Unpickler::take(uint64_t n) {
  check(n <= pickle_.size() - pos_, "needs {} bytes, {} are left", n, pickle_.size() - pos_);
  const auto bytes = pickle_.subspan(pos_, size_t(n));
  pos_ += size_t(n);
  return bytes;
}

uint64_t Unpickler::le(int n) {
  uint64_t value = 0;
  std::memcpy(&value, take(uint64_t(n)).data(), size_t(n));
  return value;
}

int64_t Unpickler::long1() {
  const auto n = size_t(le(1));
  check(n <= 8, "an integer of {} bytes", n);
  if (n == 0) return 0;
  uint64_t value = 0;
  std::memcpy(&value, take(n).data(), n);
  if (n < 8 && (value >> (8 * n - 1)) & 1) value |= ~uint64_t(0) << (8 * n);  // sign-extend
  return int64_t(value);
}

ValuePtr Unpickler::number() {
  auto v = make(Value::Kind::number);
  v->number = std::bit_cast<double>(__builtin_bswap64(le(8)));  // big-endian
  return v;
}

std::string Unpickler::line() {
  const auto rest = pickle_.subspan(pos_);
  const auto newline = std::find(rest.begin(), rest.end(), std::byte{'\n'});
  check(newline != rest.end(), "a GLOBAL name without its newline");
  std::string s(reinterpret_cast<const char*>(rest.data()), size_t(newline - rest.begin()));
  pos_ += s.size() + 1;
  return s;
}

ValuePtr Unpickler::pop() {
  check(!stack_.empty() && (marks_.empty() || stack_.size() > marks_.back()), "pops an empty stack");
  ValuePtr v = std::move(stack_.back());
  stack_.pop_back();
  return v;
}

const ValuePtr& Unpickler::top() const {
  check(!stack_.empty(), "reads an empty stack");
  return stack_.back();
}

std::vector<ValuePtr> Unpickler::pop_to_mark() {
  check(!marks_.empty(), "no MARK to pop to");
  std::vector<ValuePtr> items(stack_.begin() + std::ptrdiff_t(marks_.back()), stack_.end());
  stack_.resize(marks_.back());
  marks_.pop_back();
  return items;
}

ValuePtr Unpickler::memo(uint64_t key) const {
  auto found = memo_.find(key);
  check(found != memo_.end(), "memo entry {} was never stored", key);
  return found->second;
}

const ValuePtr& Unpickler::expect_kind(const ValuePtr& v, Value::Kind kind, const char* op) const {
  check(v->kind == kind, "{} on a value of another kind", op);
  return v;
}

void Unpickler::add_items(Value& dict, std::vector<ValuePtr> items) const {
  check(items.size() % 2 == 0, "a dict's keys and values do not pair up");
  dict.items.insert(dict.items.end(), items.begin(), items.end());
}

ValuePtr Unpickler::reduce(const Value& callable, const Value& args) const {
  check(callable.kind == Value::Kind::global && args.kind == Value::Kind::tuple, "REDUCE of a non-global");
  if (callable.text == "collections.OrderedDict" && args.items.empty()) return make(Value::Kind::dict);
  check(bool(reduce_), "the pickle calls {}: hone reads plain data (dicts, lists, strings, numbers), nothing else",
        callable.text);
  return reduce_(*this, callable.text, args);
}

std::optional<std::string> key_text(const Value& key) {
  if (key.kind == Value::Kind::text) return key.text;
  if (key.kind == Value::Kind::integer) return std::to_string(key.integer);
  return std::nullopt;
}

std::optional<nlohmann::ordered_json> plain_data(const Value& v, int depth, size_t& budget) {
  using Json = nlohmann::ordered_json;
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
      // Appended to the ordered map's vector (its own insert searches it: quadratic in a large dict); a
      // key set again keeps its place and takes the later value, as a Python dict.
      Json object = Json::object();
      auto& entries = object.get_ref<Json::object_t&>();
      std::unordered_map<std::string, size_t> at;
      for (size_t i = 0; i < v.items.size(); i += 2) {
        const std::optional<std::string> key = key_text(*v.items[i]);
        std::optional<Json> plain = key ? plain_data(*v.items[i + 1], depth + 1, budget) : std::nullopt;
        if (!plain) return std::nullopt;
        if (const auto [found, added] = at.emplace(*key, entries.size()); !added) {
          (entries.begin() + std::ptrdiff_t(found->second))->second = std::move(*plain);
        } else {
          entries.emplace_back(*key, std::move(*plain));
        }
      }
      return object;
    }
    default: return std::nullopt;
  }
}

nlohmann::ordered_json read_plain_data(std::span<const std::byte> pickle, const std::string& where, size_t budget) {
  Unpickler unpickler(pickle, where);
  const ValuePtr root = unpickler.run();
  size_t left = budget;
  std::optional<nlohmann::ordered_json> plain = plain_data(*root, 0, left);
  HONE_CHECK(plain.has_value(), "{}: holds more than plain data of at most {} values nested {} deep (dicts, lists, "
             "strings, numbers)",
             where, budget, kMaxNesting);
  return std::move(*plain);
}

}  // namespace hone::pickle
