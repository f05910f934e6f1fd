// LoRA adapters in PEFT form: names, shapes, values, and what PEFT cannot hold.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hone/io/peft.hpp"
#include "hone/io/safetensors.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

// The adapters of `dir` opened for a model of `config` read as it is (no
// adapters merged into it).
LoraAdapters adapters_for_a_base(const std::string& dir, const ModelConfig& config) {
  const Transformer base(config, DType::f32, Device::cpu());
  return open_lora_adapters(dir, /*base_path=*/"", config, *transformer_weights(base));
}

TEST(Peft, LlamaAdaptersGetPeftNamesAndTheirValues) {
  const std::string dir = testing::TempDir() + "hone_peft_" + std::to_string(::getpid());
  fs::remove_all(dir);
  Transformer m(model_preset("llama_tiny"), DType::f32, Device::cpu(),
                LoraConfig{.rank = 2, .alpha = 4, .attn_modules = {"q_proj", "k_proj", "v_proj", "output_proj"}});
  m.init_weights(1);
  m.trainable_params().get("layers.1.lora.k_proj.b").value.copy_from(random_tensor({32, 2}, DType::f32, 2));
  export_peft(m, dir, "meta-llama/Llama-3.2-1B");
  const auto config = nlohmann::json::parse(std::ifstream(dir + "/adapter_config.json"));
  EXPECT_EQ(config["r"], 2);
  EXPECT_EQ(config["lora_alpha"], 4.0);
  EXPECT_EQ(config["base_model_name_or_path"], "meta-llama/Llama-3.2-1B");
  EXPECT_EQ(config["target_modules"], nlohmann::json::array({"k_proj", "o_proj", "q_proj", "v_proj"}));
  SafetensorsFile f(dir + "/adapter_model.safetensors");
  EXPECT_EQ(f.names().size(), 2u * 4 * 2);  // A and B, four modules, two layers
  const std::string b = "base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight";
  EXPECT_EQ(f.entry(b).shape, Shape({32, 2}));  // 2 KV heads of 16
  EXPECT_EQ(f.load(b).to_vector<float>(), m.trainable_params().get("layers.1.lora.k_proj.b").value.to_vector<float>());
  EXPECT_EQ(f.entry("base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight").shape, Shape({2, 64}));
  fs::remove_all(dir);
}

