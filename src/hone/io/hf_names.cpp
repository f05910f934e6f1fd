// hone's parameter names <-> transformers' tensor names, per family. hone fuses
// what transformers keeps apart in Llama (q/k/v, gate/up) and stores every
// matrix [out, in]; GPT-2's Conv1D stores [in, out].
#include <charconv>

#include "hone/core/error.hpp"
#include "hone/io/hf.hpp"

namespace hone {

namespace {

struct LayerName {
  int64_t layer = -1;  // -1: not a layer parameter
  std::string rest;    // "attn.qkv.weight", or the whole name outside layers
};

LayerName split_layer(const std::string& name) {
  const std::string prefix = "layers.";
  if (!name.starts_with(prefix)) return {-1, name};
  const size_t dot = name.find('.', prefix.size());
  HONE_ASSERT(dot != std::string::npos);
  int64_t layer = -1;
  std::from_chars(name.data() + prefix.size(), name.data() + dot, layer);
  return {layer, name.substr(dot + 1)};
}

// "weight" or "bias" after the last dot, and the part before it.
std::pair<std::string, std::string> split_kind(const std::string& name) {
  const size_t dot = name.rfind('.');
  HONE_ASSERT(dot != std::string::npos);
  return {name.substr(0, dot), name.substr(dot + 1)};
}

// The parameter's shape in hone, for the row ranges.
Shape hone_shape(const ModelConfig& c, const std::string& module, const std::string& kind) {
  const bool bias = kind == "bias";
  auto linear = [&](int64_t out, int64_t in) { return bias ? Shape{out} : Shape{out, in}; };
  if (module == "attn.qkv") return linear(c.qkv_dim(), c.dim);
  if (module == "attn.out") return linear(c.dim, c.n_heads * c.head_dim());
  if (module == "mlp.up") return linear(c.mlp_up_dim(), c.dim);
  if (module == "mlp.down") return linear(c.dim, c.ffn_dim);
  return Shape{c.dim};  // norms
}

std::vector<HfTensor> whole(const std::string& name, const Shape& shape, bool transposed = false) {
  Shape stored = shape;
  if (transposed && shape.ndim() == 2) stored = Shape{shape[1], shape[0]};
  return {HfTensor{name, stored, 0, shape[0], transposed && shape.ndim() == 2}};
}

// Row blocks of a [rows, in] (or [rows]) parameter, one HF tensor each.
std::vector<HfTensor> row_blocks(const std::vector<std::pair<std::string, int64_t>>& blocks, const Shape& shape) {
  std::vector<HfTensor> out;
  int64_t begin = 0;
  for (const auto& [name, rows] : blocks) {
    out.push_back({name, shape.ndim() == 2 ? Shape{rows, shape[1]} : Shape{rows}, begin, rows, false});
    begin += rows;
  }
  return out;
}

std::vector<HfTensor> llama_tensors(const ModelConfig& c, const LayerName& n) {
  if (n.layer < 0) {
    if (n.rest == "tok_embeddings.weight") return whole("model.embed_tokens.weight", {c.vocab_size, c.dim});
    if (n.rest == "norm.weight") return whole("model.norm.weight", {c.dim});
    if (n.rest == "lm_head.weight") return whole("lm_head.weight", {c.vocab_size, c.dim});
    return {};
  }
  const auto [module, kind] = split_kind(n.rest);
  const std::string p = "model.layers." + std::to_string(n.layer) + ".";
  const Shape shape = hone_shape(c, module, kind);
  if (module == "attn_norm") return whole(p + "input_layernorm." + kind, shape);
  if (module == "mlp_norm") return whole(p + "post_attention_layernorm." + kind, shape);
  if (module == "attn.qkv") {
    const int64_t hd = c.head_dim();
    return row_blocks({{p + "self_attn.q_proj." + kind, c.n_heads * hd},
                       {p + "self_attn.k_proj." + kind, c.n_kv_heads * hd},
                       {p + "self_attn.v_proj." + kind, c.n_kv_heads * hd}},
                      shape);
  }
  if (module == "attn.out") return whole(p + "self_attn.o_proj." + kind, shape);
  if (module == "mlp.up") return row_blocks({{p + "mlp.gate_proj." + kind, c.ffn_dim}, {p + "mlp.up_proj." + kind, c.ffn_dim}}, shape);
  if (module == "mlp.down") return whole(p + "mlp.down_proj." + kind, shape);
  return {};
}

std::vector<HfTensor> gpt2_tensors(const ModelConfig& c, const LayerName& n) {
  if (n.layer < 0) {
    if (n.rest == "tok_embeddings.weight") return whole("transformer.wte.weight", {c.vocab_size, c.dim});
    if (n.rest == "pos_embeddings.weight") return whole("transformer.wpe.weight", {c.max_seq_len, c.dim});
    if (n.rest.starts_with("norm.")) return whole("transformer.ln_f." + split_kind(n.rest).second, {c.dim});
    if (n.rest == "lm_head.weight") return whole("lm_head.weight", {c.vocab_size, c.dim});
    return {};
  }
  const auto [module, kind] = split_kind(n.rest);
  const std::string p = "transformer.h." + std::to_string(n.layer) + ".";
  const Shape shape = hone_shape(c, module, kind);
  if (module == "attn_norm") return whole(p + "ln_1." + kind, shape);
  if (module == "mlp_norm") return whole(p + "ln_2." + kind, shape);
  // Conv1D layers: weights stored [in, out].
  if (module == "attn.qkv") return whole(p + "attn.c_attn." + kind, shape, true);
  if (module == "attn.out") return whole(p + "attn.c_proj." + kind, shape, true);
  if (module == "mlp.up") return whole(p + "mlp.c_fc." + kind, shape, true);
  if (module == "mlp.down") return whole(p + "mlp.c_proj." + kind, shape, true);
  return {};
}

std::vector<HfTensor> mpt_tensors(const ModelConfig& c, const LayerName& n) {
  if (n.layer < 0) {
    if (n.rest == "tok_embeddings.weight") return whole("transformer.wte.weight", {c.vocab_size, c.dim});
    if (n.rest == "pos_embeddings.weight") return whole("transformer.wpe.weight", {c.max_seq_len, c.dim});
    if (n.rest.starts_with("norm.")) return whole("transformer.norm_f." + split_kind(n.rest).second, {c.dim});
    return {};
  }
  const auto [module, kind] = split_kind(n.rest);
  const std::string p = "transformer.blocks." + std::to_string(n.layer) + ".";
  const Shape shape = hone_shape(c, module, kind);
  if (module == "attn_norm") return whole(p + "norm_1." + kind, shape);
  if (module == "mlp_norm") return whole(p + "norm_2." + kind, shape);
  if (module == "attn.qkv") return whole(p + "attn.Wqkv." + kind, shape);  // fused in hone's q|k|v order
  if (module == "attn.out") return whole(p + "attn.out_proj." + kind, shape);
  if (module == "mlp.up") return whole(p + "ffn.up_proj." + kind, shape);
  if (module == "mlp.down") return whole(p + "ffn.down_proj." + kind, shape);
  return {};
}

}  // namespace

std::vector<HfTensor> hf_tensors_of(const ModelConfig& config, const std::string& hone_name) {
  const LayerName n = split_layer(hone_name);
  std::vector<HfTensor> tensors;
  switch (config.family) {
    case Family::llama: tensors = llama_tensors(config, n); break;
    case Family::gpt2: tensors = gpt2_tensors(config, n); break;
    case Family::mpt: tensors = mpt_tensors(config, n); break;
  }
  HONE_CHECK(!tensors.empty(), "no Hugging Face {} tensor corresponds to hone parameter '{}'",
             family_name(config.family), hone_name);
  return tensors;
}

}  // namespace hone
