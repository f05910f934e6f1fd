#include "hone/config/config.hpp"

#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "hone/core/error.hpp"
#include "hone/core/text.hpp"

namespace hone {

namespace {

// YAML 1.2 core-schema scalars: plain "12" is an integer, "1e-3" a number,
// "true" a boolean, "~"/"null" null; quoted scalars stay strings.
Json plain_scalar_to_json(const std::string& text) {
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  size_t used = 0;
  try {
    long long i = std::stoll(text, &used, 10);
    if (used == text.size()) return int64_t(i);
  } catch (const std::exception&) {
  }
  try {
    double d = std::stod(text, &used);
    if (used == text.size() && text.find_first_of("0123456789") != std::string::npos) return d;
  } catch (const std::exception&) {
  }
  return text;
}

Json scalar_to_json(const YAML::Node& node) {
  if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return node.Scalar();  // quoted, or !!str
  return plain_scalar_to_json(node.Scalar());
}

// More values than any config holds: YAML aliases of aliases ("billion laughs")
// expand without end, and a few lines would otherwise take all memory.
constexpr int64_t kMaxConfigValues = 100'000;
// Deeper than any config nests: an alias inside what it names (`a: &a [*a]`)
// nests without end, and would overflow the stack before the budget ran out.
constexpr int kMaxConfigDepth = 64;

// `budget`: how many more values may come; `depth`: this node's nesting.
Json yaml_to_json(const YAML::Node& node, const std::string& origin, int64_t& budget, int depth = 0) {
  HONE_CHECK(--budget >= 0, "{}: more than {} values (YAML aliases that expand without end?)", origin,
             kMaxConfigValues);
  HONE_CHECK(depth <= kMaxConfigDepth, "{}:{}: values nested more than {} deep (a YAML alias inside what it names?)",
             origin, node.Mark().line + 1, kMaxConfigDepth);
  // YAML's own tags (!!str, !!int, !!map, ...) or none; an application's
  // (!env HOME, !include) means something no config of hone's does.
  const std::string& tag = node.Tag();
  HONE_CHECK(tag.empty() || tag == "?" || tag == "!" || tag.starts_with("tag:yaml.org,2002:"),
             "{}:{}: the YAML tag {} is not one hone reads (an environment variable is ${{oc.env:NAME}})", origin,
             node.Mark().line + 1, tag);
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Scalar: return scalar_to_json(node);
    case YAML::NodeType::Sequence: {
      Json list = Json::array();
      for (const auto& item : node) list.push_back(yaml_to_json(item, origin, budget, depth + 1));
      return list;
    }
    case YAML::NodeType::Map: {
      Json map = Json::object();
      std::vector<YAML::Node> merged;  // YAML's merge key: `<<: *base` (or a list of them)
      for (const auto& kv : node) {
        // YAML's complex keys (`? [a, b]`): a key is a word here.
        HONE_CHECK(kv.first.IsScalar(), "{}:{}: a key must be a word, not a {}", origin, kv.first.Mark().line + 1,
                   kv.first.IsSequence() ? "list" : kv.first.IsMap() ? "mapping" : "null");
        const std::string key = kv.first.as<std::string>();
        if (key == "<<" && kv.first.Tag() == "?") {  // a plain <<, not a quoted "<<"
          if (kv.second.IsSequence()) {
            for (const auto& base : kv.second) merged.push_back(base);
          } else {
            merged.push_back(kv.second);
          }
          continue;
        }
        HONE_CHECK(!map.contains(key), "{}:{}: key '{}' appears twice", origin, kv.first.Mark().line + 1, key);
        map[key] = yaml_to_json(kv.second, origin, budget, depth + 1);
      }
      // The merged mappings fill in the keys the mapping leaves out; the first listed wins.
      for (const YAML::Node& base : merged) {
        HONE_CHECK(base.IsMap(), "{}:{}: '<<' merges mappings, not a {}", origin, base.Mark().line + 1,
                   base.IsSequence() ? "list" : "value");
        const Json entries = yaml_to_json(base, origin, budget, depth + 1);
        for (const auto& [key, value] : entries.items()) {
          if (!map.contains(key)) map[key] = value;
        }
      }
      return map;
    }
  }
  return nullptr;
}

// The line of each key of a mapping and of those nested in it, by dotted key.
void record_lines(const YAML::Node& node, const std::string& prefix, std::map<std::string, int64_t, std::less<>>& lines) {
  if (!node.IsMap()) return;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) continue;
    const std::string key = prefix + kv.first.Scalar();
    lines.emplace(key, kv.first.Mark().line + 1);
    record_lines(kv.second, key + ".", lines);
  }
}

