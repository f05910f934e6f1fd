# Writes OUTPUT, a C++ file holding every configs/**/*.yaml under CONFIG_DIR as
# {name, text} pairs ("gpt2/124M_pretrain"), so the hone binary carries its
# built-in configs wherever it is copied.
file(GLOB_RECURSE files RELATIVE "${CONFIG_DIR}" "${CONFIG_DIR}/*.yaml")
list(SORT files)
set(body "")
foreach(file IN LISTS files)
  file(READ "${CONFIG_DIR}/${file}" text)
  string(FIND "${text}" ")hone_yaml\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${file} contains the raw-string delimiter )hone_yaml\"")
  endif()
  string(REGEX REPLACE "\\.yaml$" "" name "${file}")
  string(APPEND body "    {\"${name}\", R\"hone_yaml(${text})hone_yaml\"},\n")
endforeach()
file(WRITE "${OUTPUT}.tmp" "// Generated from configs/ by cmake/embed_configs.cmake. Do not edit.
#include \"hone/cli/builtin_configs.hpp\"

namespace hone::cli {

const std::vector<BuiltinConfig>& builtin_configs() {
  static const std::vector<BuiltinConfig> configs = {
${body}  };
  return configs;
}

}  // namespace hone::cli
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
