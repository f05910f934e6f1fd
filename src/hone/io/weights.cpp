#include "hone/io/weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <fmt/ranges.h>

#include "hone/core/progress_line.hpp"
#include "hone/ops/ops.hpp"

namespace hone {

namespace fs = std::filesystem;

std::vector<ParameterSpec> parameter_specs(const ModelConfig& c) {
  // Transformer::declare_parameters's order and shapes (tests/io checks they agree).
  std::vector<ParameterSpec> specs;
  const bool layernorm_bias = c.norm == NormKind::layernorm && c.norm_bias;
  auto norm = [&](const std::string& prefix) {
    specs.push_back({prefix + ".weight", {c.dim}});
    if (layernorm_bias) specs.push_back({prefix + ".bias", {c.dim}});
  };
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in) {
    specs.push_back({prefix + ".weight", {out, in}});
    if (c.linear_bias) specs.push_back({prefix + ".bias", {out}});
  };
  specs.push_back({"tok_embeddings.weight", {c.vocab_size, c.dim}});
  if (c.position == PositionKind::learned) specs.push_back({"pos_embeddings.weight", {c.max_seq_len, c.dim}});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string prefix = "layers." + std::to_string(i);
    norm(prefix + ".attn_norm");
    linear(prefix + ".attn.qkv", c.qkv_dim(), c.dim);
    linear(prefix + ".attn.out", c.dim, c.n_heads * c.head_dim());
    norm(prefix + ".mlp_norm");
    linear(prefix + ".mlp.up", c.mlp_up_dim(), c.dim);
    linear(prefix + ".mlp.down", c.dim, c.ffn_dim);
  }
  norm("norm");
  if (!c.tie_embeddings) specs.push_back({"lm_head.weight", {c.vocab_size, c.dim}});
  return specs;
}

void load_weights(const WeightSource& source, Transformer& model, LoadProgress progress) {
  ParameterProgress line("loading " + source.description());
  const int64_t total = source.config().num_params();
  int64_t read = 0;
  const std::vector<ParameterSpec> specs = parameter_specs(source.config());
  const auto& params = model.params().all();
  HONE_CHECK(specs.size() == params.size(), "{} has {} parameters, the model {} (another architecture?)",
             source.description(), specs.size(), params.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const Parameter& p = params[i];
    HONE_CHECK(specs[i].name == p.name && specs[i].shape == p.whole_shape,
               "{} has parameter '{}' {} where the model has '{}' {} (another architecture?)", source.description(),
               specs[i].name, specs[i].shape.str(), p.name, p.whole_shape.str());
    const bool whole_here = !model.params().sharded() && !model.params().split();
    const bool readable = p.value.dtype() == DType::f32 || p.value.dtype() == DType::bf16;
    // A NaN or an infinity (a diverged run's weights, a damaged file) would train, generate and
    // evaluate NaN without a word: the sum of squares, in double, is finite exactly when every value is.
    const auto check_finite = [&](const Tensor& values) {
      HONE_CHECK(std::isfinite(ops::sum_squares(values)),
                 "{}: parameter '{}' holds NaN or infinite values (the weights of a diverged run, or a damaged "
                 "file)",
                 source.description(), p.name);
    };
    if (whole_here && p.value.device().is_cpu() && readable) {
      source.read(p.name, p.value);  // straight from the file into the weights (fp32, or LoRA's bf16 base)
      check_finite(p.value);
    } else {
      Tensor staged = Tensor::empty(p.whole_shape, DType::f32);
      source.read(p.name, staged);
      check_finite(staged);
      model.params().write(p, staged);
    }
    read += p.whole_shape.numel();
    if (progress == LoadProgress::shown) line.update(read, total);
  }
  model.params().sync_compute();
}

namespace {

class TransformerWeights final : public WeightSource {
 public:
  explicit TransformerWeights(const Transformer& model) : model_(model) {}
  const ModelConfig& config() const override { return model_.config(); }
  // fp32 master weights, or LoRA's base kept in bf16.
  DType stored_dtype() const override { return model_.params().values().dtype(); }
  void read(const std::string& name, const Tensor& dst) const override {
    const Parameter* p = model_.params().find(name);
    HONE_CHECK(p != nullptr, "the model has no parameter '{}'", name);
    Tensor host = p->value.device().is_cpu() ? p->value : p->value.to(Device::cpu());
    ops::cast(host, dst);
  }
  std::string description() const override { return fmt::format("model {} in memory", model_.config().name); }