std::vector<std::string> split_key(std::string_view key) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    parts.emplace_back(key.substr(start, dot - start));
    HONE_CHECK(!parts.back().empty(), "malformed config key '{}'", key);
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

// The leaves of a config tree by dotted key; `mappings` are keys whose value is
// itself a mapping (e.g. dataset.column_map), which stay whole.
void flatten(const Json& node, const std::string& prefix, const std::set<std::string>& mappings,
             std::vector<std::pair<std::string, const Json*>>& out) {
  if (node.is_object() && !node.empty() && !mappings.count(prefix)) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), mappings, out);
    }
  } else if (!prefix.empty()) {
    out.emplace_back(prefix, &node);
  }
}

}  // namespace

std::vector<std::pair<std::string, const Json*>> config_leaves(const Json& tree) {
  std::vector<std::pair<std::string, const Json*>> leaves;
  flatten(tree, "", {}, leaves);
  return leaves;
}

namespace {

// YAML's spellings of null, by which an override unsets a key ("key=" too).
bool spells_null(std::string_view text) {
  text = python_strip(text);
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

std::string_view type_name(ValueType type) {
  switch (type) {
    case ValueType::integer: return "an integer";
    case ValueType::number: return "a number";
    case ValueType::boolean: return "true or false";
    case ValueType::string: return "a string";
    case ValueType::number_list: return "a list of numbers";
    case ValueType::string_list: return "a list of strings";
    case ValueType::mapping: return "a mapping";
  }
  return "?";
}

// A float with a whole value ("1e9" in YAML, max_tokens=2e9) is a fine integer.
bool is_whole_float(const Json& v) {
  if (!v.is_number_float()) return false;
  const double x = v.get<double>();
  return std::isfinite(x) && x == std::floor(x) && std::abs(x) <= 9007199254740992.0;  // 2^53: exact
}

bool matches(const Json& v, ValueType type) {
  switch (type) {
    case ValueType::integer: return v.is_number_integer() || is_whole_float(v);
    case ValueType::number: return v.is_number();
    case ValueType::boolean: return v.is_boolean();
    case ValueType::string: return v.is_string();
    case ValueType::number_list:
      return v.is_array() && std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_number(); });
    case ValueType::string_list:  // one string is a list of it (vLLM's stop="x")
      return v.is_string() ||
             (v.is_array() && std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_string(); }));
    case ValueType::mapping: return v.is_object();
  }
  return false;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

