#pragma once
// Hugging Face model folders: config.json and model.safetensors (or shards
// model-0000K-of-0000N.safetensors with model.safetensors.index.json), with the
// tensor names and layouts of transformers' LlamaForCausalLM (Llama 2/3/3.1/3.2),
// MistralForCausalLM, GPT2LMHeadModel and MptForCausalLM. bf16, f16 and f32
// tensors are read from the mapped files; export writes what transformers'
// save_pretrained writes, so that from_pretrained loads it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hone/config/config.hpp"
#include "hone/io/weights.hpp"

namespace hone {

// ---- config.json <-> ModelConfig ----

struct HfConfig {
  std::string model_type;  // llama, mistral, gpt2, mpt
  ModelConfig config;
  // What the import could not carry over exactly, e.g. Mistral's sliding window.
  std::vector<std::string> notes;
};
// Reads a parsed config.json (`path` names it in errors; `name` becomes the
// ModelConfig's name). Unsupported model types and options are errors naming the key.
HfConfig hf_config_from_json(const Json& j, const std::string& path, const std::string& name);
// The ModelConfig of the folder `dir`.
ModelConfig read_hf_config(const std::string& dir);
// config.json for `config` with weights in `dtype`; throws when the config is
// not one that transformers' class for its family can express (naming the field).
Json hf_config_to_json(const ModelConfig& config, DType dtype);
// transformers' torch_dtype string: "float32", "bfloat16", "float16".
std::string hf_torch_dtype(DType dtype);

// ---- weight names ----

// One tensor of a Hugging Face checkpoint and where it lies in a hone parameter:
// rows [row_begin, row_begin + rows) (q, k and v of the fused attn.qkv; gate and
// up of SwiGLU's mlp.up), stored transposed for GPT-2's Conv1D ([in, out]).
struct HfTensor {
  std::string name;
  Shape shape;  // as the checkpoint stores it
  int64_t row_begin = 0;
  int64_t rows = 0;
  bool transposed = false;
};
// The Hugging Face tensors of hone parameter `hone_name`, in the order their rows
// appear in it. Names are those save_pretrained writes (GPT-2's with the
// "transformer." prefix).
std::vector<HfTensor> hf_tensors_of(const ModelConfig& config, const std::string& hone_name);

// ---- folders ----

// A Hugging Face folder as a weight source. Opening checks config.json and every
// tensor (present, shape, dtype; no tensor the architecture lacks) before any is read.
std::unique_ptr<WeightSource> open_hf(const std::string& dir);
void load_hf_weights(const std::string& dir, Transformer& model);

// The tokenizer's special token ids. config.json and generation_config.json name
// them: without them transformers takes its class's defaults (LlamaConfig's BOS 1
// and EOS 2), and generate() would stop on the wrong token.
struct SpecialTokenIds {
  std::optional<int32_t> bos, eos, pad;
  // More tokens generation stops at, written with `eos` as a list (as Llama 3
  // Instruct's config has it): the token a fine-tuned model ends its answers
  // with (a chat format's end of turn, e.g. <|eot_id|>), or a config's further EOS ids.
  std::vector<int32_t> more_eos;
};

struct HfExportOptions {
  std::optional<DType> dtype;          // default: the source's stored dtype
  uint64_t shard_bytes = 5'000'000'000;  // transformers' default max_shard_size, "5GB"
  SpecialTokenIds special_tokens;      // a companion generation_config.json's ids take precedence
};
struct HfExportSummary {
  DType dtype = DType::f32;
  std::vector<std::string> files;  // written into the folder, by name
  uint64_t tensor_bytes = 0;
  int64_t tensors = 0;
  std::vector<std::string> notes;  // what a reader of the folder should know
};
// Writes the folder `dir` (which must not exist, or be empty) under a temporary
// name and renames it into place when complete; the source's companion files
// (tokenizer, generation config) are copied along (see with_tokenizer_from).
HfExportSummary export_hf(const WeightSource& source, const std::string& dir, const HfExportOptions& options = {});
// The special token ids a Hugging Face folder's config.json names (none where
// `path` is no such folder): what an export of it keeps where no tokenizer or
// generation_config.json names them. A list of EOS ids gives its first as EOS,
// the rest as more_eos.
SpecialTokenIds hf_config_special_ids(const std::string& path);
// The ids a config.json or generation_config.json object names, read the same way.
SpecialTokenIds special_ids_in(const Json& config);

// What export_hf would refuse of a model of `config` into `dir` (a folder in
// the way, a config the family's transformers class cannot express), checked
// before a run trains the model it exports.
void check_hf_export(const ModelConfig& config, const std::string& dir);
HfExportSummary export_hf(const Transformer& model, const std::string& dir, const HfExportOptions& options = {});

}  // namespace hone
