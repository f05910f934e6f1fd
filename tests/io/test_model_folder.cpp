// Model folders and model.json: a checkpoint says what model it holds, a model
// folder (no training state) starts fine-tuning but cannot be resumed, and
// weights stored in bf16/f16 load into fp32 master weights.
#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>

#include "hone/io/checkpoint.hpp"
#include "hone/io/json_file.hpp"
#include "hone/io/model_json.hpp"
#include "hone/io/safetensors.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

class ModelFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "hone_model_folder_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    model_.init_weights(7);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir_;
  Transformer model_{model_preset("gpt2_tiny"), DType::f32};
};

TEST_F(ModelFolderTest, ModelConfigJsonRoundTrips) {
  for (const std::string& name : model_preset_names()) {
    const ModelConfig c = model_preset(name);
    const Json j = model_config_to_json(c);
    EXPECT_EQ(model_config_to_json(model_config_from_json(j, "model.json")).dump(), j.dump()) << name;
  }
  const ModelConfig llama31 = model_config_from_json(model_config_to_json(model_preset("llama3_1_8B")), "x");
  EXPECT_EQ(llama31.rope_scaling.factor, 8.0);
  EXPECT_EQ(llama31.rope_scaling.original_max_position, 8192);

  Json j = model_config_to_json(model_preset("mpt_tiny"));
  j["sliding_window"] = 4096;
  EXPECT_NE(error_of([&] { model_config_from_json(j, "m.json"); }).find("m.json: unknown key 'sliding_window'"),
            std::string::npos);
  j = model_config_to_json(model_preset("mpt_tiny"));
  j.erase("n_heads");
  EXPECT_NE(error_of([&] { model_config_from_json(j, "m.json"); }).find("missing key 'n_heads'"), std::string::npos);
  j = model_config_to_json(model_preset("mpt_tiny"));
  j["position"] = "nope";
  EXPECT_NE(error_of([&] { model_config_from_json(j, "m.json"); }).find("expected one of rope, learned, alibi"),
            std::string::npos);
  j = model_config_to_json(model_preset("mpt_tiny"));
  j["n_heads"] = 5;
  EXPECT_NE(error_of([&] { model_config_from_json(j, "m.json"); }).find("m.json: model 'mpt_tiny'"),
            std::string::npos);
}

TEST_F(ModelFolderTest, CheckpointsCarryTheirModelConfig) {
  AdamW optimizer(model_.params(), AdamWConfig{});
  TrainerState state;
  state.step = 3;
  const std::string folder = save_checkpoint(dir_, model_, optimizer, state, 0);
  const Json manifest = read_json_file(folder + "/manifest.json");
  EXPECT_TRUE(manifest["files"].contains("model.json"));
  EXPECT_EQ(manifest["step"], 3);
  EXPECT_EQ(model_config_to_json(read_model_config(folder)).dump(), model_config_to_json(model_.config()).dump());
  // Fine-tuning and inference load the weights of a training checkpoint without its optimizer.
  Transformer again(read_model_config(folder), DType::f32);
  load_model_weights(folder, again);
  EXPECT_EQ(again.params().values().to_vector<float>(), model_.params().values().to_vector<float>());
}

TEST_F(ModelFolderTest, ModelFoldersLoadButDoNotResume) {
  const std::string folder = dir_ + "/model";
  save_model(*transformer_weights(model_), folder, DType::bf16);
  verify_checkpoint(folder);
  for (const char* absent : {"optimizer.safetensors", "trainer_state.json"}) {
    EXPECT_FALSE(fs::exists(folder + "/" + absent));
  }
  EXPECT_EQ(SafetensorsFile(folder + "/model.safetensors").entry("tok_embeddings.weight").dtype, DType::bf16);
  Transformer loaded(read_model_config(folder), DType::f32);
  load_model_weights(folder, loaded);
  // bf16 storage: each weight is the bf16 rounding of the original.
  const auto a = loaded.params().values().to_vector<float>(), b = model_.params().values().to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], bf16_to_float(float_to_bf16(b[i]))) << i;

  AdamW optimizer(loaded.params(), AdamWConfig{});
  const std::string err = error_of([&] { load_checkpoint(folder, loaded, optimizer); });
  EXPECT_NE(err.find("a model folder without training state"), std::string::npos) << err;
  EXPECT_NE(err.find(folder), std::string::npos) << err;

  // The manifest covers model.json too.
  {
    std::ofstream out(folder + "/model.json", std::ios::app);
    out << " ";
  }
  EXPECT_NE(error_of([&] { load_model_weights(folder, loaded); }).find("model.json: "), std::string::npos);
  // And a second save never overwrites.
  EXPECT_NE(error_of([&] { save_model(*transformer_weights(model_), folder); }).find("already exists"),
            std::string::npos);
}

TEST_F(ModelFolderTest, AnotherArchitectureIsNamed) {
  const std::string folder = dir_ + "/model";
  save_model(*transformer_weights(model_), folder);
  ModelConfig other = model_.config();
  other.n_layers = 3;
  Transformer bigger(other, DType::f32);
  const std::string err = error_of([&] { load_model_weights(folder, bigger); });
  EXPECT_NE(err.find("another architecture"), std::string::npos) << err;
}

// A NaN or an infinity in the weights is named as it loads, not trained or generated from.
TEST_F(ModelFolderTest, NonFiniteWeightsAreNamed) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    const std::string folder = dir_ + "/nonfinite_" + std::to_string(std::isnan(bad));
    Transformer damaged(model_.config(), DType::f32);
    damaged.params().values().copy_from(model_.params().values());
    const Parameter& norm = damaged.params().all().back();
    std::vector<float> values = norm.value.to_vector<float>();
    values.back() = bad;
    norm.value.copy_from(Tensor::from(values, norm.value.shape()));
    save_model(*transformer_weights(damaged), folder);
    Transformer loaded(model_.config(), DType::f32);
    const std::string err = error_of([&] { load_model_weights(folder, loaded); });
    EXPECT_NE(err.find("parameter '" + norm.name + "' holds NaN or infinite values"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace hone::test
