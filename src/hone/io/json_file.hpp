#pragma once
// JSON files that hone reads (config.json, model.json, index files) and writes,
// and typed access to their fields with errors that name the file and the key.
#include <cstdint>
#include <string>

#include "hone/config/config.hpp"
#include "hone/io/atomic_file.hpp"

namespace hone {

// Parses `path`; throws hone::Error naming it when it is missing or not JSON.
Json read_json_file(const std::string& path);
// Writes j (indented, with a final newline) atomically.
WrittenFile write_json_file(const std::string& path, const Json& j);

// A JSON object and where it came from ("config.json", "config.json: attn_config").
// Every accessor throws hone::Error naming the place, the key and the expected type;
// a key whose value is null counts as absent.
class JsonFields {
 public:
  JsonFields(const Json& object, std::string context);

  const std::string& context() const { return context_; }
  const Json& json() const { return json_; }
  bool has(const std::string& key) const;
  int64_t integer(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback) const;
  // An integer of at least 0 (a step, a byte count).
  int64_t count(const std::string& key) const;
  int64_t count(const std::string& key, int64_t fallback) const;
  double number(const std::string& key) const;
  double number(const std::string& key, double fallback) const;
  bool boolean(const std::string& key) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  JsonFields object(const std::string& key) const;

 private:
  const Json& at(const std::string& key) const;

  const Json& json_;
  std::string context_;
};

}  // namespace hone