 private:
  const Transformer& model_;
};

// Passes everything on to `source`; the decorators below override one thing.
class ForwardingSource : public WeightSource {
 public:
  explicit ForwardingSource(std::unique_ptr<WeightSource> source) : source_(std::move(source)) {}
  const ModelConfig& config() const override { return source_->config(); }
  DType stored_dtype() const override { return source_->stored_dtype(); }
  void read(const std::string& name, const Tensor& dst) const override { source_->read(name, dst); }
  std::vector<std::string> companion_files() const override { return source_->companion_files(); }
  std::string description() const override { return source_->description(); }
  std::vector<std::string> notes() const override { return source_->notes(); }
  std::vector<std::string> merged_adapters() const override { return source_->merged_adapters(); }

 protected:
  std::unique_ptr<WeightSource> source_;
};

class WithTokenizer final : public ForwardingSource {
 public:
  WithTokenizer(std::unique_ptr<WeightSource> source, std::vector<std::string> files)
      : ForwardingSource(std::move(source)), files_(std::move(files)) {}
  std::vector<std::string> companion_files() const override { return files_; }

 private:
  std::vector<std::string> files_;
};

class WithReadProgress final : public ForwardingSource {
 public:
  WithReadProgress(std::unique_ptr<WeightSource> source, ReadProgress on_read)
      : ForwardingSource(std::move(source)), on_read_(std::move(on_read)) {}
  void read(const std::string& name, const Tensor& dst) const override {
    source_->read(name, dst);
    read_ += dst.numel();
    on_read_(read_, config().num_params());
  }

 private:
  ReadProgress on_read_;
  mutable int64_t read_ = 0;  // elements so far
};

}  // namespace

std::unique_ptr<WeightSource> transformer_weights(const Transformer& model) {
  // The base weights alone would silently drop what the adapters learned.
  if (model.lora()) {
    for (const Parameter& p : model.trainable_params().all()) {
      HONE_CHECK(!p.name.ends_with(".b") || ops::sum_squares(p.value) == 0,
                 "model {}: LoRA adapter '{}' is not merged into the base weights (merge_lora() first)",
                 model.config().name, p.name);
    }
  }
  return std::make_unique<TransformerWeights>(model);
}

std::unique_ptr<WeightSource> with_tokenizer_from(std::unique_ptr<WeightSource> source, const std::string& dir) {
  std::vector<std::string> files = companion_files_in(dir);
  HONE_CHECK(!files.empty(), "{}: no tokenizer files ({})", dir, fmt::join(companion_file_names(), ", "));
  return with_companion_files(std::move(source), std::move(files));
}

std::unique_ptr<WeightSource> with_companion_files(std::unique_ptr<WeightSource> source,
                                                   std::vector<std::string> files) {
  return std::make_unique<WithTokenizer>(std::move(source), std::move(files));
}

std::unique_ptr<WeightSource> with_read_progress(std::unique_ptr<WeightSource> source, ReadProgress on_read) {
  return std::make_unique<WithReadProgress>(std::move(source), std::move(on_read));
}

void read_stored(const StoredTensor& src, const Tensor& dst) {
  HONE_CHECK(src.shape.numel() == dst.numel(), "cannot read {} elements into {}", src.shape.numel(),
             dst.shape().str());
  ops::cast(src.data, src.dtype, dst);
}

void read_stored_transposed(const StoredTensor& src, const Tensor& dst) {
  HONE_ASSERT(src.shape.ndim() == 2);
  Tensor staged = Tensor::empty(src.shape, dst.dtype());
  ops::cast(src.data, src.dtype, staged);
  transpose(staged, dst);
}

void read_stored_rotate_half(const StoredTensor& src, int64_t heads, const Tensor& dst) {
  HONE_ASSERT(src.shape.ndim() == 2 && heads > 0 && src.shape[0] % heads == 0);
  const int64_t rows = src.shape[0], cols = src.shape[1], hd = rows / heads, half = hd / 2;
  HONE_CHECK(hd % 2 == 0 && dst.numel() == rows * cols, "cannot read {} rows of {} heads into {}", rows, heads,
             dst.shape().str());
  const size_t element = dtype_size(src.dtype);
  // Row j of a head in rotate-half order is row 2j (j < hd/2) or 2(j - hd/2) + 1 in the interleaved order.
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < hd; ++j) {
      const int64_t from = h * hd + (j < half ? 2 * j : 2 * (j - half) + 1);
      read_stored({src.dtype, Shape{cols}, src.data + size_t(from * cols) * element},
                  dst.slice((h * hd + j) * cols, Shape{cols}));
    }
  }
}

