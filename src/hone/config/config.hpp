#pragma once
// Configs: a tree of sections and values loaded from YAML, changed by
// `key.sub=value` overrides, and resolved against a Schema that fills defaults
// and rejects unknown keys (with the closest valid key) and ill-typed values.
#include <nlohmann/json.hpp>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace hone {

using Json = nlohmann::ordered_json;

class Config {
 public:
  Config() = default;
  // `origin` names where the text came from, for error messages.
  static Config from_yaml(std::string_view text, const std::string& origin);
  static Config from_file(const std::string& path);

  const std::string& origin() const { return origin_; }
  // Where the value at `key` came from: "the command line" for an override,
  // else origin().
  const std::string& origin_of(std::string_view key) const;
  // origin_of(key) with the line of the config file that gives it ("run.yaml:12"), where known.
  std::string place_of(std::string_view key) const;
  // Where the values under `section` came from: origin(), naming the overrides
  // among them ("run.yaml with model.dim from the command line").
  std::string origin_of_section(std::string_view section) const;
  const Json& tree() const { return tree_; }

  // Applies "a.b.c=value"; the value is read as YAML (numbers, true/false, null,
  // [lists], quoted strings), or kept as text where it is no valid YAML.
  // "~a.b.c" removes the key and all under it (torchtune's form): its default applies.
  void apply_override(std::string_view assignment);
  // The text after '=' of the override that set `key`, or nullptr: a string
  // key takes it as written where YAML would read it as something else
  // ("prompt=Note: x" is a mapping to YAML, "template=[INST] {x}" a list).
  const std::string* override_text(std::string_view key) const;
  // The keys ~key on the command line removed where the config held nothing.
  const std::vector<std::string>& removals_that_found_nothing() const { return removed_nothing_; }
  // Whether the config file alone set `key`: no override at it, above it or below it.
  bool set_by_file(std::string_view key) const;
  // For an error about keys `a` and `b` given together: where one is the config
  // file's and the other came from the command line, how to drop the file's
  // (" (add prompt=null to drop run.yaml's prompt)"); else "".
  std::string how_to_drop_the_files(std::string_view a, std::string_view b) const;
  void set(std::string_view key, Json value);
  const Json* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr && !find(key)->is_null(); }

  // The value at `key`, converted to T (int64_t, double, bool, std::string,
  // std::vector<...>); throws hone::Error naming the key and the expected type.
  template <typename T>
  T get(std::string_view key) const;

  std::string to_yaml() const;

  // The config with OmegaConf's interpolations, as torchtune's and LLM Foundry's
  // configs write them, replaced by their values: "${a.b}" (the value at a.b; a
  // string that is only a reference takes the value's type), "${.b}" and
  // "${..b}" (relative to the key's section), "${oc.env:NAME}" and
  // "${oc.env:NAME,default}" (an environment variable); "\${" is a literal "${".
  // `fallback` gives the value of a key the config leaves unset (a schema's
  // default) or null. LLM Foundry's top-level `variables` section, which holds
  // values only to be referred to, is dropped.
  Config interpolated(const std::function<const Json*(const std::string& key)>& fallback) const;

 private:
  std::string origin_ = "the command line";  // no config file: only overrides
  Json tree_ = Json::object();
  // The line of the config file each key is on (a key's own, not one merged in with <<).
  std::map<std::string, int64_t, std::less<>> lines_;
  // The keys given as key=value, in order (the last of a key's), with the text after '='.
  std::vector<std::pair<std::string, std::string>> overrides_;
  std::vector<std::string> removed_nothing_;  // see removals_that_found_nothing()
};

// The leaves of a config tree by dotted key ("optimizer.lr"); an empty mapping is a leaf.
std::vector<std::pair<std::string, const Json*>> config_leaves(const Json& tree);

enum class ValueType { integer, number, boolean, string, number_list, string_list, mapping };

// The interval a number (each number of a list) must lie in; an open end
// excludes its bound.
struct Range {
  double low = -std::numeric_limits<double>::infinity();
  double high = std::numeric_limits<double>::infinity();
  bool low_open = false;
  bool high_open = false;

  static constexpr Range positive() { return {.low = 0, .low_open = true}; }
  static constexpr Range not_negative() { return {.low = 0}; }
  static constexpr Range fraction() { return {.low = 0, .high = 1, .high_open = true}; }  // [0, 1)
  static constexpr Range unit_interval() { return {.low = 0, .high = 1}; }              // [0, 1]
  static constexpr Range positive_fraction() { return {.low = 0, .high = 1, .low_open = true}; }  // (0, 1]

  bool contains(double x) const;
  // "must be positive", "must not be negative", "must be in [0, 1)", ...
  std::string requirement() const;
};

struct KeySpec {
  std::string key;     // dotted: "optimizer.lr"
  ValueType type;
  Json default_value;  // null: no default (optional unless `required`)
  std::string help;
  std::vector<std::string> choices = {};  // allowed strings, when not empty
  bool required = false;
  Range range = {};  // numbers only; any value by default
};

class Schema {
 public:
  Schema& add(KeySpec spec);
  // A numeric key whose values must lie in `range`.
  Schema& add(KeySpec spec, Range range);
  Schema& add(const Schema& other);
  // Another tool's key that hone does not take: given, it is an error saying
  // `what_instead`, rather than an unknown key with a misleading did-you-mean.
  Schema& add_foreign(std::string key, std::string what_instead);
  // Another tool's value of a key hone has (LLM Foundry's model.name:
  // mpt_causal_lm): an error saying `what_instead`, among the unknown keys.
  Schema& add_foreign_value(std::string key, std::string value, std::string what_instead);
  // The user's config with every default filled in. Throws hone::Error for an
  // unknown key (naming the closest known one), a value of the wrong type,
  // outside its choices or its range, or a missing required key.
  Config resolve(const Config& user) const;  // after Config::interpolated with the defaults
  const std::vector<KeySpec>& keys() const { return keys_; }

 private:
  std::vector<KeySpec> keys_;
  std::vector<std::pair<std::string, std::string>> foreign_;  // key, what hone takes instead
  std::map<std::pair<std::string, std::string>, std::string> foreign_values_;  // (key, value) -> what instead
};

// What a key takes, for listings: "an integer; must be positive", "one of
// constant, linear, cosine, wsd", "true or false", ...
std::string describe_values(const KeySpec& spec);

// The candidate closest to `word` by edit distance, or "" when none is close.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace hone
