// Checkpoint folders: round trip, retention, and corruption that is reported by
// file instead of being loaded.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>

#include "hone/core/files.hpp"
#include "hone/core/text.hpp"
#include "hone/io/atomic_file.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/io/safetensors.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

// Lists `file` of a checkpoint in its manifest as the file now is: a file
// edited by hand or by another tool, which the checksums alone let through.
void relist(const std::string& folder, const std::string& file) {
  const std::string path = folder + "/" + file;
  nlohmann::json manifest = nlohmann::json::parse(read_file(folder + "/manifest.json"));
  manifest["files"][file] = {{"bytes", fs::file_size(path)}, {"xxh3_64", checksum_hex(file_checksum(path))}};
  std::ofstream(folder + "/manifest.json") << manifest.dump();
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "hone_ckpt_" + std::to_string(::getpid());
    fs::remove_all(dir_);
    model_.init_weights(1);
    model_.params().grads().copy_from(random_tensor(model_.params().grads().shape(), DType::f32, 2));
    optimizer_.step(1e-3);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string save(int64_t step, int64_t keep = 0) {
    TrainerState s;
    s.step = step;
    s.tokens_seen = 1000 * step;
    s.data_state = {{"position", 7 * step}};
    s.config = {{"model", {{"name", "llama_tiny"}}}};
    return save_checkpoint(dir_, model_, optimizer_, s, keep);
  }

  std::string error_loading(const std::string& folder) {
    Transformer m(model_preset("llama_tiny"), DType::f32);
    AdamW o(m.params(), AdamWConfig{});
    try {
      load_checkpoint(folder, m, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  std::string dir_;
  Transformer model_{model_preset("llama_tiny"), DType::f32};
  AdamW optimizer_{model_.params(), AdamWConfig{}};
};

TEST_F(CheckpointTest, RoundTripRestoresWeightsMomentsAndState) {
  const std::string folder = save(42);
  EXPECT_EQ(fs::path(folder).filename(), "step_0000042");
  EXPECT_EQ(find_checkpoint(dir_, "latest"), folder);
  Transformer m(model_preset("llama_tiny"), DType::f32);
  AdamW o(m.params(), AdamWConfig{});
  TrainerState s = load_checkpoint(folder, m, o);
  EXPECT_EQ(s.step, 42);
  EXPECT_EQ(s.tokens_seen, 42000);
  EXPECT_EQ(s.data_state["position"], 294);
  EXPECT_EQ(s.config["model"]["name"], "llama_tiny");
  EXPECT_EQ(o.steps_taken(), 1);
  EXPECT_EQ(m.params().values().to_vector<float>(), model_.params().values().to_vector<float>());
  EXPECT_EQ(o.exp_avg().to_vector<float>(), optimizer_.exp_avg().to_vector<float>());
  EXPECT_EQ(o.exp_avg_sq().to_vector<float>(), optimizer_.exp_avg_sq().to_vector<float>());
  // Nothing temporary is left behind.
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_FALSE(e.path().filename().string().starts_with("."));
}

TEST_F(CheckpointTest, AFailedSaveLeavesNothingBehind) {
  const std::string first = save(1);
  TrainerState s;
  s.step = 2;
  // A companion file that has gone (a tokenizer deleted mid-run) fails the save after the weights are written.
  EXPECT_THROW(save_checkpoint(dir_, model_, optimizer_, s, 0, {dir_ + "/no_such_tokenizer.json"}), Error);
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir_)) entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"latest", "step_0000001"}));
  EXPECT_EQ(find_checkpoint(dir_, "latest"), first);
}

TEST_F(CheckpointTest, KeepsTheLastNAndLatestPointsAtTheNewest) {
  EXPECT_EQ(find_checkpoint(dir_ + "_none", "latest"), std::nullopt);
  for (int64_t step : {10, 20, 30, 40}) save(step, 2);
  EXPECT_FALSE(fs::exists(dir_ + "/step_0000010"));
  EXPECT_FALSE(fs::exists(dir_ + "/step_0000020"));
  EXPECT_TRUE(fs::exists(dir_ + "/step_0000030"));
  EXPECT_EQ(find_checkpoint(dir_, "latest"), dir_ + "/step_0000040");
  // A step folder's name is the run's, even where the working directory has
  // one of that name too (another run's); a path is a path.
  const fs::path before = fs::current_path();
  fs::create_directories(dir_ + "_elsewhere/step_0000030");
  fs::current_path(dir_ + "_elsewhere");
  EXPECT_EQ(find_checkpoint(dir_, "step_0000030"), dir_ + "/step_0000030");
  EXPECT_EQ(find_checkpoint(dir_, "./step_0000030"), "./step_0000030");
  fs::current_path(before);
  fs::remove_all(dir_ + "_elsewhere");
}