void read_stored_rows(const StoredTensor& src, int64_t row_begin, int64_t heads, const Tensor& dst) {
  const int64_t cols = dst.ndim() == 2 ? dst.size(1) : 1;
  const Tensor rows = dst.slice(row_begin * cols, src.shape);
  if (heads > 0) {
    read_stored_rotate_half(src, heads, rows);
  } else {
    read_stored(src, rows);
  }
}

void transpose(const Tensor& src, const Tensor& dst) {
  HONE_ASSERT(src.ndim() == 2 && dst.ndim() == 2 && src.dtype() == dst.dtype());
  const int64_t rows = src.size(0), cols = src.size(1);
  HONE_CHECK(dst.size(0) == cols && dst.size(1) == rows, "cannot transpose {} into {}", src.shape().str(),
             dst.shape().str());
  const size_t element = dtype_size(src.dtype());
  const auto* from = static_cast<const std::byte*>(src.raw());
  auto* to = static_cast<std::byte*>(dst.raw());
  constexpr int64_t kTile = 32;  // tiles keep both sides' cache lines in use
#pragma omp parallel for schedule(static)
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r) {
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) {
          std::memcpy(to + size_t(c * rows + r) * element, from + size_t(r * cols + c) * element, element);
        }
      }
    }
  }
}

void check_state_dict(const TensorFile& file, const std::vector<ImpliedTensor>& implied, const std::string& prefix,
                      const std::function<bool(const std::string&)>& skipped, const std::string& config,
                      const std::string& model, int64_t layers) {
  std::set<std::string> expected;
  for (const ImpliedTensor& t : implied) {
    HONE_CHECK(file.contains(t.name), "{}: tensor '{}' is missing ({} describes {} layers)", file.path(), t.name,
               config, layers);
    const TensorFile::Entry& e = file.entry(t.name);
    HONE_CHECK(e.dtype == DType::f32 || e.dtype == DType::bf16 || e.dtype == DType::f16,
               "{}: tensor '{}' is {}; hone reads float32, bfloat16 and float16 weights", file.path(), t.name,
               dtype_name(e.dtype));
    HONE_CHECK(e.shape == t.shape, "{}: tensor '{}' has shape {}, {} implies {}", file.path(), t.name, e.shape.str(),
               config, t.shape.str());
    expected.insert(t.name);
  }
  for (const std::string& name : file.names()) {
    HONE_CHECK(!name.starts_with(prefix) || expected.contains(name) || skipped(name),
               "{}: unexpected tensor '{}' (a {} of this {} has none)", file.path(), name, model, config);
  }
}

std::string folder_name(const std::string& dir) {
  fs::path p = fs::absolute(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

const std::vector<std::string>& companion_file_names() {
  static const std::vector<std::string> names = {
      "tokenizer.json",   "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
      "tokenizer.model",  "vocab.json",            "merges.txt",              "chat_template.jinja",
      "generation_config.json", "meta.pkl"};  // meta.pkl: nanoGPT's character vocabulary
  return names;
}

std::vector<std::string> companion_files_in(const std::string& dir) {
  std::vector<std::string> found;
  const auto has = [&](const char* name) { return fs::is_regular_file(fs::path(dir) / name); };
  for (const std::string& name : companion_file_names()) {
    const fs::path p = fs::path(dir) / name;
    if (fs::is_regular_file(p)) found.push_back(p.string());
  }
  // OpenAI's GPT-2 files, which travel as Hugging Face's (companion_name).
  if (has("encoder.json") && has("vocab.bpe") && !has("vocab.json") && !has("merges.txt")) {
    found.push_back((fs::path(dir) / "encoder.json").string());
    found.push_back((fs::path(dir) / "vocab.bpe").string());
  }
  return found;
}

std::string companion_name(const std::string& file) {
  const std::string name = fs::path(file).filename().string();
  if (fs::path(name).extension() == ".model") return "tokenizer.model";  // spm_train's NAME.model
  return name == "encoder.json" ? "vocab.json" : name == "vocab.bpe" ? "merges.txt" : name;
}

std::vector<std::string> tokenizer_companion_files(const std::string& tokenizer_path) {
  if (fs::is_directory(tokenizer_path)) return companion_files_in(tokenizer_path);
  const auto& names = companion_file_names();
  const bool named = std::find(names.begin(), names.end(), companion_name(tokenizer_path)) != names.end();
  return named ? std::vector<std::string>{tokenizer_path} : std::vector<std::string>{};
}

}  // namespace hone
