#include "hone/io/c_checkpoints.hpp"

#include <cstring>
#include <filesystem>
#include <map>

#include "hone/io/mapped_file.hpp"

namespace hone {

namespace {

constexpr int32_t kLlmcMagic = 20240326;
constexpr uint32_t kLlama2cMagic = 0x616b3432;  // "ak42"

// A block of consecutive rows of a hone parameter, stored at `offset` (in
// elements) in the file. heads > 0: the rows are `heads` attention heads whose
// dimensions are interleaved RoPE pairs (llama2.c), put in rotate-half order.
struct Piece {
  uint64_t offset = 0;
  Shape shape;
  int64_t row_begin = 0;
  int64_t heads = 0;
};

// A weight file with a fixed layout: every parameter is a list of pieces.
class FlatFile : public WeightSource {
 public:
  FlatFile(const std::string& path, std::string format) : file_(path), format_(std::move(format)) {}

  const ModelConfig& config() const override { return config_; }
  DType stored_dtype() const override { return dtype_; }
  std::string description() const override { return format_ + " file " + file_.path(); }

  void read(const std::string& name, const Tensor& dst) const override {
    auto found = pieces_.find(name);
    HONE_CHECK(found != pieces_.end(), "{}: no parameter '{}'", description(), name);
    const size_t element = dtype_size(dtype_);
    for (const Piece& p : found->second) {
      const std::byte* data = file_.bytes().data() + header_bytes_ + p.offset * element;
      read_stored_rows({dtype_, p.shape, data}, p.row_begin, p.heads, dst);
    }
  }

 protected:
  // Lays out the next array of the file: `count` stacked blocks of `shape`.
  uint64_t next_array(uint64_t count, const Shape& shape) {
    const uint64_t at = cursor_;
    const unsigned __int128 end = (unsigned __int128)cursor_ + (unsigned __int128)count * uint64_t(shape.numel());
    cursor_ = end > UINT64_MAX ? UINT64_MAX : uint64_t(end);  // a header's sizes can reach past 2^64
    return at;
  }
  // Whether the arrays laid out so far lie within the file: where they do not,
  // the layers are not laid out name by name (a header can claim millions)
  // before check_size says how short the file is.
  bool fits() const {
    return header_bytes_ + (unsigned __int128)cursor_ * dtype_size(dtype_) <= (unsigned __int128)file_.size();
  }
  void add(const std::string& name, const Piece& piece) { pieces_[name].push_back(piece); }
  // The file must end where the layout does.
  void check_size(const std::string& header_summary) const {
    const unsigned __int128 expected = header_bytes_ + (unsigned __int128)cursor_ * dtype_size(dtype_);
    HONE_CHECK(expected == file_.size(), "{}: {} bytes, but a {} file with {} has {}", file_.path(), file_.size(),
               format_, header_summary, uint64_t(expected));
  }