// A kill during a save leaves its temporary folder, and one while a step folder
// is deleted the hidden folder it was renamed to first (so that no step folder
// is ever seen with a manifest that lists files gone): the next save removes
// both, whatever their step (a step the run never saves again included).
TEST_F(CheckpointTest, WhatKilledSavesLeftGoesAtTheNextSave) {
  save(1);
  fs::create_directories(dir_ + "/.step_0000009.tmp");
  std::ofstream(dir_ + "/.step_0000009.tmp/model.safetensors") << "cut short";
  fs::create_directories(dir_ + "/.step_0000002.removed");
  std::ofstream(dir_ + "/.step_0000002.removed/manifest.json") << "{}";
  save(3, 1);  // keep_last_n 1: step 1 goes
  save(3, 1);  // the same step again, as after a resume from an earlier one
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir_)) entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"latest", "step_0000003"}));
  EXPECT_NO_THROW(verify_checkpoint(dir_ + "/step_0000003"));
}

TEST_F(CheckpointTest, CorruptionIsReportedByFile) {
  const std::string folder = save(5);
  {  // flip one byte in the middle of the weights
    std::fstream f(folder + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    char c;
    f.read(&c, 1);
    f.seekp(5000);
    c = char(c ^ 0x40);
    f.write(&c, 1);
  }
  std::string err = error_loading(folder);
  EXPECT_NE(err.find("model.safetensors: checksum"), std::string::npos) << err;

  const std::string second = save(6);
  fs::resize_file(second + "/optimizer.safetensors", fs::file_size(second + "/optimizer.safetensors") - 10);
  err = error_loading(second);
  EXPECT_NE(err.find("optimizer.safetensors: " + std::to_string(fs::file_size(second + "/optimizer.safetensors")) +
                     " bytes where the manifest lists " +
                     std::to_string(fs::file_size(second + "/optimizer.safetensors") + 10) +
                     ": cut short or changed since it was saved"),
            std::string::npos)
      << err;
  // Longer (a file rewritten by hand, its JSON spaced out): changed, not cut short.
  const std::string longer = save(9);
  const uintmax_t saved_size = fs::file_size(longer + "/model.json");
  std::ofstream(longer + "/model.json", std::ios::app) << "\n";
  EXPECT_NE(error_loading(longer).find("model.json: " + std::to_string(saved_size + 1) +
                                       " bytes where the manifest lists " + std::to_string(saved_size) +
                                       ": changed since it was saved"),
            std::string::npos)
      << error_loading(longer);

  const std::string third = save(7);
  fs::remove(third + "/model.json");
  fs::create_directory(third + "/model.json");  // a folder where a listed file was
  err = error_loading(third);
  EXPECT_NE(err.find(third + "/model.json: not a file (listed in " + third + "/manifest.json as one)"),
            std::string::npos)
      << err;
  fs::remove(third + "/manifest.json");
  EXPECT_NE(error_loading(third).find("not a complete checkpoint"), std::string::npos);
  EXPECT_THROW(find_checkpoint(dir_, dir_ + "/step_9999999"), Error);
  fs::create_directories(dir_ + "_folder/latest");  // `latest` must be a file
  try {
    find_checkpoint(dir_ + "_folder", "latest");
    ADD_FAILURE() << "a folder named latest was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("latest: a folder, where a file naming the newest checkpoint was expected"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir_ + "_folder");

  // The training state, which a resume reads before the weights (its config),
  // is checked against the manifest first: a key renamed in place was an internal error.
  const std::string fourth = save(8);
  std::string state = read_file(fourth + "/trainer_state.json");
  replace_all(state, "\"config\"", "\"confiX\"");
  std::ofstream(fourth + "/trainer_state.json", std::ios::binary) << state;
  try {
    checkpoint_config(fourth);
    ADD_FAILURE() << "a changed trainer_state.json was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trainer_state.json: checksum"), std::string::npos) << e.what();
  }
}

// A tensor neither the model nor its optimizer has is named, even where the
// manifest was rewritten to match (a file edited by hand or by another tool).
TEST_F(CheckpointTest, AnExtraTensorIsNamed) {
  for (const std::string file : {"model.safetensors", "optimizer.safetensors"}) {
    SCOPED_TRACE(file);
    const std::string folder = save(file == "model.safetensors" ? 11 : 12);
    const std::string path = folder + "/" + file;
    std::vector<NamedTensor> tensors;
    {
      const SafetensorsFile f(path);
      for (const std::string& name : f.names()) tensors.push_back({name, f.load(name)});
    }
    tensors.push_back({"layers.0.attn.extra.weight", Tensor::zeros({4}, DType::f32)});
    write_safetensors(path, tensors);
    relist(folder, file);
    const std::string err = error_loading(folder);
    EXPECT_NE(err.find(path + ": unexpected tensor 'layers.0.attn.extra.weight'"), std::string::npos) << err;
  }
}

