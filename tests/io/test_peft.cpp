// LoRA adapters in PEFT form: names, shapes, values, and what PEFT cannot hold.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hone/io/peft.hpp"
#include "hone/io/safetensors.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

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
}

}  // namespace
}  // namespace hone::test
