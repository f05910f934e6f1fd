// libFuzzer target: a Hugging Face config.json. It either fails with a
// hone::Error or gives a valid ModelConfig whose weight names can be listed and
// which (when its family can express it) exports back to a config.json that
// reads as the same model.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "hone/core/error.hpp"
#include "hone/io/hf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const hone::Json j = hone::Json::parse(std::string_view(reinterpret_cast<const char*>(data), size), nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    const hone::HfConfig hf = hone::hf_config_from_json(j, "config.json", "fuzz");
    hf.config.validate();
    for (const char* name : {"tok_embeddings.weight", "layers.0.attn.qkv.weight", "layers.0.mlp.up.weight",
                             "layers.0.mlp.down.weight", "layers.0.attn_norm.weight", "norm.weight"}) {
      int64_t rows = 0;
      for (const auto& t : hone::hf_tensors_of(hf.config, name)) rows += t.rows;
      if (rows <= 0) __builtin_trap();
    }
    hone::Json back;
    try {
      back = hone::hf_config_to_json(hf.config, hone::DType::bf16);
    } catch (const hone::Error&) {
      return 0;  // a config hone reads but transformers' class cannot express
    }
    const hone::HfConfig again = hone::hf_config_from_json(back, "exported config.json", "fuzz");
    if (hone::hf_config_to_json(again.config, hone::DType::bf16) != back) __builtin_trap();
  } catch (const hone::Error&) {
  }
  return 0;
}
