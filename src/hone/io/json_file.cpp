#include "hone/io/json_file.hpp"

#include <cmath>
#include <fstream>

#include "hone/core/error.hpp"
#include "hone/core/files.hpp"
#include "hone/core/json_text.hpp"

namespace hone {

Json read_json_file(const std::string& path) {
  return parse_json_text<Json>(read_file(path), path);  // a folder in the file's place named as such
}

WrittenFile write_json_file(const std::string& path, const Json& j) {
  AtomicFile out(path);
  out.write(j.dump(2) + "\n");
  return out.commit();
}

JsonFields::JsonFields(const Json& object, std::string context) : json_(object), context_(std::move(context)) {
  HONE_CHECK(json_.is_object(), "{}: expected a JSON object", context_);
}

bool JsonFields::has(const std::string& key) const { return json_.contains(key) && !json_[key].is_null(); }

const Json& JsonFields::at(const std::string& key) const {
  HONE_CHECK(has(key), "{}: missing key '{}'", context_, key);
  return json_[key];
}

int64_t JsonFields::integer(const std::string& key) const {
  const Json& v = at(key);
  // 4096.0 is accepted as 4096 (some exporters write integers as floats); 4096.5 is not.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    HONE_CHECK(std::abs(d) < 0x1p53 && d == std::floor(d), "{}: '{}' must be an integer, got {}", context_, key,
               v.dump());
    return int64_t(d);
  }
  HONE_CHECK(v.is_number_integer(), "{}: '{}' must be an integer, got {}", context_, key, v.dump());
  return v.get<int64_t>();
}

int64_t JsonFields::integer(const std::string& key, int64_t fallback) const {
  return has(key) ? integer(key) : fallback;
}

int64_t JsonFields::count(const std::string& key) const {
  const int64_t v = integer(key);
  HONE_CHECK(v >= 0, "{}: '{}' must be 0 or more, got {}", context_, key, v);
  return v;
}

int64_t JsonFields::count(const std::string& key, int64_t fallback) const { return has(key) ? count(key) : fallback; }

double JsonFields::number(const std::string& key) const {
  const Json& v = at(key);
  HONE_CHECK(v.is_number(), "{}: '{}' must be a number, got {}", context_, key, v.dump());
  return v.get<double>();
}

double JsonFields::number(const std::string& key, double fallback) const { return has(key) ? number(key) : fallback; }

bool JsonFields::boolean(const std::string& key) const {
  const Json& v = at(key);
  HONE_CHECK(v.is_boolean(), "{}: '{}' must be true or false, got {}", context_, key, v.dump());
  return v.get<bool>();
}

bool JsonFields::boolean(const std::string& key, bool fallback) const { return has(key) ? boolean(key) : fallback; }

std::string JsonFields::string(const std::string& key) const {
  const Json& v = at(key);
  HONE_CHECK(v.is_string(), "{}: '{}' must be a string, got {}", context_, key, v.dump());
  return v.get<std::string>();
}

std::string JsonFields::string(const std::string& key, const std::string& fallback) const {
  return has(key) ? string(key) : fallback;
}

JsonFields JsonFields::object(const std::string& key) const {
  const Json& v = at(key);
  HONE_CHECK(v.is_object(), "{}: '{}' must be an object, got {}", context_, key, v.dump());
  return JsonFields(v, context_ + ": " + key);
}

}  // namespace hone
