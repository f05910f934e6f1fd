#pragma once
// A model's weights by hone parameter name, wherever they are stored: a Hugging
// Face folder, a hone model folder, an llm.c or llama2.c file, or a Transformer
// in memory. Readers convert one parameter at a time straight from the mapped
// file, so converting a model needs memory for its largest tensor, not for all
// of it, and loading one into a Transformer writes each value once.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hone/io/tensor_file.hpp"
#include "hone/model/transformer.hpp"

namespace hone {

struct ParameterSpec {
  std::string name;
  Shape shape;
};
// The parameters of a Transformer of `config`, in declaration order.
std::vector<ParameterSpec> parameter_specs(const ModelConfig& config);

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const ModelConfig& config() const = 0;
  // The dtype the weights are stored in: what a conversion writes by default.
  virtual DType stored_dtype() const = 0;
  // Fills dst (a CPU f32 tensor of the parameter's shape) with parameter `name`.
  virtual void read(const std::string& name, const Tensor& dst) const = 0;
  // Files that belong with the weights (tokenizer, generation config).
  virtual std::vector<std::string> companion_files() const { return {}; }
  // "Hugging Face llama folder PATH", for messages.
  virtual std::string description() const = 0;
  // What the conversion could not carry over exactly (e.g. Mistral's sliding window).
  virtual std::vector<std::string> notes() const { return {}; }
  // The folders (canonical paths) of the LoRA adapters merged into these
  // weights: a LoRA run's checkpoint reads as its base with its adapters merged.
  virtual std::vector<std::string> merged_adapters() const { return {}; }
};

// Copies every weight of `source` into model.params(); a model of another shape
// is an error naming the first parameter that differs. With `progress` shown, a
// line on a terminal counts the parameters read (an 8B model's 16 GB take a
// while from a network disk).
enum class LoadProgress { hidden, shown };
void load_weights(const WeightSource& source, Transformer& model, LoadProgress progress = LoadProgress::hidden);

// A Transformer's weights as a source (exporting a model in memory). A model
// with LoRA adapters must have them merged (Transformer::merge_lora) first.
std::unique_ptr<WeightSource> transformer_weights(const Transformer& model);
// `source` with the tokenizer files of `dir` as its companion files instead of
// its own; a folder without any is an error.
std::unique_ptr<WeightSource> with_tokenizer_from(std::unique_ptr<WeightSource> source, const std::string& dir);
// `source` with `files` as its companion files instead of its own.
std::unique_ptr<WeightSource> with_companion_files(std::unique_ptr<WeightSource> source,
                                                   std::vector<std::string> files);
// `source` calling on_read(elements read so far, the model's parameter count)
// after each parameter it reads (a conversion reads each once, in order).
using ReadProgress = std::function<void(int64_t read, int64_t total)>;
std::unique_ptr<WeightSource> with_read_progress(std::unique_ptr<WeightSource> source, ReadProgress on_read);

// A tensor as a file stores it: dtype, shape and bytes (in a mapped file).
struct StoredTensor {
  DType dtype;
  Shape shape;
  const std::byte* data;
};
// src converted into dst (CPU f32, the same number of elements).
void read_stored(const StoredTensor& src, const Tensor& dst);
// src [a, b] converted and transposed into dst [b, a].
void read_stored_transposed(const StoredTensor& src, const Tensor& dst);
// src [heads·hd, cols], each head's rows in Meta's interleaved RoPE order (the
// pairs of dimensions 0 and 1, 2 and 3, ...: llama2.c's and Meta's checkpoints),
// converted into dst in rotate-half order (Hugging Face's and hone's: every
// pair's first dimension, then every pair's second).
void read_stored_rotate_half(const StoredTensor& src, int64_t heads, const Tensor& dst);
// src into rows [row_begin, row_begin + src.shape[0]) of dst, a parameter that
// several stored tensors fill (the fused qkv, SwiGLU's gate and up); heads > 0:
// query or key rows in Meta's interleaved RoPE order (read_stored_rotate_half).
void read_stored_rows(const StoredTensor& src, int64_t row_begin, int64_t heads, const Tensor& dst);
// dst [b, a] = srcᵀ for 2-D CPU tensors of one dtype (GPT-2's Conv1D layout).
void transpose(const Tensor& src, const Tensor& dst);

// A tensor a model's config implies in a file, by the file's name for it.
struct ImpliedTensor {
  std::string name;
  Shape shape;
};
// Checks a single-file state dict (Meta's consolidated.00.pth, nanoGPT's
// ckpt.pt) against the tensors its config implies, before any is read: each
// present, of a float dtype hone reads and of its shape; any other tensor whose
// name starts with `prefix` is an error unless `skipped` (buffers) says so.
// `config` names where the sizes came from and `model` what they describe,
// for the errors ("params.json", "Llama").
void check_state_dict(const TensorFile& file, const std::vector<ImpliedTensor>& implied, const std::string& prefix,
                      const std::function<bool(const std::string&)>& skipped, const std::string& config,
                      const std::string& model, int64_t layers);

// The last component of a folder path ("runs/llama/" and "runs/llama" give
// "llama"), which names a converted model.
std::string folder_name(const std::string& dir);

// Files that travel with a model's weights when it is converted: tokenizers, the
// chat template and the generation config, by the names Hugging Face gives them.
const std::vector<std::string>& companion_file_names();
// The companion files present in `dir` (OpenAI's GPT-2 encoder.json and
// vocab.bpe too, where Hugging Face's names are not there).
std::vector<std::string> companion_files_in(const std::string& dir);
// The name a companion file is written under: its own, but OpenAI's GPT-2
// encoder.json and vocab.bpe hold what Hugging Face's vocab.json and merges.txt
// hold, and are written as those (which transformers reads), and a
// SentencePiece NAME.model (spm_train's) is written as tokenizer.model.
std::string companion_name(const std::string& file);
// The companion files of a tokenizer path: those in the folder, or the file
// itself when it is written under a companion's name (a tiktoken rank file is not).
std::vector<std::string> tokenizer_companion_files(const std::string& tokenizer_path);

}  // namespace hone