Config Config::from_yaml(std::string_view text, const std::string& origin) {
  Config c;
  c.origin_ = origin;
  YAML::Node root;
  try {
    std::vector<YAML::Node> documents = YAML::LoadAll(std::string(text));
    // A config is one document: later ones (after ---) would be dropped unread.
    std::erase_if(documents, [](const YAML::Node& d) { return d.IsNull(); });
    HONE_CHECK(documents.size() <= 1, "{}:{}: a second YAML document (after ---): a config is one document",
               origin, documents.size() > 1 ? documents[1].Mark().line + 1 : 0);
    if (!documents.empty()) root = documents.front();
  } catch (const YAML::Exception& e) {
    fail("{}:{}:{}: invalid YAML: {}", origin, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  int64_t budget = kMaxConfigValues;
  Json tree = yaml_to_json(root, origin, budget);
  HONE_CHECK(tree.is_null() || tree.is_object(), "{}: a config must be a mapping of keys to values", origin);
  if (tree.is_object()) c.tree_ = std::move(tree);
  record_lines(root, "", c.lines_);
  return c;
}

Config Config::from_file(const std::string& path) {
  HONE_CHECK(!std::filesystem::is_directory(path), "{}: a folder, not a config file", path);
  std::ifstream in(path);
  HONE_CHECK(in.good(), "{}: cannot read config file: {}", path, std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return from_yaml(text.str(), path);
}

void Config::set(std::string_view key, Json value) {
  Json* node = &tree_;
  for (const std::string& part : split_key(key)) {
    if (!node->is_object()) *node = Json::object();
    node = &(*node)[part];
  }
  *node = std::move(value);
}

void Config::apply_override(std::string_view assignment) {
  if (assignment.starts_with('~')) {  // torchtune's removal: the key, and all under it, as if never given
    const std::string key(assignment.substr(1));
    HONE_CHECK(!key.empty() && key.find('=') == std::string::npos,
               "override '{}': ~KEY removes a key (torchtune's form) and takes no value; KEY=VALUE sets one",
               assignment);
    // A removal that finds nothing is checked against the recipe's keys when resolved (a typo).
    if (find(key) == nullptr) removed_nothing_.push_back(key);
    // The key's sections, from the top: each left empty by the removal goes with it.
    const std::vector<std::string> parts = split_key(key);
    std::vector<Json*> sections = {&tree_};
    for (size_t i = 0; i + 1 < parts.size() && sections.back(); ++i) {
      Json* section = sections.back();
      const auto it = section->is_object() ? section->find(parts[i]) : section->end();
      sections.push_back(it == section->end() ? nullptr : &*it);
    }
    for (size_t i = sections.size(); i-- > 0;) {
      if (!sections[i] || !sections[i]->is_object()) break;
      sections[i]->erase(parts[i]);
      if (!sections[i]->empty() || i == 0) break;
    }
    std::erase_if(overrides_, [&](const auto& given) { return given.first == key || given.first.starts_with(key + "."); });
    overrides_.emplace_back(key, assignment);  // what is missing now is the command line's doing
    return;
  }
  const size_t eq = assignment.find('=');
  HONE_CHECK(eq != std::string_view::npos && eq > 0,
             "override '{}' is not of the form key=value (nor ~key, which removes one)", assignment);
  const std::string key(assignment.substr(0, eq));
  HONE_CHECK(assignment.substr(eq + 1) != "-", "the command line: {}=-: '-' stands for an unset key in hone ls; "
             "unset one with {}=null", key, key);
  const std::string text(assignment.substr(eq + 1));
  try {
    set(key, from_yaml("v: " + text, "override " + key).tree_["v"]);
  } catch (const Error&) {
    set(key, text);  // a string key takes it; any other names the key and the text it got
  }
  std::erase_if(overrides_, [&](const auto& given) { return given.first == key; });
  overrides_.emplace_back(key, text);
}

const std::string* Config::override_text(std::string_view key) const {
  for (const auto& [given, text] : overrides_)
    if (given == key) return &text;
  return nullptr;
}

bool Config::set_by_file(std::string_view key) const {
  const auto within = [](std::string_view inner, std::string_view outer) {
    return inner == outer || (inner.starts_with(outer) && inner[outer.size()] == '.');
  };
  return std::ranges::none_of(overrides_, [&](const auto& o) { return within(key, o.first) || within(o.first, key); });
}

std::string Config::how_to_drop_the_files(std::string_view a, std::string_view b) const {
  if (set_by_file(a) == set_by_file(b)) return "";
  const std::string_view files = set_by_file(a) ? a : b;
  return fmt::format(" (add {}=null to drop {}'s {})", files, origin(), files);
}

const std::string& Config::origin_of(std::string_view key) const {
  static const std::string command_line = "the command line";
  for (const auto& [o, text] : overrides_) {
    if (key == o || (key.starts_with(o) && key[o.size()] == '.')) return command_line;
  }
  return origin_;
}

std::string Config::place_of(std::string_view key) const {
  const std::string& origin = origin_of(key);
  const auto line = lines_.find(key);
  // An overridden key is the command line's, whatever line the file gave it on.
  if (&origin != &origin_ || line == lines_.end()) return origin;
  return fmt::format("{}:{}", origin_, line->second);
}

std::string Config::origin_of_section(std::string_view section) const {
  std::vector<std::string> given;
  for (const auto& [o, text] : overrides_) {
    if (o == section || (o.starts_with(section) && o[section.size()] == '.')) given.push_back(o);
  }
  // The section overridden whole, or a config of overrides alone: one origin.
  if (given.empty() || origin_of(section) != origin_ || origin_ == origin_of(given.front())) return origin_of(section);
  return fmt::format("{} with {} from the command line", origin_, fmt::join(given, ", "));
}

const Json* Config::find(std::string_view key) const {
  const Json* node = &tree_;
  for (const std::string& part : split_key(key)) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(part);
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

namespace {

std::string join_key(const std::vector<std::string>& parts, size_t count) {
  std::string key;
  for (size_t i = 0; i < count; ++i) key += (i ? "." : "") + parts[i];
  return key;
}

// The most text and values the references of one config may bring in, counting
// each use: far beyond any real config, while references that double at each
// level (`v1: ${v0}${v0}`, `v2: ${v1}${v1}`, ...) grow exponentially.
constexpr size_t kMaxInterpolatedBytes = size_t(16) << 20;
// Longer than any config's chain of references (a key referring to one that
// refers to another ...): each link is a few calls deep, and a generated chain
// of 30,000 overflowed the stack.
constexpr size_t kMaxReferenceChain = 100;

// A value's size as kMaxInterpolatedBytes counts it: its text, and a byte for
// each number, boolean or null.
size_t interpolated_size(const Json& value) {
  if (value.is_string()) return value.get_ref<const std::string&>().size();
  if (!value.is_structured()) return 1;
  size_t size = 1;
  for (auto it = value.begin(); it != value.end(); ++it)
    size += (value.is_object() ? it.key().size() : 0) + interpolated_size(it.value());
  return size;
}

// Replaces the interpolations of a config tree (Config::interpolated): each
// string value is resolved where it lies, references followed recursively,
// each key's value resolved once however often it is referred to.
class Interpolator {
 public:
  Interpolator(const Config& config, const std::function<const Json*(const std::string&)>& fallback)
      : config_(config), fallback_(fallback) {}

  // `node` (at the dotted path `parts`) with every interpolation replaced.
  Json resolve(const Json& node, std::vector<std::string>& parts) {
    if (node.is_string()) return resolve_string(node.get<std::string>(), parts);
    Json out = node;
    if (node.is_object()) {
      for (auto it = out.begin(); it != out.end(); ++it) {
        parts.push_back(it.key());
        it.value() = resolve(it.value(), parts);  // the copy's own value: node[key] searches an ordered map
        parts.pop_back();
      }
    } else if (node.is_array()) {
      for (size_t i = 0; i < out.size(); ++i) out[i] = resolve(node[i], parts);
    }
    return out;
  }

 private:
  [[noreturn]] void error(const std::vector<std::string>& parts, const std::string& message) const {
    const std::string key = join_key(parts, parts.size());
    fail("{}: '{}': {}", config_.origin_of(key), key, message);
  }

  // A string value: one reference alone keeps its value's type; references inside
  // text are replaced by their values' text.
  Json resolve_string(const std::string& text, std::vector<std::string>& parts) {
    if (text.find("${") == std::string::npos) return text;
    std::string out;
    std::optional<Json> whole;
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, 3, "\\${") == 0) {  // escaped: a literal "${"
        out += "${";
        i += 3;
        continue;
      }
      if (text.compare(i, 2, "${") != 0) {
        out += text[i++];
        continue;
      }
      size_t depth = 0, end = i;
      for (; end < text.size(); ++end) {
        if (text.compare(end, 2, "${") == 0) ++depth;
        if (text[end] == '}' && --depth == 0) break;
      }
      if (end == text.size()) error(parts, fmt::format("'{}' has an unclosed '${{'", text));
      const Json value = reference(text.substr(i + 2, end - i - 2), parts);
      if (i == 0 && end + 1 == text.size()) whole = value;
      if (value.is_object() || value.is_array())
        if (!whole) error(parts, fmt::format("'{}' puts a section or list inside text", text));
      out += value.is_string() ? value.get<std::string>() : value.dump();
      i = end + 1;
    }
    return whole ? *whole : Json(out);
  }

  // The value of one "${...}" expression, found from the key at `parts`.
  Json reference(std::string expression, std::vector<std::string>& parts) {
    if (expression.find("${") != std::string::npos) {  // e.g. ${oc.env:NAME,${other.key}}
      const Json inner = resolve_string(expression, parts);
      expression = inner.is_string() ? inner.get<std::string>() : inner.dump();
    }
    const size_t colon = expression.find(':');
    if (colon != std::string::npos) {
      const std::string resolver = expression.substr(0, colon), argument = expression.substr(colon + 1);
      if (resolver == "oc.decode") {  // the text read as a value: ${oc.decode:${oc.env:STEPS,100}} is a number
        try {
          return Config::from_yaml("v: " + argument, "oc.decode").tree()["v"];
        } catch (const Error&) {
          return argument;
        }
      }
      if (resolver != "oc.env" && resolver != "env")
        error(parts, fmt::format("${{{}}}: the resolver '{}' is not one hone has (it has oc.env and oc.decode)",
                                 expression, resolver));
      const size_t comma = argument.find(',');
      const std::string name = argument.substr(0, comma);
      if (const char* value = std::getenv(name.c_str())) return std::string(value);
      if (comma == std::string::npos)
        error(parts, fmt::format("${{{}}}: the environment variable {} is not set", expression, name));
      std::string fallback = argument.substr(comma + 1);
      fallback.erase(0, fallback.find_first_not_of(' '));
      fallback.erase(fallback.find_last_not_of(' ') + 1);
      if (fallback == "null") return Json();  // OmegaConf's None, not the text "null"
      // A quoted default is the text inside its quotes, as OmegaConf's grammar reads it.
      if (fallback.size() >= 2 && (fallback.front() == '"' || fallback.front() == '\'') &&
          fallback.back() == fallback.front()) {
        return fallback.substr(1, fallback.size() - 2);
      }
      return fallback;
    }
    // A list's element as OmegaConf names it: a.b[1] is a.b.1.
    for (size_t open = expression.find('['); open != std::string::npos; open = expression.find('[', open)) {
      const size_t close = expression.find(']', open);
      const bool index = close != std::string::npos && close > open + 1 &&
                         expression.find_first_not_of("0123456789", open + 1) == close;
      if (!index) break;
      expression = expression.substr(0, open) + "." + expression.substr(open + 1, close - open - 1) +
                   expression.substr(close + 1);
    }
    // Leading dots: relative to the section that holds the key (one dot), its parent (two), ...
    const size_t dots = expression.find_first_not_of('.');
    if (dots == std::string::npos || dots > parts.size())
      error(parts, fmt::format("${{{}}} refers above the top of the config", expression));
    std::vector<std::string> target(parts.begin(), parts.end() - long(dots == 0 ? parts.size() : dots));
    for (const std::string& part : split_key(expression.substr(dots))) target.push_back(part);
    const std::string key = join_key(target, target.size());
    if (std::find(stack_.begin(), stack_.end(), key) != stack_.end()) {
      stack_.push_back(key);
      error(parts, fmt::format("the interpolations refer to each other in a circle: {}", fmt::join(stack_, " -> ")));
    }
    const Json* found = element(target);
    if (!found || found->is_null()) {
      // A key set to null (LLM Foundry's blank `data_remote:`) is null, as OmegaConf reads it,
      // unless a default fills it.
      if (const Json* filled = fallback_(key)) found = filled;
    }
    // An element of a list left at its default (${optimizer.betas[1]}).
    if (const std::optional<size_t> index = target.size() > 1 ? list_index(target.back()) : std::nullopt;
        !found && index) {
      const Json* list = fallback_(join_key(target, target.size() - 1));
      if (list && list->is_array() && *index < list->size()) found = &(*list)[*index];
    }
    if (!found) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : config_leaves(config_.tree())) keys.push_back(k);
      const std::string suggestion = closest_match(key, keys);
      error(parts, fmt::format("${{{}}}: the config has no key '{}'{}", expression, key,
                               suggestion.empty() ? "" : fmt::format(" (did you mean '{}'?)", suggestion)));
    }
    auto resolved = resolved_.find(key);
    if (resolved == resolved_.end()) {
      if (stack_.size() == kMaxReferenceChain) {
        error(parts, fmt::format("a chain of more than {} references, each to the next ({} -> {} -> ...)",
                                 kMaxReferenceChain, stack_[0], stack_[1]));
      }
      stack_.push_back(key);
      Json value = resolve(*found, target);
      stack_.pop_back();
      const size_t size = interpolated_size(value);
      resolved = resolved_.emplace(key, Resolved{std::move(value), size}).first;
    }
    brought_in_ += resolved->second.size;
    if (brought_in_ > kMaxInterpolatedBytes) {
      error(parts, fmt::format("the interpolations bring in more than {} (references that double at each level?)",
                               format_bytes(double(kMaxInterpolatedBytes))));
    }
    return resolved->second.value;
  }

  // The list index a key's part spells ("1" of optimizer.betas.1), if it spells one.
  static std::optional<size_t> list_index(const std::string& part) {
    if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string::npos) return {};
    return std::stoul(part);
  }

  // The value at a dotted path, a list's elements named by their index (a.b.0).
  const Json* element(const std::vector<std::string>& path) const {
    const Json* node = &config_.tree();
    for (const std::string& part : path) {
      if (const std::optional<size_t> index = list_index(part); node->is_array() && index) {
        if (*index >= node->size()) return nullptr;
        node = &(*node)[*index];
        continue;
      }
      if (!node->is_object()) return nullptr;
      const auto it = node->find(part);
      if (it == node->end()) return nullptr;
      node = &*it;
    }
    return node;
  }

  struct Resolved {
    Json value;
    size_t size;  // interpolated_size(value)
  };

  const Config& config_;
  const std::function<const Json*(const std::string&)>& fallback_;
  std::vector<std::string> stack_;  // the keys whose references are being followed
  std::map<std::string, Resolved> resolved_;  // each referred-to key's value, interpolations replaced
  size_t brought_in_ = 0;  // the sizes of every reference's value so far
};

}  // namespace

