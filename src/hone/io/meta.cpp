#include "hone/io/meta.hpp"

#include <fmt/format.h>

#include <filesystem>

#include "hone/io/json_file.hpp"
#include "hone/io/torch_file.hpp"

namespace hone {

namespace fs = std::filesystem;

namespace {

constexpr const char* kParams = "params.json";
constexpr const char* kWeights = "consolidated.00.pth";

// One tensor of Meta's state dict and the rows of a hone parameter it fills;
// heads > 0: query or key rows, `heads` heads in interleaved RoPE order.
struct MetaTensor {
  std::string name;
  Shape shape;
  int64_t row_begin = 0;
  int64_t heads = 0;
};

// consolidated.00.pth, refused before anything is read where model-parallel
// shards (consolidated.01.pth, ...) follow it.
std::string single_weights_file(const std::string& dir) {
  HONE_CHECK(!fs::exists(fs::path(dir) / "consolidated.01.pth"),
             "{}: model-parallel shards (consolidated.00.pth, consolidated.01.pth, ...); hone reads Meta's "
             "single-file checkpoints: convert sharded ones to a Hugging Face folder first",
             dir);
  return (fs::path(dir) / kWeights).string();
}

class MetaFolder final : public WeightSource {
 public:
  explicit MetaFolder(const std::string& dir) : dir_(dir), weights_(single_weights_file(dir)) {
    const std::string params_path = (fs::path(dir) / kParams).string();
    const Json params = read_json_file(params_path);
    const JsonFields p(params, params_path);
    config_from(p);
    check_tensors();
    companions_ = companion_files_in(dir);
  }

  const ModelConfig& config() const override { return config_; }
  DType stored_dtype() const override { return weights_.entry("tok_embeddings.weight").dtype; }
  std::vector<std::string> companion_files() const override { return companions_; }
  std::string description() const override { return "Meta Llama folder " + dir_; }
  std::vector<std::string> notes() const override { return notes_; }

  void read(const std::string& name, const Tensor& dst) const override {
    for (const MetaTensor& t : tensors_of(name)) {
      const TensorFile::Entry& e = weights_.entry(t.name);
      read_stored_rows({e.dtype, e.shape, e.bytes.data()}, t.row_begin, t.heads, dst);
    }
  }

 private:
  void config_from(const JsonFields& p) {
    const auto& emb = weights_.entry("tok_embeddings.weight");
    HONE_CHECK(emb.shape.ndim() == 2, "{}: tok_embeddings.weight has shape {}", weights_.path(), emb.shape.str());
    ModelConfig& c = config_;
    c.name = folder_name(dir_);
    c.family = Family::llama;
    c.vocab_size = emb.shape[0];
    c.dim = p.integer("dim");
    c.n_layers = p.integer("n_layers");
    c.n_heads = p.integer("n_heads");
    c.n_kv_heads = p.integer("n_kv_heads", c.n_heads);
    HONE_CHECK(c.dim == emb.shape[1], "{}: dim {} but tok_embeddings.weight is {}", p.context(), c.dim,
               emb.shape.str());
    const int64_t vocab = p.integer("vocab_size", -1);  // Llama 2's is -1: the tokenizer's size
    HONE_CHECK(vocab <= 0 || vocab == c.vocab_size, "{}: vocab_size {} but tok_embeddings.weight is {}", p.context(),
               vocab, emb.shape.str());
    HONE_CHECK(c.dim > 0 && c.n_layers > 0 && c.n_heads > 0 && c.n_kv_heads > 0 && c.dim % c.n_heads == 0 &&
                   c.n_heads % c.n_kv_heads == 0,
               "{}: dim {}, n_heads {}, n_kv_heads {} do not make whole heads shared by whole groups", p.context(),
               c.dim, c.n_heads, c.n_kv_heads);
    // Its last layer there, before every layer's tensors are listed (a claim of a billion would be a billion names).
    const std::string last_layer = fmt::format("layers.{}.attention_norm.weight", c.n_layers - 1);
    HONE_CHECK(weights_.contains(last_layer), "{}: n_layers {}, but {} has no tensor '{}'", p.context(), c.n_layers,
               weights_.path(), last_layer);
    // The MLP's width from the tensor (Meta derives it from multiple_of and ffn_dim_multiplier).
    const std::string w1 = "layers.0.feed_forward.w1.weight";
    HONE_CHECK(weights_.contains(w1), "{}: no tensor '{}'", weights_.path(), w1);
    c.ffn_dim = weights_.entry(w1).shape[0];
    c.norm_eps = p.number("norm_eps", 1e-5);
    c.rope_theta = p.number("rope_theta", 10000.0);  // Llama 2's params.json has none: its code's 10000
    if (p.boolean("use_scaled_rope", false)) {
      // Meta's reference code scales by 8 for every model with use_scaled_rope;
      // the Hugging Face conversions of Llama 3.2 1B and 3B say 32.
      c.rope_scaling = RopeScaling{.factor = p.number("rope_scaling_factor", 8.0),
                                   .low_freq_factor = 1.0,
                                   .high_freq_factor = p.number("rope_high_freq_factor", 4.0),
                                   .original_max_position = 8192};
      notes_.push_back(fmt::format("RoPE scaled by {} as Meta's reference code does (Llama 3.2's Hugging Face "
                                   "configs say 32)",
                                   c.rope_scaling.factor));
    }
    const int64_t generation_context = c.rope_scaling.enabled() ? 131072 : c.vocab_size >= 128000 ? 8192 : 4096;
    c.max_seq_len = p.integer("max_seq_len", generation_context);
    if (!p.has("max_seq_len")) {
      notes_.push_back(fmt::format("max_seq_len {}: params.json gives no context length", c.max_seq_len));
    }
    c.tie_embeddings = !weights_.contains("output.weight");
  }