// A training state or manifest edited by hand to hold a value of the wrong type
// or sign is an error naming the file and the key (was: an internal error, or a
// negative step trained from).
TEST_F(CheckpointTest, AHandEditedTrainingStateIsNamedByKey) {
  const std::string folder = save(9);
  const std::string state_path = folder + "/trainer_state.json";
  const nlohmann::json saved = nlohmann::json::parse(read_file(state_path));
  for (const auto& [key, value, expected] :
       std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"step", -3, "trainer_state.json: 'step' must be 0 or more, got -3"},
           {"optimizer_steps", "7", "trainer_state.json: 'optimizer_steps' must be an integer, got \"7\""},
           {"samples_seen", 1.5, "'samples_seen' must be an integer, got 1.5"},
           {"next_lr", true, "'next_lr' must be a number, got true"},
           {"data", nlohmann::json::array(), "trainer_state.json: 'data' must be an object, got []"}}) {
    SCOPED_TRACE(key);
    nlohmann::json edited = saved;
    edited[key] = value;
    std::ofstream(state_path) << edited.dump();
    relist(folder, "trainer_state.json");
    const std::string err = error_loading(folder);
    EXPECT_NE(err.find(expected), std::string::npos) << err;
  }
  std::ofstream(state_path) << "[1, 2]";
  relist(folder, "trainer_state.json");
  EXPECT_NE(error_of([&] { checkpoint_config(folder); }).find(state_path + ": not a JSON object"), std::string::npos);

  nlohmann::json manifest = nlohmann::json::parse(read_file(folder + "/manifest.json"));
  manifest["files"]["model.safetensors"]["bytes"] = "1024";
  std::ofstream(folder + "/manifest.json") << manifest.dump();
  const std::string err = error_loading(folder);
  EXPECT_NE(err.find("manifest.json: files: model.safetensors: 'bytes' must be an integer, got \"1024\""),
            std::string::npos)
      << err;
  // Its format or version of another type, or the whole file not an object (was: an internal error).
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"format", nullptr}, {"version", "1"}, {"files", true}, {"", nullptr}, {"", 3}}) {
    nlohmann::json edited = manifest;
    if (key.empty()) {
      edited = value;
    } else {
      edited[key] = value;
    }
    std::ofstream(folder + "/manifest.json") << edited.dump();
    const std::string err = error_loading(folder);
    EXPECT_NE(err.find(folder + "/manifest.json: not a hone checkpoint manifest"), std::string::npos) << err;
  }
}

// `latest` holds a folder name beside it: a path there (edited by hand) would
// resume another run's checkpoint, and is refused.
TEST_F(CheckpointTest, LatestNamesAFolderBesideIt) {
  save(4);
  // A NUL or a name longer than a file name may be (damage) too, with hone's words, not the system's.
  for (const std::string name : {std::string("../elsewhere/step_0000004"), std::string("/tmp/step_0000004"),
                                 std::string(".."), std::string("step\0_1", 7), std::string(300, 's')}) {
    std::ofstream(dir_ + "/latest") << name;
    const std::string err = error_of([&] { find_checkpoint(dir_, "latest"); });
    const std::string shown = name.find('\0') != std::string::npos ? "step\\0_1" : name.substr(0, 255);
    EXPECT_NE(err.find("latest: names '" + shown + "', not a checkpoint folder beside it"),
              std::string::npos)
        << err;
  }
  std::ofstream(dir_ + "/latest") << "step_0000009";  // deleted since: the last complete one
  EXPECT_EQ(find_checkpoint(dir_, "latest"), dir_ + "/step_0000004");
}

TEST_F(CheckpointTest, AnotherArchitectureIsRejected) {
  const std::string folder = save(3);
  ModelConfig other = model_preset("llama_tiny");
  other.ffn_dim = 128;
  Transformer m(other, DType::f32);
  AdamW o(m.params(), AdamWConfig{});
  try {
    load_checkpoint(folder, m, o);
    FAIL() << "loaded a checkpoint of another shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mlp.up.weight"), std::string::npos) << e.what();
  }
}