Config Config::interpolated(const std::function<const Json*(const std::string& key)>& fallback) const {
  Config out = *this;
  std::vector<std::string> parts;
  out.tree_ = Interpolator(*this, fallback).resolve(tree_, parts);
  out.tree_.erase("variables");
  return out;
}

template <typename T>
T Config::get(std::string_view key) const {
  const Json* v = find(key);
  HONE_CHECK(v != nullptr && !v->is_null(), "{}: '{}' is not set", origin_of(key), key);
  try {
    if constexpr (std::is_same_v<T, double>) {
      HONE_CHECK(v->is_number(), "{}: '{}' must be a number, got {}", origin_of(key), key, v->dump());
    } else if constexpr (std::is_same_v<T, int64_t>) {
      HONE_CHECK(v->is_number_integer(), "{}: '{}' must be an integer, got {}", origin_of(key), key, v->dump());
    }
    return v->get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: '{}' has the wrong type: {}", origin_of(key), key, v->dump());
  }
}

template int64_t Config::get<int64_t>(std::string_view) const;
template double Config::get<double>(std::string_view) const;
template bool Config::get<bool>(std::string_view) const;
template std::string Config::get<std::string>(std::string_view) const;
template std::vector<double> Config::get<std::vector<double>>(std::string_view) const;
template std::vector<std::string> Config::get<std::vector<std::string>>(std::string_view) const;

