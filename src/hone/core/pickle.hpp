#pragma once
// Python pickles, read by a small machine of its own that knows the opcodes
// torch.save and pickle.dump write for dicts, lists, tuples, strings, numbers
// and calls of named globals. A call (REDUCE) and a persistent id go to the
// reader's hooks, which accept the few they know (a tensor's rebuild) and
// refuse the rest: nothing in the file is ever run.
#include <fmt/format.h>

#include <any>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hone/core/error.hpp"

namespace hone::pickle {

struct Value;
using ValuePtr = std::shared_ptr<Value>;

// A value of the pickle.
struct Value {
  enum class Kind { none, boolean, integer, number, text, tuple, list, dict, global, object };
  Kind kind = Kind::none;
  int64_t integer = 0;
  double number = 0;
  std::string text;             // a string; a global's "module.name"
  std::vector<ValuePtr> items;  // a tuple's or list's items; a dict's keys and values in turn
  std::any object;              // Kind::object: what a hook made of a call or a persistent id

  Value() = default;
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;
  ~Value();
};

ValuePtr make(Value::Kind kind);

class Unpickler {
 public:
  // A call of the global named `global` with the tuple `args` (collections.OrderedDict()
  // is read as a dict before); errors through `at` say where the pickle is.
  using Reduce = std::function<ValuePtr(const Unpickler& at, const std::string& global, const Value& args)>;
  // Resolves a persistent id (torch.save's storages).
  using PersistentLoad = std::function<ValuePtr(const Unpickler& at, const Value& id)>;
  // `where` starts every error ("model.pt: archive/data.pkl"). Without a hook
  // its opcode is an error.
  Unpickler(std::span<const std::byte> pickle, std::string where, Reduce reduce = {}, PersistentLoad load = {});
  ~Unpickler();
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  // The value the pickle builds. It lives as long as the Unpickler does: the
  // containers in its memo (nearly all a pickle builds) are emptied as it goes,
  // which frees the cycles a pickle may make.
  ValuePtr run();

  // Errors where the pickle is, for the hooks. check() is a function: its
  // arguments are evaluated even when `ok` holds.
  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> format, Args&&... args) const {
    fail("{} (offset {}): {}", where_, op_at_, fmt::format(format, std::forward<Args>(args)...));
  }
  template <typename... Args>
  void check(bool ok, fmt::format_string<Args...> format, Args&&... args) const {
    if (!ok) error(format, std::forward<Args>(args)...);
  }

 private:
  std::span<const std::byte> take(uint64_t n);
  uint64_t le(int n);
  int64_t long1();
  ValuePtr number();
  std::string line();
  void push(ValuePtr v) { stack_.push_back(std::move(v)); }
  ValuePtr pop();
  const ValuePtr& top() const;
  std::vector<ValuePtr> pop_to_mark();
  ValuePtr memo(uint64_t key) const;
  const ValuePtr& expect_kind(const ValuePtr& v, Value::Kind kind, const char* op) const;
  void add_items(Value& dict, std::vector<ValuePtr> items) const;
  ValuePtr reduce(const Value& callable, const Value& args) const;

  std::span<const std::byte> pickle_;
  size_t pos_ = 0, op_at_ = 0;
  std::string where_;
  Reduce reduce_;
  PersistentLoad load_;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, ValuePtr> memo_;
};

// Dicts and lists nested deeper are not read as plain data (a pickle can nest
// them a million deep, and a dict reached through the memo can hold itself).
constexpr int kMaxNesting = 64;

// A dict's key as text: a string, or an integer in decimal (an optimizer's
// state is keyed by parameter index; nanoGPT's itos by id).
std::optional<std::string> key_text(const Value& key);

// `v` as JSON when it holds plain data only (None, booleans, numbers, strings,
// and tuples, lists and dicts of them), within `budget` values (the memo can
// make a tree of billions from a few bytes); `depth` counts from 0.
std::optional<nlohmann::ordered_json> plain_data(const Value& v, int depth, size_t& budget);

// What a pickle.dump of plain data holds (nanoGPT's meta.pkl), at most `budget`
// values; any call or persistent id in it is an error starting with `where`.
nlohmann::ordered_json read_plain_data(std::span<const std::byte> pickle, const std::string& where, size_t budget);

}  // namespace hone::pickle
