#include "hone/io/model_json.hpp"

#include <set>

#include "hone/core/error.hpp"
#include "hone/io/json_file.hpp"

namespace hone {

namespace {

// One of `names`, by the enumerator that name_of() gives it.
template <typename E>
E parse_enum(const JsonFields& fields, const std::string& key, std::initializer_list<E> values,
             std::string_view (*name_of)(E)) {
  const std::string name = fields.string(key);
  std::string known;
  for (E v : values) {
    if (name_of(v) == name) return v;
    known += (known.empty() ? "" : ", ") + std::string(name_of(v));
  }
  fail("{}: '{}' is '{}', expected one of {}", fields.context(), key, name, known);
}

void expect_only(const Json& j, const std::set<std::string>& keys, const std::string& context) {
  for (auto& [key, value] : j.items()) {
    HONE_CHECK(keys.count(key), "{}: unknown key '{}' (a model.json of a newer hone?)", context, key);
  }
}

}  // namespace

Json model_config_to_json(const ModelConfig& c) {
  return {{"name", c.name},
          {"family", family_name(c.family)},
          {"vocab_size", c.vocab_size},
          {"dim", c.dim},
          {"n_layers", c.n_layers},
          {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads},
          {"ffn_dim", c.ffn_dim},
          {"max_seq_len", c.max_seq_len},
          {"norm", norm_name(c.norm)},
          {"norm_bias", c.norm_bias},
          {"norm_eps", c.norm_eps},
          {"position", position_name(c.position)},
          {"rope_theta", c.rope_theta},
          {"rope_scaling",
           {{"factor", c.rope_scaling.factor},
            {"low_freq_factor", c.rope_scaling.low_freq_factor},
            {"high_freq_factor", c.rope_scaling.high_freq_factor},
            {"original_max_position", c.rope_scaling.original_max_position}}},
          {"alibi_bias_max", c.alibi_bias_max},
          {"mlp", mlp_name(c.mlp)},
          {"linear_bias", c.linear_bias},
          {"tie_embeddings", c.tie_embeddings},
          {"init_std", c.init_std}};
}

ModelConfig model_config_from_json(const Json& j, const std::string& context) {
  const JsonFields f(j, context);
  expect_only(j,
              {"name", "family", "vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "max_seq_len",
               "norm", "norm_bias", "norm_eps", "position", "rope_theta", "rope_scaling", "alibi_bias_max", "mlp",
               "linear_bias", "tie_embeddings", "init_std"},
              context);
  ModelConfig c;
  c.name = f.string("name");
  c.family = parse_enum(f, "family", {Family::llama, Family::gpt2, Family::mpt}, family_name);
  c.vocab_size = f.integer("vocab_size");
  c.dim = f.integer("dim");
  c.n_layers = f.integer("n_layers");
  c.n_heads = f.integer("n_heads");
  c.n_kv_heads = f.integer("n_kv_heads");
  c.ffn_dim = f.integer("ffn_dim");
  c.max_seq_len = f.integer("max_seq_len");
  c.norm = parse_enum(f, "norm", {NormKind::rmsnorm, NormKind::layernorm}, norm_name);
  c.norm_bias = f.boolean("norm_bias");
  c.norm_eps = f.number("norm_eps");
  c.position = parse_enum(f, "position", {PositionKind::rope, PositionKind::learned, PositionKind::alibi},
                          position_name);
  c.rope_theta = f.number("rope_theta");
  const JsonFields s = f.object("rope_scaling");
  expect_only(j["rope_scaling"], {"factor", "low_freq_factor", "high_freq_factor", "original_max_position"},
              s.context());
  c.rope_scaling.factor = s.number("factor");
  c.rope_scaling.low_freq_factor = s.number("low_freq_factor");
  c.rope_scaling.high_freq_factor = s.number("high_freq_factor");
  c.rope_scaling.original_max_position = s.integer("original_max_position");
  c.alibi_bias_max = f.number("alibi_bias_max");
  c.mlp = parse_enum(f, "mlp", {MlpKind::swiglu, MlpKind::gelu, MlpKind::gelu_tanh}, mlp_name);
  c.linear_bias = f.boolean("linear_bias");
  c.tie_embeddings = f.boolean("tie_embeddings");
  c.init_std = f.number("init_std");
  try {
    c.validate();
  } catch (const Error& e) {
    fail("{}: {}", context, e.what());
  }
  return c;
}

}  // namespace hone