namespace {

void emit(YAML::Emitter& out, const Json& v) {
  if (v.is_object()) {
    out << YAML::BeginMap;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out << YAML::Key << it.key() << YAML::Value;
      emit(out, it.value());
    }
    out << YAML::EndMap;
  } else if (v.is_array()) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const Json& x : v) emit(out, x);
    out << YAML::EndSeq;
  } else if (v.is_null()) {
    out << YAML::Null;
  } else if (v.is_string()) {
    // A string that reads as something else unquoted (output_dir: 123, 0042, true) is quoted, so it reads back.
    const std::string& text = v.get_ref<const std::string&>();
    if (!plain_scalar_to_json(text).is_string()) out << YAML::DoubleQuoted;
    out << text;
  } else {
    out << v.dump();  // numbers and booleans as JSON writes them
  }
}

}  // namespace

std::string Config::to_yaml() const {
  YAML::Emitter out;
  emit(out, tree_);
  return std::string(out.c_str()) + "\n";
}

bool Range::contains(double x) const {
  return (low_open ? x > low : x >= low) && (high_open ? x < high : x <= high);
}

std::string Range::requirement() const {
  if (std::isinf(high)) {
    if (low == 0) return low_open ? "must be positive" : "must not be negative";
    return fmt::format("must be {} {}", low_open ? "greater than" : "at least", low);
  }
  return fmt::format("must be in {}{}, {}{}", low_open ? '(' : '[', low, high, high_open ? ')' : ']');
}

