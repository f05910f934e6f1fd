#include "hone/config/config.hpp"

#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <fstream>
#include <sstream>

#include "hone/core/error.hpp"

namespace hone {

namespace {

// YAML 1.2 core-schema scalars: plain "12" is an integer, "1e-3" a number,
// "true" a boolean, "~"/"null" null; quoted scalars stay strings.
Json scalar_to_json(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted
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

Json yaml_to_json(const YAML::Node& node, const std::string& origin) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Scalar: return scalar_to_json(node);
    case YAML::NodeType::Sequence: {
      Json list = Json::array();
      for (const auto& item : node) list.push_back(yaml_to_json(item, origin));
      return list;
    }
    case YAML::NodeType::Map: {
      Json map = Json::object();
      for (const auto& kv : node) {
        const std::string key = kv.first.as<std::string>();
        HONE_CHECK(!map.contains(key), "{}:{}: key '{}' appears twice", origin, kv.first.Mark().line + 1, key);
        map[key] = yaml_to_json(kv.second, origin);
      }
      return map;
    }
  }
  return nullptr;
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

bool matches(const Json& v, ValueType type) {
  switch (type) {
    case ValueType::integer: return v.is_number_integer();
    case ValueType::number: return v.is_number();
    case ValueType::boolean: return v.is_boolean();
    case ValueType::string: return v.is_string();
    case ValueType::number_list:
      return v.is_array() && std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_number(); });
    case ValueType::string_list:
      return v.is_array() && std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_string(); });
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
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    fail("{}:{}:{}: invalid YAML: {}", origin, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  Json tree = yaml_to_json(root, origin);
  HONE_CHECK(tree.is_null() || tree.is_object(), "{}: a config must be a mapping of keys to values", origin);
  if (tree.is_object()) c.tree_ = std::move(tree);
  return c;
}

Config Config::from_file(const std::string& path) {
  std::ifstream in(path);
  HONE_CHECK(in.good(), "{}: cannot read config file", path);
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
  const size_t eq = assignment.find('=');
  HONE_CHECK(eq != std::string_view::npos && eq > 0, "override '{}' is not of the form key=value", assignment);
  const std::string key(assignment.substr(0, eq));
  HONE_CHECK(assignment.substr(eq + 1) != "-", "the command line: {}=-: '-' stands for an unset key in hone ls; "
             "unset one with {}=null", key, key);
  Config value = from_yaml("v: " + std::string(assignment.substr(eq + 1)), "override " + key);
  set(key, value.tree_["v"]);
  overridden_.push_back(key);
}

const std::string& Config::origin_of(std::string_view key) const {
  static const std::string command_line = "the command line";
  for (const std::string& o : overridden_) {
    if (key == o || (key.starts_with(o) && key[o.size()] == '.')) return command_line;
  }
  return origin_;
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

template <typename T>
T Config::get(std::string_view key) const {
  const Json* v = find(key);
  HONE_CHECK(v != nullptr && !v->is_null(), "{}: '{}' is not set", origin_, key);
  try {
    if constexpr (std::is_same_v<T, double>) {
      HONE_CHECK(v->is_number(), "{}: '{}' must be a number, got {}", origin_, key, v->dump());
    } else if constexpr (std::is_same_v<T, int64_t>) {
      HONE_CHECK(v->is_number_integer(), "{}: '{}' must be an integer, got {}", origin_, key, v->dump());
    }
    return v->get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: '{}' has the wrong type: {}", origin_, key, v->dump());
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
    out << v.get<std::string>();
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
  return *this;
}

Config Schema::resolve(const Config& user) const {
  std::vector<std::string> known;
  for (const KeySpec& k : keys_) known.push_back(k.key);

  std::set<std::string> mappings;
  for (const KeySpec& k : keys_) {
    if (k.type == ValueType::mapping) mappings.insert(k.key);
  }
  std::vector<std::pair<std::string, const Json*>> given;
  flatten(user.tree(), "", mappings, given);
  for (const auto& [key, value] : given) {
    const std::string& origin = user.origin_of(key);
    auto spec = std::find_if(keys_.begin(), keys_.end(), [&](const KeySpec& k) { return k.key == key; });
    if (spec == keys_.end()) {
      // A mapping given where a section was expected is still a typo of the section's keys.
      const std::string suggestion = closest_match(key, known);
      fail("{}: unknown key '{}'{}", origin, key,
           suggestion.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", suggestion));
    }
    if (value->is_null()) continue;
    // An integer is a fine number.
    HONE_CHECK(matches(*value, spec->type), "{}: '{}' must be {}, got {}", origin, key, type_name(spec->type),
               value->dump());
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
  Config resolved = user;
  for (const KeySpec& k : keys_) {
    const Json* v = user.find(k.key);
    if (v == nullptr || v->is_null()) {
      HONE_CHECK(!k.required, "{}: '{}' is required ({})", user.origin(), k.key, k.help);
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