  MappedFile file_;
  std::string format_;
  ModelConfig config_;
  DType dtype_ = DType::f32;
  uint64_t header_bytes_ = 0;
  uint64_t cursor_ = 0;  // in elements, after the header
  std::map<std::string, std::vector<Piece>> pieces_;
};

int32_t header_int(const MappedFile& file, size_t index) {
  int32_t v;
  std::memcpy(&v, file.bytes().data() + 4 * index, 4);
  return v;
}

// A header field that is a size: positive and small enough that products of a
// few of them cannot overflow.
int64_t header_size(const MappedFile& file, size_t index, const char* name) {
  const int32_t v = header_int(file, index);
  HONE_CHECK(v > 0 && v < (1 << 24), "{}: header field {} (int32 at byte {}) is {}, not a plausible size",
             file.path(), name, 4 * index, v);
  return v;
}

std::string stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

class LlmcFile final : public FlatFile {
 public:
  explicit LlmcFile(const std::string& path) : FlatFile(path, "llm.c") {
    HONE_CHECK(file_.size() >= 1024, "{}: {} bytes is shorter than llm.c's 1024-byte header", path, file_.size());
    HONE_CHECK(header_int(file_, 0) == kLlmcMagic, "{}: magic {} at byte 0, llm.c's is {}", path,
               header_int(file_, 0), kLlmcMagic);
    const int32_t version = header_int(file_, 1);
    HONE_CHECK(version == 3 || version == 5,
               "{}: llm.c checkpoint version {} at byte 4; hone reads 3 (fp32) and 5 (bf16)", path, version);
    dtype_ = version == 3 ? DType::f32 : DType::bf16;
    header_bytes_ = 1024;
    const int64_t T = header_size(file_, 2, "max_seq_len"), V = header_size(file_, 3, "vocab_size"),
                  L = header_size(file_, 4, "num_layers"), H = header_size(file_, 5, "num_heads"),
                  C = header_size(file_, 6, "channels"), Vp = header_size(file_, 7, "padded_vocab_size");
    HONE_CHECK(V <= Vp, "{}: vocab_size {} exceeds padded_vocab_size {}", path, V, Vp);
    HONE_CHECK(C % H == 0, "{}: channels {} is not a multiple of num_heads {}", path, C, H);

    ModelConfig& c = config_;
    c.name = stem(path);
    c.family = Family::gpt2;
    c.vocab_size = V;
    c.dim = C;
    c.n_layers = L;
    c.n_heads = c.n_kv_heads = H;
    c.ffn_dim = 4 * C;
    c.max_seq_len = T;
    c.norm = NormKind::layernorm;
    c.norm_bias = true;
    c.position = PositionKind::learned;
    c.mlp = MlpKind::gelu_tanh;
    c.linear_bias = true;
    c.tie_embeddings = true;

    // The padding rows of the vocabulary (never produced by the tokenizer) are dropped.
    add("tok_embeddings.weight", {next_array(1, {Vp, C}), {V, C}});
    add("pos_embeddings.weight", {next_array(1, {T, C}), {T, C}});
    struct Array {
      const char* param;
      Shape shape;
    };
    const Array per_layer[] = {{"attn_norm.weight", {C}}, {"attn_norm.bias", {C}},   {"attn.qkv.weight", {3 * C, C}},
                               {"attn.qkv.bias", {3 * C}}, {"attn.out.weight", {C, C}}, {"attn.out.bias", {C}},
                               {"mlp_norm.weight", {C}}, {"mlp_norm.bias", {C}},     {"mlp.up.weight", {4 * C, C}},
                               {"mlp.up.bias", {4 * C}}, {"mlp.down.weight", {C, 4 * C}}, {"mlp.down.bias", {C}}};
    for (const Array& a : per_layer) {
      const uint64_t at = next_array(uint64_t(L), a.shape);
      for (int64_t i = 0; i < L && fits(); ++i) {
        add(fmt::format("layers.{}.{}", i, a.param), {at + uint64_t(i * a.shape.numel()), a.shape});
      }
    }
    add("norm.weight", {next_array(1, {C}), {C}});
    add("norm.bias", {next_array(1, {C}), {C}});
    check_size(fmt::format("V={} Vp={} maxT={} L={} C={}", V, Vp, T, L, C));
  }
};

class Llama2cFile final : public FlatFile {
 public:
  explicit Llama2cFile(const std::string& path) : FlatFile(path, "llama2.c") {
    HONE_CHECK(file_.size() >= 28, "{}: {} bytes is shorter than llama2.c's header", path, file_.size());
    uint32_t magic;
    std::memcpy(&magic, file_.bytes().data(), 4);
    const bool v1 = magic == kLlama2cMagic;
    header_bytes_ = v1 ? 256 : 28;
    size_t first = 0;  // index of `dim` among the header's int32
    bool shared = true;
    if (v1) {
      HONE_CHECK(file_.size() >= 256, "{}: {} bytes is shorter than llama2.c's 256-byte header", path,
                 file_.size());
      const int32_t version = header_int(file_, 1);
      HONE_CHECK(version == 1, "{}: llama2.c format version {} at byte 4; hone reads version 1 (fp32) and the "
                 "legacy format", path, version);
      first = 2;
      shared = std::to_integer<uint8_t>(file_.bytes()[36]) != 0;
    }
    const int64_t D = header_size(file_, first, "dim"), F = header_size(file_, first + 1, "hidden_dim"),
                  L = header_size(file_, first + 2, "n_layers"), H = header_size(file_, first + 3, "n_heads"),
                  KV = header_size(file_, first + 4, "n_kv_heads");
    int32_t vocab = header_int(file_, first + 5);
    if (!v1) {
      shared = vocab > 0;  // the legacy format's flag: a negative vocabulary size
      if (vocab < 0 && vocab > -(1 << 24)) vocab = -vocab;
    }
    HONE_CHECK(vocab > 0 && vocab < (1 << 24), "{}: header field vocab_size (int32 at byte {}) is {}", path,
               4 * (first + 5), header_int(file_, first + 5));
    const int64_t V = vocab, T = header_size(file_, first + 6, "seq_len");
    HONE_CHECK(D % H == 0 && (D / H) % 2 == 0 && H % KV == 0,
               "{}: dim {}, n_heads {}, n_kv_heads {} do not make even heads shared by whole groups", path, D, H, KV);
    const int64_t hd = D / H;

    ModelConfig& c = config_;
    c.name = stem(path);
    c.family = Family::llama;
    c.vocab_size = V;
    c.dim = D;
    c.n_layers = L;
    c.n_heads = H;
    c.n_kv_heads = KV;
    c.ffn_dim = F;
    c.max_seq_len = T;
    c.norm_eps = 1e-5;  // llama2.c's model.py and run.c
    c.tie_embeddings = shared;

    auto layers = [&](const char* param, const Shape& shape, int64_t row_begin = 0, int64_t heads = 0) {
      const uint64_t at = next_array(uint64_t(L), shape);
      for (int64_t i = 0; i < L && fits(); ++i) {
        add(fmt::format("layers.{}.{}", i, param), {at + uint64_t(i * shape.numel()), shape, row_begin, heads});
      }
    };
    auto embedding = [&] { add("tok_embeddings.weight", {next_array(1, {V, D}), {V, D}}); };
    auto final_norm = [&] { add("norm.weight", {next_array(1, {D}), {D}}); };
    if (v1) {
      layers("attn_norm.weight", {D});
      layers("mlp_norm.weight", {D});
      final_norm();
      embedding();
    } else {
      embedding();
      layers("attn_norm.weight", {D});
    }
    layers("attn.qkv.weight", {H * hd, D}, 0, H);
    layers("attn.qkv.weight", {KV * hd, D}, H * hd, KV);
    layers("attn.qkv.weight", {KV * hd, D}, (H + KV) * hd);
    layers("attn.out.weight", {D, H * hd});
    if (!v1) layers("mlp_norm.weight", {D});
    layers("mlp.up.weight", {F, D}, 0);   // w1, the gate
    layers("mlp.down.weight", {D, F});    // w2
    layers("mlp.up.weight", {F, D}, F);   // w3, the up projection
    if (!v1) {
      final_norm();
      next_array(2, {T, hd / 2});  // RoPE's cos and sin tables, which hone computes itself
    }
    if (!shared) add("lm_head.weight", {next_array(1, {V, D}), {V, D}});
    check_size(fmt::format("dim={} hidden_dim={} n_layers={} n_heads={} n_kv_heads={} vocab={}{} "
                                          "seq_len={}",
                                          D, F, L, H, KV, V, shared ? "" : " (unshared classifier)", T));
  }
};

// The first int32 of a C checkpoint: llm.c's or llama2.c's magic, or (legacy
// llama2.c) the model dimension.
int32_t c_checkpoint_magic(const std::string& path) {
  const MappedFile probe(path);
  HONE_CHECK(probe.size() >= 28, "{}: {} bytes is too short for an llm.c or llama2.c checkpoint", path, probe.size());
  int32_t magic;
  std::memcpy(&magic, probe.bytes().data(), 4);
  return magic;
}

}  // namespace

std::string c_checkpoint_format(const std::string& path) {
  return c_checkpoint_magic(path) == kLlmcMagic ? "llmc" : "llama2c";
}

std::unique_ptr<WeightSource> open_c_checkpoint(const std::string& path) {
  const int32_t magic = c_checkpoint_magic(path);
  if (magic == kLlmcMagic) return std::make_unique<LlmcFile>(path);
  if (uint32_t(magic) == kLlama2cMagic) return std::make_unique<Llama2cFile>(path);
  try {
    return std::make_unique<Llama2cFile>(path);
  } catch (const Error& e) {
    fail("{} (read as a legacy llama2.c file, having neither llm.c's magic {} nor llama2.c's \"ak42\")", e.what(),
         kLlmcMagic);
  }
}

}  // namespace hone