std::string describe_values(const KeySpec& spec) {
  if (!spec.choices.empty()) return fmt::format("one of {}", fmt::join(spec.choices, ", "));
  const bool numeric = spec.type == ValueType::integer || spec.type == ValueType::number ||
                       spec.type == ValueType::number_list;
  const bool any = std::isinf(spec.range.low) && std::isinf(spec.range.high);
  if (!numeric || any) return std::string(type_name(spec.type));
  return fmt::format("{}; {}", type_name(spec.type), spec.range.requirement());
}

Schema& Schema::add(KeySpec spec, Range range) {
  spec.range = range;
  return add(std::move(spec));
}

Schema& Schema::add(KeySpec spec) {
  keys_.push_back(std::move(spec));
  return *this;
}

Schema& Schema::add(const Schema& other) {
  for (const KeySpec& k : other.keys_) keys_.push_back(k);
  foreign_.insert(foreign_.end(), other.foreign_.begin(), other.foreign_.end());
  foreign_values_.insert(other.foreign_values_.begin(), other.foreign_values_.end());
  return *this;
}

Schema& Schema::add_foreign(std::string key, std::string what_instead) {
  foreign_.emplace_back(std::move(key), std::move(what_instead));
  return *this;
}

Schema& Schema::add_foreign_value(std::string key, std::string value, std::string what_instead) {
  foreign_values_[{std::move(key), std::move(value)}] = std::move(what_instead);
  return *this;
}

namespace {

// Whether `key` takes a file or folder: its last name a path, a folder, a
// file, or what names one (resume, lora.adapter, export.hf and export.peft).
bool names_a_path(std::string_view key) {
  const std::string_view name = key.substr(key.rfind('.') + 1);
  return name.ends_with("path") || name.ends_with("_dir") || name.ends_with("_file") || name == "resume" ||
         name == "adapter" || key == "export.hf" || key == "export.peft";
}

}  // namespace

