#include "hone/io/nanogpt.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "hone/io/hf.hpp"
#include "hone/io/json_file.hpp"
#include "hone/io/torch_file.hpp"

namespace hone {

namespace {

namespace fs = std::filesystem;

// Where the GPT's state dict lies among the archive's names.
std::string model_prefix(const TorchFile& file) {
  return file.contains("model._orig_mod.transformer.wte.weight") ? "model._orig_mod." : "model.";
}

class NanoGptCheckpoint final : public WeightSource {
 public:
  explicit NanoGptCheckpoint(const std::string& path) : file_(path), prefix_(model_prefix(file_)) {
    const Json& values = file_.values();
    HONE_CHECK(values.contains("model_args") && values["model_args"].is_object(),
               "{}: no model_args dict (not a nanoGPT checkpoint)", path);
    config_from(JsonFields(values["model_args"], path + ": model_args"));
    check_tensors();
    if (values.contains("iter_num") && values["iter_num"].is_number_integer()) {
      iterations_ = fmt::format(" (iter_num {})", values["iter_num"].get<int64_t>());
    }
  }

  const ModelConfig& config() const override { return config_; }
  DType stored_dtype() const override { return entry("tok_embeddings.weight").dtype; }
  std::string description() const override { return "nanoGPT checkpoint " + file_.path() + iterations_; }
  std::vector<std::string> notes() const override { return notes_; }

  void read(const std::string& name, const Tensor& dst) const override {
    const TensorFile::Entry& e = entry(name);
    read_stored({e.dtype, e.shape, e.bytes.data()}, dst);
  }

 private:
  // transformers' GPT-2 name of a hone parameter, under the checkpoint's prefix.
  std::string stored_name(const std::string& hone_name) const {
    const std::vector<HfTensor> tensors = hf_tensors_of(config_, hone_name);
    HONE_ASSERT(tensors.size() == 1);  // GPT-2's parameters are whole tensors
    return prefix_ + tensors[0].name;
  }
  const TensorFile::Entry& entry(const std::string& hone_name) const { return file_.entry(stored_name(hone_name)); }

  // The shape of tensor `name` (named in model_args' terms in errors).
  Shape shape_of(const std::string& name) const {
    HONE_CHECK(file_.contains(prefix_ + name), "{}: no tensor '{}{}'", file_.path(), prefix_, name);
    return file_.entry(prefix_ + name).shape;
  }

  void config_from(const JsonFields& args) {
    ModelConfig& c = config_;
    c.name = folder_name(fs::absolute(file_.path()).parent_path().string());  // "ckpt.pt" alone too
    c.family = Family::gpt2;
    c.vocab_size = args.integer("vocab_size");
    c.dim = args.integer("n_embd");
    c.n_layers = args.integer("n_layer");
    c.n_heads = c.n_kv_heads = args.integer("n_head");
    c.max_seq_len = args.integer("block_size");
    const bool bias = args.boolean("bias", true);  // GPTConfig's default
    c.norm = NormKind::layernorm;
    c.norm_bias = c.linear_bias = bias;
    c.norm_eps = 1e-5;
    c.position = PositionKind::learned;
    c.mlp = MlpKind::gelu;  // nn.GELU(): the exact one
    HONE_CHECK(c.dim > 0 && c.n_heads > 0 && c.n_layers > 0 && c.dim % c.n_heads == 0,
               "{}: n_embd {} is not a whole number of n_head {} heads", args.context(), c.dim, c.n_heads);
    const Shape wte = shape_of("transformer.wte.weight");
    HONE_CHECK(wte == Shape({c.vocab_size, c.dim}), "{}: vocab_size {} and n_embd {}, but transformer.wte.weight is {}",
               args.context(), c.vocab_size, c.dim, wte.str());
    // Its last layer there, before every layer's tensors are listed (a claim of a billion would be a billion names).
    const std::string last_layer = fmt::format("transformer.h.{}.ln_1.weight", c.n_layers - 1);
    HONE_CHECK(file_.contains(prefix_ + last_layer), "{}: n_layer {}, but {} has no tensor '{}{}'", args.context(),
               c.n_layers, file_.path(), prefix_, last_layer);
    c.ffn_dim = shape_of("transformer.h.0.mlp.c_fc.weight")[0];  // 4 · n_embd in nanoGPT's model.py
    // nanoGPT ties lm_head to wte (both names, one storage); an untied head has storage of its own.
    const std::string head = prefix_ + "lm_head.weight";
    c.tie_embeddings = !file_.contains(head) ||
                       file_.entry(head).bytes.data() == file_.entry(prefix_ + "transformer.wte.weight").bytes.data();
    const double dropout = args.number("dropout", 0.0);
    if (dropout > 0) notes_.push_back(fmt::format("dropout {}: hone trains without dropout", dropout));
  }

  // Every tensor the config implies, present with its shape and a dtype hone
  // reads; nothing else in the model's state dict but the causal masks and a
  // tied head.
  void check_tensors() const {
    std::vector<ImpliedTensor> implied;
    for (const ParameterSpec& spec : parameter_specs(config_)) implied.push_back({stored_name(spec.name), spec.shape});
    // Beside the model: the optimizer's state, best_val_loss (outside the prefix).
    const auto skipped = [&](const std::string& name) {
      return name.ends_with(".attn.bias") ||  // the causal masks, not .attn.c_attn.bias
             (config_.tie_embeddings && name == prefix_ + "lm_head.weight");
    };
    check_state_dict(file_, implied, prefix_, skipped, "model_args", "nanoGPT GPT", config_.n_layers);
  }

  TorchFile file_;
  std::string prefix_;
  ModelConfig config_;
  std::string iterations_;
  std::vector<std::string> notes_;
};

}  // namespace

bool is_nanogpt_checkpoint(const std::string& path) {
  const TorchFile file(path);
  return file.values().contains("model_args") && file.contains(model_prefix(file) + "transformer.wte.weight");
}

std::unique_ptr<WeightSource> open_nanogpt(const std::string& path) {
  return std::make_unique<NanoGptCheckpoint>(path);
}

}  // namespace hone