TEST(Peft, RefusesAnAdapterOnPartOfAFusedHuggingFaceTensor) {
  Transformer m(model_preset("gpt2_tiny"), DType::f32, Device::cpu(), LoraConfig{.rank = 2});
  try {
    export_peft(m, testing::TempDir() + "hone_peft_gpt2", "gpt2");
    FAIL() << "GPT-2's q-only adapter exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("c_attn"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(testing::TempDir() + "hone_peft_gpt2"));
  // The same refusal before a run trains them, as a folder in the way is.
  EXPECT_NE(error_of([] { check_peft_export(model_preset("gpt2_tiny"), LoraConfig{.rank = 2}, "x"); }).find("c_attn"),
            std::string::npos);
  EXPECT_EQ(error_of([] { check_peft_export(model_preset("llama_tiny"), LoraConfig{.rank = 2}, "x"); }), "");
  EXPECT_EQ(error_of([] { check_peft_export(model_preset("llama_tiny"), LoraConfig{.rank = 2}, "/"); }),
            "/: already exists; give a new folder");
}

// GPT-2's Conv1D modules (stored [in, out]) take PEFT adapters of the same A
// and B as a Linear's, marked fan_in_fan_out as PEFT marks them; its c_attn
// (q, k and v fused) is one PEFT adapter: one A, a B over all three, read as
// hone's q, k and v adapters sharing that A, each its rows of B.
TEST(Peft, Gpt2sConv1dModulesAndItsFusedAttentionAdapter) {
  const std::string dir = testing::TempDir() + "hone_peft_conv1d_" + std::to_string(::getpid());
  fs::remove_all(dir);
  const ModelConfig config = model_preset("gpt2_tiny");
  const LoraConfig trained{.rank = 2, .alpha = 4, .attn_modules = {"output_proj"}, .apply_to_mlp = true};
  Transformer m(config, DType::f32, Device::cpu(), trained);
  uint64_t seed = 50;
  for (const Parameter& p : m.trainable_params().all())
    m.trainable_params().get(p.name).value.copy_from(random_tensor(p.whole_shape, DType::f32, seed++));
  export_peft(m, dir, "gpt2");
  const auto written = nlohmann::json::parse(std::ifstream(dir + "/adapter_config.json"));
  EXPECT_EQ(written["fan_in_fan_out"], true);
  EXPECT_EQ(written["target_modules"], nlohmann::json::array({"c_fc", "c_proj"}));
  const LoraConfig read = read_peft_config(dir, config);
  Transformer loaded(config, DType::f32, Device::cpu(), read);
  load_adapters(adapters_for_a_base(dir, config).read, loaded);
  ASSERT_EQ(loaded.trainable_params().all().size(), m.trainable_params().all().size());
  for (const Parameter& p : m.trainable_params().all())
    EXPECT_EQ(loaded.trainable_params().get(p.name).value.to_vector<float>(), p.value.to_vector<float>()) << p.name;
  // attn.c_proj and mlp.c_proj share a name: PEFT adapts every module whose
  // name ends in a target, so one of them alone is named with its parent.
  for (const auto& [attn_modules, mlp, targets] :
       {std::tuple(std::vector<std::string>{}, true, nlohmann::json::array({"c_fc", "mlp.c_proj"})),
        std::tuple(std::vector<std::string>{"output_proj"}, false, nlohmann::json::array({"attn.c_proj"}))}) {
    const std::string part = dir + "_part";
    fs::remove_all(part);
    const LoraConfig lora{.rank = 2, .alpha = 4, .attn_modules = attn_modules, .apply_to_mlp = mlp};
    Transformer one(config, DType::f32, Device::cpu(), lora);
    export_peft(one, part, "gpt2");
    EXPECT_EQ(nlohmann::json::parse(std::ifstream(part + "/adapter_config.json"))["target_modules"], targets);
    const LoraConfig back = read_peft_config(part, config);
    EXPECT_EQ(back.attn_modules, attn_modules);
    EXPECT_EQ(back.apply_to_mlp, mlp);
    fs::remove_all(part);
  }

  // PEFT's default for GPT-2: c_attn alone, A [2, dim] and B [3 dim, 2].
  const int64_t dim = config.dim;
  std::vector<NamedTensor> c_attn;
  for (int64_t layer = 0; layer < config.n_layers; ++layer) {
    const std::string module = "base_model.model.transformer.h." + std::to_string(layer) + ".attn.c_attn";
    c_attn.push_back({module + ".lora_A.weight", random_tensor({2, dim}, DType::f32, seed++)});
    c_attn.push_back({module + ".lora_B.weight", random_tensor({3 * dim, 2}, DType::f32, seed++)});
  }
  write_safetensors(dir + "/adapter_model.safetensors", c_attn);
  const LoraConfig fused = read_peft_config(dir, config);
  std::vector<std::string> modules = fused.attn_modules;
  std::sort(modules.begin(), modules.end());
  EXPECT_EQ(modules, (std::vector<std::string>{"k_proj", "q_proj", "v_proj"}));
  EXPECT_FALSE(fused.apply_to_mlp);
  Transformer qkv(config, DType::f32, Device::cpu(), fused);
  load_adapters(adapters_for_a_base(dir, config).read, qkv);
  const std::vector<float> a = c_attn[2].tensor.to_vector<float>(), b = c_attn[3].tensor.to_vector<float>();  // layer 1
  const char* projections[] = {"q_proj", "k_proj", "v_proj"};
  for (int64_t i = 0; i < 3; ++i) {
    const std::string prefix = std::string("layers.1.lora.") + projections[i];
    EXPECT_EQ(qkv.trainable_params().get(prefix + ".a").value.to_vector<float>(), a) << prefix;
    EXPECT_EQ(qkv.trainable_params().get(prefix + ".b").value.to_vector<float>(),
              std::vector<float>(b.begin() + i * dim * 2, b.begin() + (i + 1) * dim * 2))
        << prefix;
  }
  fs::remove_all(dir);
}

// A PEFT folder reads back as the adapters it holds: their settings from its
// config and tensors, their values into a model built with those settings; what
// hone's LoRA cannot hold is refused, naming it.
TEST(Peft, FoldersReadBackAsTheAdaptersTheyHold) {
  const std::string dir = testing::TempDir() + "hone_peft_read_" + std::to_string(::getpid());
  fs::remove_all(dir);
  const ModelConfig config = model_preset("llama_tiny");
  const LoraConfig trained{.rank = 2, .alpha = 4, .dropout = 0.1, .attn_modules = {"q_proj", "v_proj", "output_proj"},
                           .apply_to_mlp = true, .apply_to_output = true};
  Transformer m(config, DType::f32, Device::cpu(), trained);
  m.init_weights(1);
  uint64_t seed = 10;
  for (const Parameter& p : m.trainable_params().all())
    m.trainable_params().get(p.name).value.copy_from(random_tensor(p.whole_shape, DType::f32, seed++));
  export_peft(m, dir, "base");

  const LoraConfig read = read_peft_config(dir, config);
  EXPECT_EQ(read.rank, 2);
  EXPECT_EQ(read.alpha, 4.0);
  EXPECT_EQ(read.dropout, 0.1);
  std::vector<std::string> modules = read.attn_modules;
  std::sort(modules.begin(), modules.end());
  EXPECT_EQ(modules, (std::vector<std::string>{"output_proj", "q_proj", "v_proj"}));
  EXPECT_TRUE(read.apply_to_mlp);
  EXPECT_TRUE(read.apply_to_output);
  Transformer loaded(config, DType::f32, Device::cpu(), read);
  load_adapters(adapters_for_a_base(dir, config).read, loaded);
  ASSERT_EQ(loaded.trainable_params().all().size(), m.trainable_params().all().size());
  for (const Parameter& p : m.trainable_params().all())
    EXPECT_EQ(loaded.trainable_params().get(p.name).value.to_vector<float>(), p.value.to_vector<float>()) << p.name;

  // rsLoRA scales by alpha / sqrt(r): hone's alpha / rank with alpha * sqrt(r).
  const std::string config_file = dir + "/adapter_config.json";
  const nlohmann::json written = nlohmann::json::parse(std::ifstream(config_file));
  const auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json j = written;
    j[key] = value;
    std::ofstream(config_file) << j.dump();
  };
  with("use_rslora", true);
  EXPECT_DOUBLE_EQ(read_peft_config(dir, config).scale(), 4.0 / std::sqrt(2.0));
  const auto error = [&] { return error_of([&] { read_peft_config(dir, config); }); };
  const auto expect_refused = [&](const std::string& key, const nlohmann::json& value, const std::string& message) {
    with(key, value);
    EXPECT_NE(error().find(message), std::string::npos) << key << ": " << error();
  };
  with("fan_in_fan_out", true);  // how the base weight is stored (PEFT turns it off for a Linear): the same adapters
  EXPECT_EQ(read_peft_config(dir, config).rank, 2);
  expect_refused("layers_to_transform", {0}, "'layers_to_transform' is set");
  expect_refused("rank_pattern", {{"q_proj", 4}}, "'rank_pattern' is set");
  expect_refused("modules_to_save", {"lm_head"}, "'modules_to_save' is set");
  expect_refused("bias", "all", "bias is \"all\"; hone's adapters have no biases");
  expect_refused("peft_type", "PREFIX_TUNING", "peft_type is \"PREFIX_TUNING\", hone reads LORA adapters");
  expect_refused("lora_dropout", "x", "'lora_dropout' must be a number, got \"x\"");  // was: an internal error
  with("r", 2);

  // Tensors that make a set of adapters hone cannot express.
  const std::string weights = dir + "/adapter_model.safetensors";
  std::vector<NamedTensor> all;
  {
    const SafetensorsFile f(weights);
    for (const std::string& name : f.names()) all.push_back({name, f.load(name)});
  }
  const auto write_without = [&](const std::string& part, std::vector<NamedTensor> extra = {}) {
    std::vector<NamedTensor> kept = std::move(extra);
    for (const NamedTensor& t : all)
      if (t.name.find(part) == std::string::npos) kept.push_back(t);
    write_safetensors(weights, kept);
  };
  write_without("mlp.up_proj");
  EXPECT_NE(error().find("adapters on some of the MLP's projections but not on up_proj"), std::string::npos) << error();
  write_without("layers.1.self_attn.q_proj");
  EXPECT_NE(error().find("q_proj adapters on 1 of 2 layers"), std::string::npos) << error();
  write_without("no such part", {{"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight",
                                  Tensor::zeros({2, 64}, DType::f32)}});
  EXPECT_NE(error().find("adapts transformer.h.0.attn.c_attn, which hone's LoRA cannot adapt on a llama model"),
            std::string::npos)
      << error();
  // Adapters of a deeper base: the layer past this model's is named.
  write_without("no such part", {{"base_model.model.model.layers.40.self_attn.q_proj.lora_A.weight",
                                  Tensor::zeros({2, 64}, DType::f32)}});
  EXPECT_NE(error().find("'base_model.model.model.layers.40.self_attn.q_proj.lora_A.weight' adapts layer 40; this llama "
                         "model has 2 layers: the adapters were made for another base"),
            std::string::npos)
      << error();
  write_without("no such part", {{"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector",
                                  Tensor::zeros({64}, DType::f32)}});
  EXPECT_NE(error().find("is a DoRA magnitude, but adapter_config.json does not set use_dora"), std::string::npos)
      << error();
  // Adapters of another base model: a shape the model does not have.
  write_without("layers.0.self_attn.q_proj.lora_A",
                {{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", Tensor::zeros({2, 32}, DType::f32)}});
  EXPECT_NE(error_of([&] { load_adapters(adapters_for_a_base(dir, config).read, loaded); })
                .find("'base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight' is [2, 32], the model needs "
                      "[2, 64]"),
            std::string::npos);
  fs::remove(weights);
  EXPECT_NE(error().find("no adapter_model.safetensors (or adapter_model.bin)"), std::string::npos) << error();
  fs::remove_all(dir);
}

// DoRA's magnitudes travel as PEFT's lora_magnitude_vector ([out]), with
// use_dora set; read back under either of PEFT's names for them.
TEST(Peft, DoraAdaptersCarryTheirMagnitudes) {
  const std::string dir = testing::TempDir() + "hone_peft_dora_" + std::to_string(::getpid());
  fs::remove_all(dir);
  const ModelConfig config = model_preset("llama_tiny");
  const LoraConfig trained{.rank = 2, .alpha = 4, .attn_modules = {"q_proj", "v_proj"}, .apply_to_mlp = true,
                           .use_dora = true};
  Transformer m(config, DType::f32, Device::cpu(), trained);
  m.init_weights(1);
  uint64_t seed = 30;
  for (const Parameter& p : m.trainable_params().all())
    m.trainable_params().get(p.name).value.copy_from(random_tensor(p.whole_shape, DType::f32, seed++));
  export_peft(m, dir, "base");
  const auto written = nlohmann::json::parse(std::ifstream(dir + "/adapter_config.json"));
  EXPECT_EQ(written["use_dora"], true);
  const std::string magnitude = "base_model.model.model.layers.1.self_attn.v_proj.lora_magnitude_vector";
  {
    const SafetensorsFile f(dir + "/adapter_model.safetensors");
    EXPECT_EQ(f.names().size(), 3u * 5 * 2);  // A, B and m; q, v, gate, up, down; two layers
    EXPECT_EQ(f.entry(magnitude).shape, Shape({32}));
  }
  const auto expect_read_back = [&] {
    const LoraConfig read = read_peft_config(dir, config);
    EXPECT_TRUE(read.use_dora);
    Transformer loaded(config, DType::f32, Device::cpu(), read);
    load_adapters(adapters_for_a_base(dir, config).read, loaded);
    for (const Parameter& p : m.trainable_params().all())
      EXPECT_EQ(loaded.trainable_params().get(p.name).value.to_vector<float>(), p.value.to_vector<float>()) << p.name;
  };
  expect_read_back();
  // Files of PEFT versions that kept the module's ".weight".
  {
    std::vector<NamedTensor> renamed;
    const SafetensorsFile f(dir + "/adapter_model.safetensors");
    for (const std::string& name : f.names())
      renamed.push_back({name.ends_with("lora_magnitude_vector") ? name + ".weight" : name, f.load(name)});
    write_safetensors(dir + "/adapter_model.safetensors", renamed);
  }
  expect_read_back();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hone::test