Config Schema::resolve(const Config& given_config) const {
  Config written = given_config;
  for (const KeySpec& k : keys_) {
    const std::string* text = written.override_text(k.key);
    const Json* value = written.find(k.key);  // none where a later override replaced its section (model={})
    if (k.type != ValueType::string || text == nullptr || value == nullptr || spells_null(*text)) continue;
    // A string key takes the text as written, where YAML would make something
    // else of it (a mapping of "Note: x", a list, a comment after " #", a line
    // break folded, an anchor or a tag dropped); a quoted whole is unquoted, as
    // OmegaConf's overrides do.
    const std::string_view trimmed = python_strip(*text);
    const bool quoted = trimmed.size() >= 2 && (trimmed.front() == '\'' || trimmed.front() == '"') &&
                        trimmed.back() == trimmed.front();
    if (!(quoted && value->is_string())) {
      written.set(k.key, *text);
    }
  }
  const Config user = written.interpolated([&](const std::string& key) -> const Json* {
    for (const KeySpec& k : keys_)
      if (k.key == key && !k.default_value.is_null()) return &k.default_value;
    return nullptr;
  });
  std::vector<std::string> known;
  for (const KeySpec& k : keys_) known.push_back(k.key);
  // A removal (~key) that found nothing, of a key no setting is under, was meant for another (a typo).
  for (const std::string& removed : user.removals_that_found_nothing()) {
    const auto under = [](const std::string& inner, const std::string& outer) {
      return inner == outer || (inner.starts_with(outer) && inner[outer.size()] == '.');
    };
    const bool names_a_key = std::ranges::any_of(keys_, [&](const KeySpec& k) {
      return under(k.key, removed) || (k.type == ValueType::mapping && under(removed, k.key));  // dataset.column_map.x
    });
    if (names_a_key) continue;
    const std::string suggestion = closest_match(removed, known);
    fail("the command line: ~{}: unknown key '{}'{}", removed, removed,
         suggestion.empty() ? std::string() : fmt::format(" (did you mean '~{}'?)", suggestion));
  }

  std::set<std::string> mappings;
  for (const KeySpec& k : keys_) {
    if (k.type == ValueType::mapping) mappings.insert(k.key);
  }
  std::vector<std::pair<std::string, const Json*>> given;
  flatten(user.tree(), "", mappings, given);
  // Every key the schema lacks, in one error (a config brought from another
  // tool holds several): each with the key hone takes instead, or the closest.
  std::vector<std::string> unknown;
  std::set<std::string> foreign_named;
  std::string unknown_origin, unknown_place;  // the first unknown key's file, and its line there
  for (const auto& [key, value] : given) {
    if (value->is_string()) {
      if (const auto it = foreign_values_.find({key, value->get<std::string>()}); it != foreign_values_.end()) {
        if (unknown.empty()) unknown_origin = user.origin_of(key);
        unknown.push_back(fmt::format("'{}: {}': {}", key, value->get<std::string>(), it->second));
        continue;
      }
    }
    if (std::any_of(keys_.begin(), keys_.end(), [&](const KeySpec& k) { return k.key == key; })) {
      // One key of a file with a dot in it (checkpoint.format: hf) is not that key of its section.
      HONE_CHECK(user.find(key) == value,
                 "{}: '{}' is one YAML key with a dot in it, which the config would not read: write it in its section "
                 "({}: {{{}: ...}}); key=value on the command line takes dotted keys",
                 user.place_of(key), key, key.substr(0, key.rfind('.')), key.substr(key.rfind('.') + 1));
      continue;
    }
    // A section set to null (model=null) or {} is unset, its keys their defaults, as ~model leaves them.
    const auto in_section = std::find_if(keys_.begin(), keys_.end(), [&](const KeySpec& k) {
      return k.key.starts_with(key) && k.key[key.size()] == '.';
    });
    if (in_section != keys_.end() && (value->is_null() || (value->is_object() && value->empty()))) continue;
    const std::string origin = user.place_of(key);
    // A section given a value (dataset=[a, b]): its keys are what it takes.
    if (in_section != keys_.end()) {
      HONE_CHECK(value->is_object(), "{}: '{}' is a section: it takes keys ({} ...), not {} (hone ls RECIPE lists them)",
                 origin, key, in_section->key, value->dump());
    }
    HONE_CHECK(!key.ends_with("_component_"),
               "{}: '{}' is torchtune's: its _component_ keys name Python classes, hone's keys take values (a "
               "model by model.name or checkpoint.path, a dataset by dataset.path and dataset.template); hone ls "
               "RECIPE lists them, docs/migrating.md maps torchtune's",
               origin, key);
    if (unknown.empty()) {
      unknown_origin = user.origin_of(key);
      unknown_place = origin;
    }
    const auto foreign = std::find_if(foreign_.begin(), foreign_.end(), [&](const auto& f) {
      return key == f.first || (key.starts_with(f.first) && key[f.first.size()] == '.');
    });
    if (foreign != foreign_.end()) {  // a section of them is named once
      if (foreign_named.insert(foreign->first).second) {
        unknown.push_back(fmt::format("'{}': {}", foreign->first, foreign->second));
      }
      continue;
    }
    // A mapping given where a section was expected is still a typo of the section's keys.
    const std::string suggestion = closest_match(key, known);
    const std::string hint = suggestion.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", suggestion);
    unknown.push_back(fmt::format("unknown key '{}'{}", key, hint));
  }
  if (unknown.size() == 1) fail("{}: {}", unknown_place.empty() ? unknown_origin : unknown_place, unknown.front());
  if (!unknown.empty()) {
    fail("{}: {} keys hone does not take: {}", unknown_origin, unknown.size(), fmt::join(unknown, "; "));
  }
  Config resolved = user;
  for (const auto& [key, value] : given) {
    const std::string origin = user.place_of(key);
    const auto spec = std::find_if(keys_.begin(), keys_.end(), [&](const KeySpec& k) { return k.key == key; });
    if (value->is_null() || spec == keys_.end()) continue;  // unset, or a section left empty
    // What matches in another spelling is written as the key's type: 1e9 as 1000000000, "x" as [x].
    if (spec->type == ValueType::integer && is_whole_float(*value)) resolved.set(key, int64_t(value->get<double>()));
    if (spec->type == ValueType::string_list && value->is_string()) resolved.set(key, Json::array({*value}));
    // YAML 1.1's booleans, as PyYAML (torchtune's and LLM Foundry's loader) reads them.
    if (spec->type == ValueType::boolean && value->is_string()) {
      static const std::set<std::string> yes = {"yes", "Yes", "YES", "on", "On", "ON"},
                                         no = {"no", "No", "NO", "off", "Off", "OFF"};
      if (yes.contains(value->get<std::string>())) resolved.set(key, true);
      if (no.contains(value->get<std::string>())) resolved.set(key, false);
      if (resolved.find(key)->is_boolean()) continue;
    }
    // A whole number past 2^53 (YAML reads 99999999999999999999 as 1e+20): its range, or its size, is the problem.
    if (spec->type == ValueType::integer && value->is_number_float() && std::isfinite(value->get<double>()) &&
        value->get<double>() == std::floor(value->get<double>())) {
      HONE_CHECK(spec->range.contains(value->get<double>()), "{}: '{}' {}, got {}", origin, key,
                 spec->range.requirement(), value->dump());
      HONE_CHECK(is_whole_float(*value), "{}: '{}' is {}, past the whole numbers a setting holds exactly (2^53)",
                 origin, key, value->dump());
    }
    // An integer is a fine number.
    HONE_CHECK(matches(*value, spec->type), "{}: '{}' must be {}, got {}", origin, key, type_name(spec->type),
               value->dump());
    if (spec->type == ValueType::string && names_a_path(key)) {
      const std::string path = value->get<std::string>();
      HONE_CHECK(!path.empty(), "{}: '{}' is empty: give a path (null leaves it unset)", origin, key);
      // A shell expands ~ only where it stands unquoted on the command line; YAML and quotes keep it.
      HONE_CHECK(path != "~" && !path.starts_with("~/"),
                 "{}: '{}' is {:?}: hone does not expand '~' (a folder named ~ would be made here); write the "
                 "home folder's path, or ${{oc.env:HOME}}{}",
                 origin, key, path, path.substr(1));
    }
    const bool numeric = value->is_number() || spec->type == ValueType::number_list;
    const auto in_range = [&](const Json& x) { return spec->range.contains(x.get<double>()); };
    if (numeric && !std::all_of(value->begin(), value->end(), in_range)) {
      fail("{}: '{}' {}, got {}", origin, key, spec->range.requirement(), value->dump());
    }
    if (!spec->choices.empty()) {
      const std::string v = value->get<std::string>();
      if (std::find(spec->choices.begin(), spec->choices.end(), v) == spec->choices.end()) {
        const std::string suggestion = closest_match(v, spec->choices);
        fail("{}: '{}' is '{}'; expected one of {}{}", origin, key, v, fmt::join(spec->choices, ", "),
             suggestion.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", suggestion));
      }
    }
  }
  for (const KeySpec& k : keys_) {
    const Json* v = user.find(k.key);
    if (v == nullptr || v->is_null()) {
      HONE_CHECK(!k.required, "{}: '{}' is required ({})", user.origin_of(k.key), k.key, k.help);
      resolved.set(k.key, k.default_value);
    }
  }
  return resolved;
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& c : candidates) {
    // Compare whole dotted keys and also their last parts, so "optim.lr" finds
    // "optimizer.lr" and "optimizer.learning_rate" finds "optimizer.lr".
    size_t d = edit_distance(word, c);
    const size_t dot_w = word.rfind('.'), dot_c = c.rfind('.');
    if (dot_w != std::string_view::npos && dot_c != std::string::npos && word.substr(0, dot_w) == c.substr(0, dot_c)) {
      d = std::min(d, edit_distance(word.substr(dot_w + 1), std::string_view(c).substr(dot_c + 1)));
    }
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_distance <= limit ? best : std::string();
}

}  // namespace hone