  std::vector<MetaTensor> tensors_of(const std::string& hone_name) const {
    const ModelConfig& c = config_;
    const int64_t D = c.dim, hd = c.head_dim(), H = c.n_heads, KV = c.n_kv_heads, F = c.ffn_dim;
    if (hone_name == "tok_embeddings.weight") return {{hone_name, {c.vocab_size, D}}};
    if (hone_name == "norm.weight") return {{hone_name, {D}}};
    if (hone_name == "lm_head.weight") return {{"output.weight", {c.vocab_size, D}}};
    // layers.N.PART, under the same layers.N. prefix in Meta's names.
    const size_t dot = hone_name.find('.', 7);
    HONE_CHECK(hone_name.starts_with("layers.") && dot != std::string::npos, "{}: no tensor for parameter '{}'",
               description(), hone_name);
    const std::string p = hone_name.substr(0, dot + 1), part = hone_name.substr(dot + 1);
    if (part == "attn_norm.weight") return {{p + "attention_norm.weight", {D}}};
    if (part == "mlp_norm.weight") return {{p + "ffn_norm.weight", {D}}};
    if (part == "attn.qkv.weight") {
      return {{p + "attention.wq.weight", {H * hd, D}, 0, H},
              {p + "attention.wk.weight", {KV * hd, D}, H * hd, KV},
              {p + "attention.wv.weight", {KV * hd, D}, (H + KV) * hd}};
    }
    if (part == "attn.out.weight") return {{p + "attention.wo.weight", {D, H * hd}}};
    if (part == "mlp.up.weight") {
      return {{p + "feed_forward.w1.weight", {F, D}}, {p + "feed_forward.w3.weight", {F, D}, F}};  // gate, up
    }
    if (part == "mlp.down.weight") return {{p + "feed_forward.w2.weight", {D, F}}};
    fail("{}: no tensor for parameter '{}'", description(), hone_name);
  }

  // Every tensor the config implies, present with its shape and a dtype hone
  // reads; nothing else but RoPE's precomputed table (rope.freqs, Llama 2).
  void check_tensors() const {
    std::vector<ImpliedTensor> implied;
    for (const ParameterSpec& spec : parameter_specs(config_)) {
      for (const MetaTensor& t : tensors_of(spec.name)) implied.push_back({t.name, t.shape});
    }
    check_state_dict(weights_, implied, "", [](const std::string& name) { return name == "rope.freqs"; },
                     kParams, "Llama", config_.n_layers);
  }

  std::string dir_;
  TorchFile weights_;
  ModelConfig config_;
  std::vector<std::string> notes_;
  std::vector<std::string> companions_;
};

}  // namespace

bool is_meta_folder(const std::string& dir) {
  return fs::exists(fs::path(dir) / kParams) && fs::exists(fs::path(dir) / kWeights);
}

std::unique_ptr<WeightSource> open_meta(const std::string& dir) { return std::make_unique<MetaFolder>(dir); }

}  // namespace hone