TEST(ShardedCheckpoint, ZeroShardsSaveAndLoadAtAnyWorldSize) {
  const std::string dir = testing::TempDir() + "hone_zero_ckpt_" + std::to_string(::getpid());
  fs::remove_all(dir);
  // Two ZeRO "ranks" in one process: shards of a buffer padded to a multiple of 2.
  Transformer model(model_preset("llama_tiny"), DType::f32, Device::cpu(), std::nullopt, {.pad_multiple = 2});
  model.init_weights(1);
  const int64_t padded = model.params().values().numel(), half = padded / 2;
  EXPECT_EQ(padded % 2, 0);
  EXPECT_EQ(model.params().numel(), model.config().num_params());
  Transformer reference(model_preset("llama_tiny"), DType::f32);
  reference.init_weights(1);
  AdamW rank0(model.params(), AdamWConfig{}, 0, half), rank1(model.params(), AdamWConfig{}, half, half);
  AdamW whole(reference.params(), AdamWConfig{});
  for (int step = 0; step < 3; ++step) {
    const Tensor g = random_tensor({model.config().num_params()}, DType::f32, uint64_t(step + 5));
    model.params().grads().slice(0, {g.numel()}).copy_from(g);
    reference.params().grads().copy_from(g);
    rank0.step(1e-2);
    rank1.step(1e-2);
    whole.step(1e-2);
  }
  // The shards together are the unsharded optimizer.
  EXPECT_EQ(model.params().values().slice(0, {model.config().num_params()}).to_vector<float>(),
            reference.params().values().to_vector<float>());
  TrainerState state;
  state.step = 3;
  const TemporaryCheckpointFolder made(dir, 3);
  const std::string& tmp = made.path();
  std::map<std::string, WrittenFile> files;
  files.insert(*write_optimizer_state(tmp, model, rank0, 0, 2));
  files.insert(*write_optimizer_state(tmp, model, rank1, 1, 2));
  CheckpointWeights weights(tmp, model);
  for (const Parameter* p : weights.parameters()) weights.write(*p, p->value);
  files.insert(weights.commit());
  const std::string folder = finish_checkpoint(dir, tmp, model, rank0.steps_taken(), state, 0, files);
  EXPECT_TRUE(fs::exists(folder + "/" + optimizer_shard_file(1, 2)));
  EXPECT_NO_THROW(verify_checkpoint(folder));
  // Loaded whole (world 1) it is the unsharded optimizer's state.
  Transformer one(model_preset("llama_tiny"), DType::f32);
  AdamW loaded(one.params(), AdamWConfig{});
  load_checkpoint(folder, one, loaded);
  EXPECT_EQ(loaded.exp_avg().to_vector<float>(), whole.exp_avg().to_vector<float>());
  EXPECT_EQ(loaded.exp_avg_sq().to_vector<float>(), whole.exp_avg_sq().to_vector<float>());
  EXPECT_EQ(one.params().values().to_vector<float>(), reference.params().values().to_vector<float>());
  // Resharded over three ranks: each third holds its slice.
  Transformer three(model_preset("llama_tiny"), DType::f32, Device::cpu(), std::nullopt, {.pad_multiple = 3});
  const int64_t third = three.params().values().numel() / 3;
  AdamW middle(three.params(), AdamWConfig{}, third, third);
  load_checkpoint(folder, three, middle);
  EXPECT_EQ(middle.exp_avg().to_vector<float>(), whole.exp_avg().slice(third, {third}).to_vector<float>());
  // Ranges edited to overflow, or to repeat the other shard's (were: a crash; half the moments zero).
  const std::string second = optimizer_shard_file(1, 2);
  const std::string first_ranges = SafetensorsFile(folder + "/" + optimizer_shard_file(0, 2)).metadata().at("ranges");
  const SafetensorsFile saved(folder + "/" + second);
  const Tensor m = saved.load("exp_avg"), v = saved.load("exp_avg_sq");
  const std::string held_to = std::to_string(nlohmann::json::parse(first_ranges)[0][2].get<int64_t>());
  for (const auto& [ranges, expected] : std::vector<std::pair<std::string, std::string>>{
           {"[[0,2305843009213693952,6917529027641081856]]", "2305843009213693952 lie outside its"},
           {"[[9223372036854775807,0,1]]", "lie outside the model's"},
           {first_ranges, "no optimizer shard holds the moments of parameters " + held_to + " to "}}) {
    SCOPED_TRACE(ranges);
    fs::remove(folder + "/" + second);
    write_safetensors(folder + "/" + second, {{"exp_avg", m}, {"exp_avg_sq", v}}, {{"ranges", ranges}});
    relist(folder, second);
    AdamW edited(one.params(), AdamWConfig{});
    try {
      load_checkpoint(folder, one, edited);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  // A missing shard is an error, not zeros.
  fs::remove(folder + "/" + optimizer_shard_file(1, 2));
  AdamW again(one.params(), AdamWConfig{});
  EXPECT_THROW(load_checkpoint(folder, one, again), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hone::test
