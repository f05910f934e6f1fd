// Model interop: the Hugging Face folders, llm.c and llama2.c files that
// tests/reference/generate_hf.py wrote, imported and run against the logits of
// its from-scratch PyTorch implementations; export and round trips; and the
// errors for broken inputs.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hone/io/c_checkpoints.hpp"
#include "hone/io/checkpoint.hpp"
#include "hone/io/convert.hpp"
#include "hone/io/hf.hpp"
#include "hone/io/safetensors.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

constexpr double kTolerance = 1e-4;

std::string fixture(const std::string& name) { return source_path("tests/reference/hf/" + name); }

ConvertOptions to(ModelFolderKind kind) {
  ConvertOptions options;
  options.to = kind;
  return options;
}

HfExportOptions in(DType dtype, uint64_t shard_bytes = 5'000'000'000) {
  HfExportOptions options;
  options.dtype = dtype;
  options.shard_bytes = shard_bytes;
  return options;
}

// The model at `path`, loaded into an fp32 Transformer.
std::unique_ptr<Transformer> import_model(const std::string& path) {
  const auto source = open_weights(path);
  auto model = std::make_unique<Transformer>(source->config(), DType::f32);
  load_weights(*source, *model);
  return model;
}

// Max relative error of the model's logits on the fixture's reference tokens.
double logit_error(Transformer& model, const std::string& reference_name) {
  const SafetensorsFile reference(fixture(reference_name + ".reference.safetensors"));
  model.forward(reference.load("tokens"));
  return relative_error(model.logits(), reference.load("logits"));
}

std::string bytes_of(const TensorFile& file, const std::string& name) {
  const auto b = file.entry(name).bytes;
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// The tensors of an HF folder (all shards), by name, opened.
struct HfTensors {
  std::vector<std::unique_ptr<TensorFile>> files;
  std::map<std::string, const TensorFile*> where;

  explicit HfTensors(const std::string& dir) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      if (entry.path().extension() != ".safetensors" && entry.path().extension() != ".bin") continue;
      files.push_back(open_tensor_file(entry.path().string()));
      for (const std::string& name : files.back()->names()) where[name] = files.back().get();
    }
  }
};

class HfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "hone_hf_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // A copy of a fixture folder to break.
  std::string copy_fixture(const std::string& name) {
    const std::string copy = path(name);
    fs::copy(fixture(name), copy, fs::copy_options::recursive);
    return copy;
  }

  // Reading a copy of a fixture whose config.json `change` edits: the error, or "" when it reads.
  using ConfigChange = std::function<void(nlohmann::json&)>;
  std::function<std::string(const ConfigChange&)> config_error_of(const std::string& name) {
    const std::string dir = copy_fixture(name);
    const nlohmann::json original = nlohmann::json::parse(read_text(dir + "/config.json"));
    return [dir, original](const ConfigChange& change) {
      nlohmann::json j = original;
      change(j);
      write_text(dir + "/config.json", j.dump());
      return error_of([&] { read_hf_config(dir); });
    };
  }

  std::string dir_;
};

// Folders of safetensors, and two of PyTorch's torch.save archives (pytorch_model.bin, and shards).
const char* const kHfFixtures[] = {"llama31_sharded", "llama32_tied_bf16", "llama2_mha_f16", "mistral_f16", "gpt2",
                                   "mpt_bf16", "gpt2_pickle", "llama2_pickle_bf16"};
const char* const kCFixtures[] = {"llmc_gpt2_fp32", "llmc_gpt2_bf16", "llama2c_legacy", "llama2c_v1"};
// nanoGPT's ckpt.pt: with biases and a head of its own (flash attention: no masks); compiled (names under
// _orig_mod.), without biases, tied, with the causal masks.
const char* const kNanoGptFixtures[] = {"nanogpt_bias", "nanogpt_compiled"};
// Meta's own folders: params.json and consolidated.00.pth.
const char* const kMetaFixtures[] = {"meta_llama32_tied", "meta_llama2"};

TEST_F(HfTest, ImportedModelsComputeTheReferenceLogits) {
  for (const char* name : kHfFixtures) {
    auto model = import_model(fixture(name));
    const double error = logit_error(*model, name);
    EXPECT_LE(error, kTolerance) << name;
    std::printf("%-20s relative logit error %.2e\n", name, error);
  }
  for (const char* name : kCFixtures) {
    auto model = import_model(fixture(std::string(name) + ".bin"));
    const double error = logit_error(*model, name);
    EXPECT_LE(error, kTolerance) << name;
    std::printf("%-20s relative logit error %.2e\n", name, error);
  }
  for (const char* name : kMetaFixtures) {
    auto model = import_model(fixture(name));
    const double error = logit_error(*model, name);
    EXPECT_LE(error, kTolerance) << name;
    std::printf("%-20s relative logit error %.2e\n", name, error);
  }
  for (const char* name : kNanoGptFixtures) {
    auto model = import_model(fixture(std::string(name) + ".pt"));
    const double error = logit_error(*model, name);
    EXPECT_LE(error, kTolerance) << name;
    std::printf("%-20s relative logit error %.2e\n", name, error);
  }
}

TEST_F(HfTest, NanoGptCheckpointsMapOntoModelConfig) {
  const std::string with_bias = fixture("nanogpt_bias.pt");
  EXPECT_EQ(model_format(with_bias), "nanogpt");
  const auto source = open_weights(with_bias, "nanogpt");
  const ModelConfig& c = source->config();
  EXPECT_EQ(c.name, "hf");  // the folder's name, as out_dir names a nanoGPT run
  EXPECT_EQ(c.family, Family::gpt2);
  EXPECT_EQ(c.vocab_size, 40);
  EXPECT_EQ(c.max_seq_len, 32);
  EXPECT_EQ(c.ffn_dim, 64);
  EXPECT_EQ(c.mlp, MlpKind::gelu);
  EXPECT_TRUE(c.norm_bias && c.linear_bias);
  EXPECT_FALSE(c.tie_embeddings);  // lm_head.weight with a storage of its own
  EXPECT_EQ(source->description(), "nanoGPT checkpoint " + with_bias + " (iter_num 5)");
  EXPECT_EQ(source->notes(), std::vector<std::string>{"dropout 0.1: hone trains without dropout"});
  const ModelConfig compiled = open_weights(fixture("nanogpt_compiled.pt"))->config();
  EXPECT_FALSE(compiled.norm_bias || compiled.linear_bias);
  EXPECT_TRUE(compiled.tie_embeddings);  // lm_head.weight sharing wte's storage
  // A bare file name (run in the checkpoint's folder): the model is named by the folder.
  const fs::path here = fs::current_path();
  fs::current_path(fs::path(with_bias).parent_path());
  const std::string bare_name = error_of([&] { EXPECT_EQ(open_weights("nanogpt_bias.pt")->config().name, "hf"); });
  fs::current_path(here);
  EXPECT_EQ(bare_name, "");
  EXPECT_NE(error_of([&] { open_weights(with_bias, "hf"); })
                .find("checkpoint.format is hf, but this is a nanoGPT checkpoint (ckpt.pt)"),
            std::string::npos);
  // model_args claiming a layer the state dict lacks.
  EXPECT_NE(error_of([&] { open_weights(fixture("nanogpt_wrong_args.pt")); })
                .find("nanogpt_wrong_args.pt: model_args: n_layer 3, but " + fixture("nanogpt_wrong_args.pt") +
                      " has no tensor 'model._orig_mod.transformer.h.2.ln_1.weight'"),
            std::string::npos)
      << error_of([&] { open_weights(fixture("nanogpt_wrong_args.pt")); });
}

TEST_F(HfTest, MetaFoldersMapOntoModelConfig) {
  const auto llama32 = open_weights(fixture("meta_llama32_tied"));
  const ModelConfig& c = llama32->config();
  EXPECT_EQ(model_format(fixture("meta_llama32_tied")), "meta");
  EXPECT_EQ(c.name, "meta_llama32_tied");
  EXPECT_EQ(c.family, Family::llama);
  EXPECT_EQ(c.vocab_size, 48);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.ffn_dim, 112);  // Meta's rule: 2/3 of 4·dim (85), × 1.3 (110), up to a multiple of 16
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_EQ(llama32->stored_dtype(), DType::bf16);
  ASSERT_EQ(llama32->notes().size(), 2u);
  EXPECT_NE(llama32->notes()[0].find("RoPE scaled by 8 as Meta's reference code does"), std::string::npos);
  const ModelConfig llama2 = open_weights(fixture("meta_llama2"))->config();
  EXPECT_EQ(llama2.n_kv_heads, 4);  // no n_kv_heads: multi-head
  EXPECT_EQ(llama2.norm_eps, 1e-6);
  EXPECT_EQ(llama2.rope_theta, 10000.0);
  EXPECT_FALSE(llama2.rope_scaling.enabled());
  EXPECT_FALSE(llama2.tie_embeddings);
  EXPECT_EQ(llama2.max_seq_len, 4096);
  EXPECT_EQ(open_weights(fixture("meta_llama2"), "meta")->description(), "Meta Llama folder " + fixture("meta_llama2"));
  EXPECT_NE(error_of([&] { open_weights(fixture("meta_llama2"), "hf"); })
                .find("checkpoint.format is hf, but this is a Meta Llama folder (params.json, consolidated.00.pth)"),
            std::string::npos);
}

TEST_F(HfTest, BrokenMetaFoldersAreNamed) {
  const std::string dir = copy_fixture("meta_llama2");
  const auto error = [&] { return error_of([&] { open_weights(dir); }); };
  // params.json describing another model.
  const std::string params = read_text(dir + "/params.json");
  write_text(dir + "/params.json", R"({"dim": 32, "multiple_of": 16, "n_heads": 4, "n_layers": 3, "vocab_size": -1})");
  EXPECT_NE(error().find("params.json: n_layers 3, but " + dir + "/consolidated.00.pth has no tensor "
                         "'layers.2.attention_norm.weight'"),
            std::string::npos)
      << error();
  // Said before every layer's tensors are listed: a billion layers were a billion names first.
  write_text(dir + "/params.json", R"({"dim": 32, "n_heads": 4, "n_layers": 2147483647, "vocab_size": -1})");
  EXPECT_NE(error().find("n_layers 2147483647, but"), std::string::npos) << error();
  write_text(dir + "/params.json", R"({"dim": 32, "multiple_of": 16, "n_heads": 4, "n_layers": 1, "vocab_size": -1})");
  EXPECT_NE(error().find("consolidated.00.pth: unexpected tensor 'layers.1."), std::string::npos) << error();
  write_text(dir + "/params.json", R"({"dim": 32, "n_heads": 4, "n_layers": 2, "vocab_size": 50})");
  EXPECT_NE(error().find("params.json: vocab_size 50 but tok_embeddings.weight is [48, 32]"), std::string::npos)
      << error();
  write_text(dir + "/params.json", R"({"dim": 32, "n_heads": 4, "n_kv_heads": 3, "n_layers": 2})");
  EXPECT_NE(error().find("do not make whole heads shared by whole groups"), std::string::npos) << error();
  // Model-parallel shards, refused before any shard is read (this one would not parse).
  write_text(dir + "/params.json", params);
  fs::copy_file(dir + "/consolidated.00.pth", dir + "/consolidated.01.pth");
  write_text(dir + "/consolidated.00.pth", "PK\3\4" + std::string(60, 'x'));
  EXPECT_NE(error().find("model-parallel shards (consolidated.00.pth, consolidated.01.pth, ...)"), std::string::npos)
      << error();
}

TEST_F(HfTest, LoadingReadsTheMappedFileWithoutCopyingTheModel) {
  // Weights go from the memory-mapped file (not counted) straight into the
  // model's buffers: loading allocates at most one parameter's worth at a time
  // (a transposed or converted staging copy), never a second copy of the model.
  Allocator& memory = allocator_for(Device::cpu());
  for (const char* name : kHfFixtures) {
    const auto source = open_weights(fixture(name));
    Transformer model(source->config(), DType::f32);
    size_t largest = 0;
    for (const Parameter& p : model.params().all()) largest = std::max(largest, p.value.nbytes());
    memory.reset_peak();
    const size_t before = memory.stats().allocated;
    load_weights(*source, model);
    EXPECT_LE(memory.stats().peak_allocated - before, largest) << name;
    EXPECT_LT(largest, model.params().values().nbytes() / 2) << name << ": the bound would not tell";
  }
}

TEST_F(HfTest, ConfigsMapOntoModelConfig) {
  const ModelConfig llama = read_hf_config(fixture("llama31_sharded"));
  EXPECT_EQ(llama.family, Family::llama);
  EXPECT_EQ(llama.name, "llama31_sharded");
  EXPECT_EQ(llama.n_kv_heads, 2);
  EXPECT_EQ(llama.rope_scaling.factor, 8.0);
  EXPECT_EQ(llama.rope_scaling.original_max_position, 64);
  EXPECT_FALSE(llama.tie_embeddings);
  EXPECT_TRUE(read_hf_config(fixture("llama32_tied_bf16")).tie_embeddings);
  EXPECT_EQ(read_hf_config(fixture("llama32_tied_bf16")).rope_theta, 500000.0);
  // Llama 2's config.json predates num_key_value_heads and rope_theta: transformers' defaults.
  const ModelConfig llama2 = read_hf_config(fixture("llama2_mha_f16"));
  EXPECT_EQ(llama2.n_kv_heads, llama2.n_heads);
  EXPECT_EQ(llama2.rope_theta, 10000.0);
  // Mistral's window caps the sequence length (full attention equals it only within the window).
  const auto mistral = open_weights(fixture("mistral_f16"));
  EXPECT_EQ(mistral->config().max_seq_len, 16);
  ASSERT_EQ(mistral->notes().size(), 1u);
  EXPECT_NE(mistral->notes()[0].find("sliding_window 16"), std::string::npos);
  EXPECT_EQ(mistral->stored_dtype(), DType::f16);
  const ModelConfig gpt2 = read_hf_config(fixture("gpt2"));
  EXPECT_EQ(gpt2.mlp, MlpKind::gelu_tanh);
  EXPECT_EQ(gpt2.ffn_dim, 64);
  const ModelConfig mpt = read_hf_config(fixture("mpt_bf16"));
  EXPECT_EQ(mpt.position, PositionKind::alibi);
  EXPECT_EQ(mpt.n_heads, 6);
  EXPECT_FALSE(mpt.norm_bias);
  const auto llmc = open_weights(fixture("llmc_gpt2_fp32.bin"));
  EXPECT_EQ(llmc->config().vocab_size, 45);  // the padded rows are dropped
  EXPECT_EQ(open_weights(fixture("llmc_gpt2_bf16.bin"))->stored_dtype(), DType::bf16);
  EXPECT_FALSE(open_weights(fixture("llama2c_legacy.bin"))->config().tie_embeddings);
  EXPECT_TRUE(open_weights(fixture("llama2c_v1.bin"))->config().tie_embeddings);
}

TEST_F(HfTest, ParameterNamesMapToHuggingFaceNames) {
  const ModelConfig llama = read_hf_config(fixture("llama31_sharded"));
  const auto qkv = hf_tensors_of(llama, "layers.1.attn.qkv.weight");
  ASSERT_EQ(qkv.size(), 3u);
  EXPECT_EQ(qkv[0].name, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(qkv[1].name, "model.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(qkv[1].row_begin, 32);
  EXPECT_EQ(qkv[1].shape, Shape({16, 32}));
  EXPECT_EQ(qkv[2].row_begin, 48);
  const auto up = hf_tensors_of(llama, "layers.0.mlp.up.weight");
  ASSERT_EQ(up.size(), 2u);
  EXPECT_EQ(up[0].name, "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(up[1].name, "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(up[1].row_begin, 32);
  const auto c_fc = hf_tensors_of(read_hf_config(fixture("gpt2")), "layers.0.mlp.up.weight");
  ASSERT_EQ(c_fc.size(), 1u);
  EXPECT_EQ(c_fc[0].name, "transformer.h.0.mlp.c_fc.weight");
  EXPECT_TRUE(c_fc[0].transposed);
  EXPECT_EQ(c_fc[0].shape, Shape({16, 64}));  // Conv1D: [in, out]
  EXPECT_EQ(hf_tensors_of(read_hf_config(fixture("mpt_bf16")), "layers.1.attn.qkv.weight")[0].name,
            "transformer.blocks.1.attn.Wqkv.weight");
  EXPECT_THROW(hf_tensors_of(llama, "layers.0.attn.nope.weight"), Error);
}

TEST_F(HfTest, ParameterSpecsAreTheTransformersParameters) {
  std::vector<ModelConfig> configs;
  for (const char* name : {"llama_tiny", "gpt2_tiny", "mpt_tiny"}) configs.push_back(model_preset(name));
  configs.push_back(configs[0]);
  configs.back().tie_embeddings = true;
  configs.push_back(configs[2]);
  configs.back().norm_bias = configs.back().linear_bias = true;
  for (const ModelConfig& c : configs) {
    const Transformer model(c, DType::f32);
    const auto specs = parameter_specs(c);
    ASSERT_EQ(specs.size(), model.params().all().size()) << c.name;
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(specs[i].name, model.params().all()[i].name) << c.name;
      EXPECT_EQ(specs[i].shape, model.params().all()[i].shape) << specs[i].name;
    }
  }
}

TEST_F(HfTest, ExportIsByteIdenticalToTheImportedTensors) {
  for (const char* name : kHfFixtures) {
    const std::string out = path(std::string(name) + "_export");
    const auto source = open_weights(fixture(name));
    export_hf(*source, out);
    const HfTensors original(fixture(name)), exported(out);
    int64_t compared = 0;
    for (const auto& [tensor, file] : exported.where) {
      // GPT-2's fixture has the GPT2Model names of the original checkpoints.
      std::string original_name = tensor;
      if (!original.where.count(tensor) && tensor.starts_with("transformer.")) original_name = tensor.substr(12);
      ASSERT_TRUE(original.where.count(original_name)) << name << ": exported an unknown tensor " << tensor;
      const TensorFile& from = *original.where.at(original_name);
      EXPECT_EQ(file->entry(tensor).dtype, from.entry(original_name).dtype) << tensor;
      EXPECT_EQ(file->entry(tensor).shape, from.entry(original_name).shape) << tensor;
      EXPECT_EQ(bytes_of(*file, tensor), bytes_of(from, original_name)) << name << ": " << tensor;
      EXPECT_EQ(dynamic_cast<const SafetensorsFile&>(*file).metadata().at("format"), "pt");
      ++compared;
    }
    // Everything but the buffers (causal masks, rotary frequencies) and a tied
    // model's second name for its embeddings is exported.
    int64_t weights = 0;
    for (const auto& [tensor, file] : original.where) {
      weights += !tensor.ends_with(".attn.bias") && !tensor.ends_with(".attn.masked_bias") &&
                 !tensor.ends_with("inv_freq") && !(source->config().tie_embeddings && tensor == "lm_head.weight");
    }
    EXPECT_EQ(compared, weights) << name;
    // The exported config describes the same model.
    ModelConfig again = read_hf_config(out), before = source->config();
    again.name = before.name;
    EXPECT_EQ(hf_config_to_json(again, DType::f32).dump(), hf_config_to_json(before, DType::f32).dump()) << name;
  }
}

TEST_F(HfTest, ExportedFoldersHaveWhatTransformersLoads) {
  const std::string out = path("llama");
  export_hf(*open_weights(fixture("llama31_sharded")), out, in(DType::bf16, 10000));
  const nlohmann::json config = nlohmann::json::parse(read_text(out + "/config.json"));
  EXPECT_EQ(config["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(config["torch_dtype"], "bfloat16");
  EXPECT_EQ(config["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(config["eos_token_id"], nlohmann::json::array({2, 3}));  // from generation_config.json
  // Tokenizer and generation config travel along unchanged.
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    EXPECT_EQ(read_text(out + "/" + file), read_text(fixture("llama31_sharded/") + file)) << file;
  }
  // Shards of at most the limit (one tensor alone may exceed it) and an index naming every tensor.
  const nlohmann::json index = nlohmann::json::parse(read_text(out + "/model.safetensors.index.json"));
  const HfTensors exported(out);
  EXPECT_GT(exported.files.size(), 2u);
  EXPECT_EQ(index["weight_map"].size(), exported.where.size());
  uint64_t total = 0;
  for (auto& [tensor, file] : index["weight_map"].items()) {
    ASSERT_TRUE(exported.where.count(tensor));
    EXPECT_EQ(fs::path(exported.where.at(tensor)->path()).filename(), file.get<std::string>());
    total += exported.where.at(tensor)->entry(tensor).bytes.size();
  }
  EXPECT_EQ(index["metadata"]["total_size"], total);
  EXPECT_TRUE(fs::exists(out + "/model-00001-of-0000" + std::to_string(exported.files.size()) + ".safetensors"));
  // Nothing temporary is left beside the folder.
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_FALSE(e.path().filename().string().starts_with("."));
  // Without a generation config, a minimal one is written, with the tokenizer's
  // special ids (which config.json names too).
  HfExportOptions with_ids;
  with_ids.special_tokens = {.bos = 47, .eos = 48, .pad = std::nullopt};
  export_hf(*open_weights(fixture("gpt2")), path("gpt2"), with_ids);
  for (const char* file : {"config.json", "generation_config.json"}) {
    const nlohmann::json written = nlohmann::json::parse(read_text(path("gpt2/") + file));
    EXPECT_EQ(written["bos_token_id"], 47) << file;
    EXPECT_EQ(written["eos_token_id"], 48) << file;
    EXPECT_FALSE(written.contains("pad_token_id")) << file;
  }
  // A generation config of the source's names them instead.
  const std::string llama = path("llama_with_ids");
  export_hf(*open_weights(fixture("llama31_sharded")), llama, with_ids);
  EXPECT_EQ(nlohmann::json::parse(read_text(llama + "/config.json"))["eos_token_id"], nlohmann::json::array({2, 3}));
  EXPECT_EQ(read_text(llama + "/generation_config.json"), read_text(fixture("llama31_sharded/generation_config.json")));
  // The token a fine-tuned model ends its answers with (a chat format's end of
  // turn) joins the EOS ids, once, so that generate() stops there too.
  const auto eos_ids = [&](const std::string& source, std::vector<int32_t> more_eos) {
    HfExportOptions options = with_ids;
    options.special_tokens.more_eos = std::move(more_eos);
    const std::string out = path("eos_" + std::to_string(fs::hash_value(source) % 1000) + "_" +
                                 std::to_string(options.special_tokens.more_eos.front()));
    export_hf(*open_weights(fixture(source)), out, options);
    const nlohmann::json config = nlohmann::json::parse(read_text(out + "/config.json"));
    EXPECT_EQ(nlohmann::json::parse(read_text(out + "/generation_config.json"))["eos_token_id"], config["eos_token_id"]);
    return config["eos_token_id"];
  };
  EXPECT_EQ(eos_ids("gpt2", {49}), nlohmann::json::array({48, 49}));
  EXPECT_EQ(eos_ids("gpt2", {48}), 48);
  EXPECT_EQ(eos_ids("llama31_sharded", {4}), nlohmann::json::array({2, 3, 4}));
  EXPECT_EQ(eos_ids("llama31_sharded", {3}), nlohmann::json::array({2, 3}));
  EXPECT_TRUE(fs::exists(path("gpt2/model.safetensors")));
  EXPECT_FALSE(fs::exists(path("gpt2/model.safetensors.index.json")));
}

// The ids a config names, as export and generate read them: ids past int32 are
// no token's (4294967298 is not token 2), other types none.
TEST(HfSpecialIds, IdsPastInt32AreLeftOut) {
  const SpecialTokenIds ids = special_ids_in(
      Json::parse(R"({"bos_token_id": 4294967297, "pad_token_id": -1, "eos_token_id": [4294967298, 2, "3", 7]})"));
  EXPECT_FALSE(ids.bos);
  EXPECT_EQ(ids.pad, -1);
  EXPECT_EQ(ids.eos, 2);
  EXPECT_EQ(ids.more_eos, std::vector<int32_t>{7});
  EXPECT_FALSE(special_ids_in(Json::parse(R"({"eos_token_id": -4294967296})")).eos);
}

// A chat template file (a chat fine-tune's checkpoints carry the format it
// trained) is exported, and tokenizer_config.json says the same: transformers'
// later releases read the file first, earlier ones only tokenizer_config.json.
TEST_F(HfTest, ExportedChatTemplatesAreTheCompanionFile) {
  const std::string jinja = "{%- for message in messages %}{{- message['content'] }}{%- endfor %}";
  std::ofstream(path("chat_template.jinja")) << jinja;
  const auto export_with = [&](const std::string& name, std::vector<std::string> companions) {
    const std::string out = path(name);
    export_hf(*with_companion_files(open_weights(fixture("llama31_sharded")), std::move(companions)), out);
    EXPECT_EQ(read_text(out + "/chat_template.jinja"), jinja) << name;
    return nlohmann::json::parse(read_text(out + "/tokenizer_config.json"));
  };
  // The source's tokenizer_config.json, its other keys kept, with the template.
  std::ofstream(path("tokenizer_config.json")) << R"({"model_max_length": 64, "chat_template": "{{ 'old' }}"})";
  const nlohmann::json replaced = export_with("replaced", {path("tokenizer_config.json"), path("chat_template.jinja")});
  EXPECT_EQ(replaced, nlohmann::json({{"model_max_length", 64}, {"chat_template", jinja}}));
  // Named templates: the file is the default one.
  fs::create_directories(path("named"));
  std::ofstream(path("named/tokenizer_config.json"))
      << R"({"chat_template": [{"name": "default", "template": "old"}, {"name": "tool_use", "template": "tools"}]})";
  const nlohmann::json named =
      export_with("named_out", {path("named/tokenizer_config.json"), path("chat_template.jinja")});
  EXPECT_EQ(named["chat_template"], nlohmann::json::array({{{"name", "default"}, {"template", jinja}},
                                                           {{"name", "tool_use"}, {"template", "tools"}}}));
  // No tokenizer_config.json: one with the template alone.
  EXPECT_EQ(export_with("alone", {fixture("llama31_sharded/tokenizer.json"), path("chat_template.jinja")}),
            nlohmann::json({{"chat_template", jinja}}));
}

TEST_F(HfTest, ExportedModelsReimportToTheSameWeightsAndLogits) {
  for (const std::string name :
       {"llama31_sharded", "gpt2", "mpt_bf16", "llmc_gpt2_bf16.bin", "llama2c_legacy.bin", "nanogpt_bias.pt"}) {
    auto first = import_model(fixture(name));
    const std::string out = path("export_" + name);
    export_hf(*first, out, in(DType::f32));
    auto second = import_model(out);
    EXPECT_EQ(second->params().values().to_vector<float>(), first->params().values().to_vector<float>()) << name;
    const std::string reference = fs::path(name).replace_extension().string();
    EXPECT_LE(logit_error(*second, reference), kTolerance) << name;
  }
}

// GPT2LMHeadModel has biases: nanoGPT's bias=False model is written with zero
// ones, and computes the same.
TEST_F(HfTest, AGpt2WithoutBiasesExportsWithZeroBiases) {
  auto model = import_model(fixture("nanogpt_compiled.pt"));
  const std::string out = path("export_without_biases");
  const HfExportSummary summary = export_hf(*model, out, in(DType::f32));
  EXPECT_EQ(summary.notes, std::vector<std::string>{"GPT2LMHeadModel has biases, which this model has not: written "
                                                    "as zeros"});
  auto reimported = import_model(out);
  EXPECT_TRUE(reimported->config().norm_bias && reimported->config().linear_bias);
  const Parameter& bias = reimported->params().get("layers.1.mlp.up.bias");
  EXPECT_EQ(bias.value.to_vector<float>(), std::vector<float>(size_t(bias.value.numel()), 0.0f));
  EXPECT_EQ(reimported->params().get("layers.1.mlp.up.weight").value.to_vector<float>(),
            model->params().get("layers.1.mlp.up.weight").value.to_vector<float>());
  EXPECT_LE(logit_error(*reimported, "nanogpt_compiled"), kTolerance);
}

TEST_F(HfTest, HoneFolderRoundTripIsByteIdentical) {
  // HF -> hone model folder (as stored: bf16) -> HF gives the original tensors back, byte for byte.
  for (const char* name : {"llama32_tied_bf16", "mistral_f16", "llama31_sharded"}) {
    const std::string hone = path(std::string(name) + "_hone"), back = path(std::string(name) + "_back");
    convert_model(fixture(name), hone, to(ModelFolderKind::hone));
    verify_checkpoint(hone);
    EXPECT_EQ(read_model_config(hone).name, name);
    convert_model(hone, back, to(ModelFolderKind::hf));
    const HfTensors original(fixture(name)), again(back);
    for (const auto& [tensor, file] : again.where) {
      EXPECT_EQ(bytes_of(*file, tensor), bytes_of(*original.where.at(tensor), tensor)) << name << ": " << tensor;
    }
  }
  EXPECT_EQ(read_text(path("llama31_sharded_back/tokenizer.json")), read_text(fixture("llama31_sharded/tokenizer.json")));
  EXPECT_TRUE(fs::exists(path("llama31_sharded_hone/tokenizer.json")));
  // A model folder loads for fine-tuning, converted to fp32 master weights.
  const std::string hone = path("llama32_tied_bf16_hone");
  Transformer model(read_model_config(hone), DType::f32);
  load_model_weights(hone, model);
  EXPECT_LE(logit_error(model, "llama32_tied_bf16"), kTolerance);
}

TEST_F(HfTest, ExportConvertsTheDtype) {
  const auto source = open_weights(fixture("gpt2"));  // fp32
  export_hf(*source, path("f16"), in(DType::f16));
  export_hf(*source, path("bf16"), in(DType::bf16));
  const SafetensorsFile f16(path("f16/model.safetensors")), bf16(path("bf16/model.safetensors"));
  const std::string name = "transformer.wte.weight";
  ASSERT_EQ(f16.entry(name).dtype, DType::f16);
  ASSERT_EQ(bf16.entry(name).dtype, DType::bf16);
  Tensor expected = Tensor::empty({48, 16}, DType::f32);
  source->read("tok_embeddings.weight", expected);
  for (const auto* file : {&f16, &bf16}) {
    const SafetensorsFile::Entry& e = file->entry(name);
    Tensor back = Tensor::empty(e.shape, DType::f32);
    read_stored({e.dtype, e.shape, e.bytes.data()}, back);
    // Rounding to 11 (f16) or 8 (bf16) significant bits, nothing more.
    const double bound = e.dtype == DType::f16 ? 1.0 / 2048 : 1.0 / 256;
    const auto a = back.to_vector<float>(), b = expected.to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_LE(std::abs(a[i] - b[i]), bound * std::abs(b[i])) << i;
  }
  Transformer model(source->config(), DType::f32);
  load_hf_weights(path("f16"), model);
  EXPECT_LE(logit_error(model, "gpt2"), 1e-2);
}

TEST_F(HfTest, LoraAdaptersAreMergedBeforeExport) {
  const auto source = open_weights(fixture("llama32_tied_bf16"));
  LoraConfig lora;
  lora.apply_to_mlp = true;
  Transformer model(source->config(), DType::f32, Device::cpu(), lora);
  load_weights(*source, model);
  model.init_lora(1);
  uint64_t seed = 2;
  for (Parameter& p : model.trainable_params().all()) {
    if (p.name.ends_with(".b")) p.value.copy_from(random_tensor(p.shape, DType::f32, seed++, 0.1));
  }
  const std::string err = error_of([&] { export_hf(model, path("unmerged")); });
  EXPECT_NE(err.find("is not merged"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(path("unmerged")));
  const SafetensorsFile reference(fixture("llama32_tied_bf16.reference.safetensors"));
  model.set_training(false);
  model.forward(reference.load("tokens"));
  const Tensor adapted = model.logits().clone();
  model.merge_lora();
  export_hf(model, path("merged"), in(DType::f32));
  auto merged = import_model(path("merged"));
  merged->forward(reference.load("tokens"));
  EXPECT_LE(relative_error(merged->logits(), adapted), 1e-5);
  EXPECT_GT(relative_error(merged->logits(), reference.load("logits")), 1e-3);  // the adapters changed the model
}

TEST_F(HfTest, ConfigsHuggingFaceCannotExpressAreRefused) {
  ModelConfig c = model_preset("llama_tiny");
  c.norm = NormKind::layernorm;
  Transformer model(c, DType::f32);
  const std::string err = error_of([&] { export_hf(model, path("bad")); });
  EXPECT_NE(err.find("LlamaForCausalLM"), std::string::npos) << err;
  EXPECT_NE(err.find("RMSNorm"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(path("bad")));
  EXPECT_EQ(error_of([&] { check_hf_export(c, path("bad")); }), err);  // what a run checks before it trains
  ModelConfig mpt = model_preset("mpt_tiny");
  mpt.linear_bias = mpt.norm_bias = true;  // LLM Foundry has it; transformers' MptForCausalLM drops biases
  EXPECT_NE(error_of([&] { hf_config_to_json(mpt, DType::bf16); }).find("without biases"), std::string::npos);
  // transformers' MptForCausalLM builds MPT-7B's layers whatever config.json
  // says: the model would not load, or (other ALiBi slopes) compute other logits.
  const auto mpt_refused_for = [](const std::function<void(ModelConfig&)>& change) {
    ModelConfig c = model_preset("mpt_tiny");
    change(c);
    return error_of([&] { hf_config_to_json(c, DType::bf16); });
  };
  EXPECT_NE(mpt_refused_for([](ModelConfig& c) { c.n_kv_heads = c.n_heads / 2; }).find("grouped-query"),
            std::string::npos);
  EXPECT_NE(mpt_refused_for([](ModelConfig& c) { c.ffn_dim = 3 * c.dim; }).find("4 x d_model"), std::string::npos);
  EXPECT_NE(mpt_refused_for([](ModelConfig& c) { c.alibi_bias_max = 16; }).find("alibi_bias_max 8"),
            std::string::npos);
  EXPECT_EQ(mpt_refused_for([](ModelConfig&) {}), "");
  // A destination that exists is not overwritten.
  fs::create_directories(path("full"));
  write_text(path("full/keep.txt"), "x");
  EXPECT_NE(error_of([&] { export_hf(*open_weights(fixture("gpt2")), path("full")); }).find("already exists"),
            std::string::npos);
  EXPECT_EQ(read_text(path("full/keep.txt")), "x");
}

TEST_F(HfTest, MissingTensorIsNamed) {
  const std::string dir = copy_fixture("llama32_tied_bf16");
  const std::string file = dir + "/model.safetensors";
  std::vector<NamedTensor> kept;
  {
    const SafetensorsFile f(file);
    for (const std::string& name : f.names()) {
      if (name != "model.layers.1.mlp.up_proj.weight") kept.push_back({name, f.load(name)});
    }
  }
  write_safetensors(file, kept);
  const std::string err = error_of([&] { open_hf(dir); });
  EXPECT_NE(err.find("'model.layers.1.mlp.up_proj.weight' is missing"), std::string::npos) << err;
  EXPECT_NE(err.find(file), std::string::npos) << err;
}

TEST_F(HfTest, WrongShapeIsNamed) {
  const std::string dir = copy_fixture("mistral_f16");
  const std::string file = dir + "/model.safetensors";
  std::vector<NamedTensor> tensors;
  {
    const SafetensorsFile f(file);
    for (const std::string& name : f.names()) {
      Tensor t = f.load(name);
      if (name == "model.layers.0.self_attn.k_proj.weight") t = t.view({32, 16});  // transposed shape
      tensors.push_back({name, t});
    }
  }
  write_safetensors(file, tensors);
  const std::string err = error_of([&] { open_hf(dir); });
  EXPECT_NE(err.find(file + ": tensor 'model.layers.0.self_attn.k_proj.weight' has shape [32, 16], config.json "
                            "implies [16, 32]"),
            std::string::npos)
      << err;
}

TEST_F(HfTest, UnexpectedTensorIsNamed) {
  const std::string dir = copy_fixture("gpt2");
  const std::string file = dir + "/model.safetensors";
  std::vector<NamedTensor> tensors;
  {
    const SafetensorsFile f(file);
    for (const std::string& name : f.names()) tensors.push_back({name, f.load(name)});
  }
  tensors.push_back({"h.0.attn.q_norm.weight", Tensor::zeros({16}, DType::f32)});
  write_safetensors(file, tensors);
  const std::string err = error_of([&] { open_hf(dir); });
  EXPECT_NE(err.find("unexpected tensor 'h.0.attn.q_norm.weight'"), std::string::npos) << err;
  // The same in a shard whose index leaves it out.
  const std::string sharded = copy_fixture("llama31_sharded");
  const std::string shard = sharded + "/model-00001-of-00003.safetensors";
  tensors.clear();
  {
    const SafetensorsFile f(shard);
    for (const std::string& name : f.names()) tensors.push_back({name, f.load(name)});
  }
  tensors.push_back({"model.layers.0.bogus.weight", Tensor::zeros({16}, DType::f32)});
  write_safetensors(shard, tensors);
  const std::string in_shard = error_of([&] { open_hf(sharded); });
  EXPECT_NE(in_shard.find(shard + ": unexpected tensor 'model.layers.0.bogus.weight'"), std::string::npos) << in_shard;
}

// Older transformers saved GPT-2's causal-mask buffers (h.N.attn.bias) as BOOL,
// a dtype hone has none for: the file opens, the buffers are skipped as buffers
// of any dtype are, and only a tensor a model needs would be an error.
TEST_F(HfTest, TensorsOfDtypesHoneLacksAreAnErrorOnlyWhereRead) {
  const std::string dir = copy_fixture("gpt2");
  const std::string file = dir + "/model.safetensors";
  std::vector<NamedTensor> tensors;
  {
    const SafetensorsFile f(file);
    for (const std::string& name : f.names()) {
      if (!name.ends_with(".attn.bias")) tensors.push_back({name, f.load(name)});  // the fixture's f32 buffers
    }
  }
  tensors.push_back({"h.0.attn.bias", Tensor::zeros({1, 1, 4, 4}, DType::u8)});
  write_safetensors(file, tensors);
  // The same bytes, the buffer's dtype renamed BOOL in the header.
  const std::string bytes = read_text(file);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(bytes.substr(8, header_len));
  header["h.0.attn.bias"]["dtype"] = "BOOL";
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  const uint64_t new_len = text.size();
  write_text(file, std::string(reinterpret_cast<const char*>(&new_len), 8) + text + bytes.substr(8 + header_len));

  const SafetensorsFile f(file);
  EXPECT_TRUE(f.contains("h.0.attn.bias"));
  EXPECT_EQ(f.names().size(), tensors.size());
  EXPECT_EQ(error_of([&] { f.load("h.0.attn.bias"); }),
            file + ": tensor 'h.0.attn.bias' is stored as BOOL, which hone has no dtype for");
  const auto source = open_weights(dir);
  Transformer with_buffer(source->config(), DType::f32), original(source->config(), DType::f32);
  load_weights(*source, with_buffer);
  load_weights(*open_weights(fixture("gpt2")), original);
  EXPECT_EQ(with_buffer.params().values().to_vector<float>(), original.params().values().to_vector<float>());
}

// A config.json cut short names the byte; a folder in its place says so.
TEST_F(HfTest, AConfigJsonThatCannotBeReadIsNamedWithItsByte) {
  const std::string dir = copy_fixture("llama32_tied_bf16");
  const std::string config = dir + "/config.json";
  write_text(config, read_text(config).substr(0, 40));
  std::string err = error_of([&] { read_hf_config(dir); });
  EXPECT_NE(err.find(config + ": not valid JSON (byte 41: parse error at line 3, column 18: "), std::string::npos) << err;
  fs::remove(config);
  fs::create_directory(config);
  err = error_of([&] { read_hf_config(dir); });
  EXPECT_NE(err.find(config + ": a folder, not a file"), std::string::npos) << err;
}

// transformers 5 writes rope_theta and rope_scaling's fields together as
// rope_parameters (and torch_dtype as dtype).
TEST_F(HfTest, Transformers5RopeParametersAreRead) {
  const std::string dir = copy_fixture("llama31_sharded");
  nlohmann::json j = nlohmann::json::parse(read_text(dir + "/config.json"));
  j["rope_parameters"] = j["rope_scaling"];
  j["rope_parameters"]["rope_theta"] = 500000.0;
  for (const char* key : {"rope_scaling", "rope_theta", "torch_dtype"}) j.erase(key);
  j["dtype"] = "float32";
  write_text(dir + "/config.json", j.dump());
  const ModelConfig v5 = read_hf_config(dir);
  EXPECT_EQ(v5.rope_theta, 500000.0);
  EXPECT_EQ(v5.rope_scaling.factor, 8.0);
  EXPECT_EQ(v5.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(v5.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(v5.rope_scaling.original_max_position, 64);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  write_text(dir + "/config.json", j.dump());
  const ModelConfig unscaled = read_hf_config(dir);
  EXPECT_EQ(unscaled.rope_theta, 1e6);
  EXPECT_FALSE(unscaled.rope_scaling.enabled());
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}};
  write_text(dir + "/config.json", j.dump());
  const std::string err = error_of([&] { read_hf_config(dir); });
  EXPECT_NE(err.find("config.json: rope_parameters: rope type 'yarn' (hone implements llama3 scaling) is not supported"),
            std::string::npos)
      << err;
}

TEST_F(HfTest, UnsupportedModelTypeAndOptionsAreNamed) {
  const auto with = config_error_of("llama32_tied_bf16");
  const std::string config_path = path("llama32_tied_bf16") + "/config.json";
  std::string err = with([](nlohmann::json& j) { j["model_type"] = "qwen2"; });
  EXPECT_NE(err.find(config_path + ": unsupported model_type 'qwen2'"), std::string::npos) << err;
  err = with([](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  EXPECT_NE(err.find("rope type 'yarn'"), std::string::npos) << err;
  err = with([](nlohmann::json& j) { j["hidden_act"] = "gelu"; });
  EXPECT_NE(err.find("hidden_act 'gelu'"), std::string::npos) << err;
  err = with([](nlohmann::json& j) { j.erase("hidden_size"); });
  EXPECT_NE(err.find("missing key 'hidden_size'"), std::string::npos) << err;
  err = with([](nlohmann::json& j) { j["num_key_value_heads"] = 3; });
  EXPECT_NE(err.find("n_kv_heads"), std::string::npos) << err;
  err = with([](nlohmann::json& j) { j["vocab_size"] = "40"; });
  EXPECT_NE(err.find("'vocab_size' must be an integer"), std::string::npos) << err;
}

// LLM Foundry's MPT options that change the computation hone does not implement
// are refused, not dropped; ffn_hidden_size, which it does, sizes the MLP.
TEST_F(HfTest, MptOptionsHoneDoesNotImplementAreNamed) {
  const auto with = config_error_of("mpt_bf16");
  std::string err = with([](nlohmann::json& j) { j["attn_config"]["sliding_window_size"] = 64; });
  EXPECT_NE(err.find("attn_config: sliding_window_size (attention within a window) is not supported"),
            std::string::npos)
      << err;
  EXPECT_EQ(with([](nlohmann::json& j) { j["attn_config"]["sliding_window_size"] = -1; }), "");  // Foundry's "none"
  err = with([](nlohmann::json& j) { j["embedding_fraction"] = 0.1; });
  EXPECT_NE(err.find("embedding_fraction below 1 is not supported"), std::string::npos) << err;
  EXPECT_EQ(with([](nlohmann::json& j) { j["ffn_config"]["ffn_hidden_size"] = 40; }), "");
  EXPECT_EQ(read_hf_config(path("mpt_bf16")).ffn_dim, 40);
}

TEST_F(HfTest, LyingSafetensorsHeaderIsNamed) {
  const std::string dir = copy_fixture("mpt_bf16");
  const std::string file = dir + "/model.safetensors";
  std::string bytes = read_text(file);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  header["transformer.norm_f.weight"]["data_offsets"][1] = 1 << 30;
  std::string text = header.dump();
  const uint64_t len = text.size();
  write_text(file, std::string(reinterpret_cast<const char*>(&len), 8) + text + bytes.substr(8 + n));
  const std::string err = error_of([&] { open_hf(dir); });
  EXPECT_NE(err.find(file + ": tensor 'transformer.norm_f.weight': data_offsets"), std::string::npos) << err;
  EXPECT_NE(err.find("reach past"), std::string::npos) << err;
}

TEST_F(HfTest, LyingIndexIsNamed) {
  const std::string dir = copy_fixture("llama31_sharded");
  const std::string index_path = dir + "/model.safetensors.index.json";
  nlohmann::json index = nlohmann::json::parse(read_text(index_path));
  const std::string tensor = "model.norm.weight";
  const std::string right = index["weight_map"][tensor];
  const std::string wrong = right == "model-00001-of-00003.safetensors" ? "model-00002-of-00003.safetensors"
                                                                         : "model-00001-of-00003.safetensors";
  index["weight_map"][tensor] = wrong;
  write_text(index_path, index.dump());
  std::string err = error_of([&] { open_hf(dir); });
  EXPECT_NE(err.find(dir + "/" + wrong + ": has no tensor 'model.norm.weight'"), std::string::npos) << err;
  index["weight_map"][tensor] = "../elsewhere.safetensors";
  write_text(index_path, index.dump());
  err = error_of([&] { open_hf(dir); });
  EXPECT_NE(err.find("not a file in the folder"), std::string::npos) << err;
  fs::remove(dir + "/" + right);
  index["weight_map"][tensor] = right;
  write_text(index_path, index.dump());
  err = error_of([&] { open_hf(dir); });
  EXPECT_NE(err.find(right + " (listed in model.safetensors.index.json) is missing"), std::string::npos) << err;
}

TEST_F(HfTest, BrokenCCheckpointsAreNamed) {
  // Truncated: the sizes the header implies no longer match the file.
  for (const char* name : {"llmc_gpt2_fp32.bin", "llama2c_legacy.bin", "llama2c_v1.bin"}) {
    const std::string copy = path(name);
    fs::copy_file(fixture(name), copy);
    fs::resize_file(copy, fs::file_size(copy) - 4);
    const std::string err = error_of([&] { open_c_checkpoint(copy); });
    EXPECT_NE(err.find(copy + ": " + std::to_string(fs::file_size(copy)) + " bytes, but"), std::string::npos) << err;
  }
  // A header claiming 16777215 layers in a file of 21 KB: said at once; the
  // layers were laid out name by name first (30 GB of names).
  std::string layers = read_text(fixture("llama2c_v1.bin"));
  const int32_t claimed = (1 << 24) - 1;
  std::memcpy(layers.data() + 16, &claimed, 4);
  write_text(path("layers.bin"), layers);
  EXPECT_NE(error_of([&] { open_c_checkpoint(path("layers.bin")); })
                .find("21568 bytes, but a llama2.c file with dim=16 hidden_dim=32 n_layers=16777215"),
            std::string::npos);
  // An llm.c version hone does not read.
  std::string bytes = read_text(fixture("llmc_gpt2_fp32.bin"));
  bytes[4] = 2;
  write_text(path("v2.bin"), bytes);
  EXPECT_NE(error_of([&] { open_c_checkpoint(path("v2.bin")); }).find("llm.c checkpoint version 2"),
            std::string::npos);
  // Not a model at all.
  write_text(path("notes.bin"), std::string(64, 'x'));
  const std::string err = error_of([&] { open_weights(path("notes.bin")); });
  EXPECT_NE(err.find(path("notes.bin")), std::string::npos) << err;
  EXPECT_NE(err.find("neither llm.c's magic"), std::string::npos) << err;
}

TEST_F(HfTest, FoldersPreferSafetensorsAndNameBrokenPyTorchFiles) {
  // transformers reads model.safetensors where both are there; so does hone.
  const std::string both = copy_fixture("gpt2");
  fs::copy_file(fixture("gpt2_pickle/pytorch_model.bin"), both + "/pytorch_model.bin");
  EXPECT_EQ(open_weights(both)->stored_dtype(), DType::f32);
  EXPECT_LE(logit_error(*import_model(both), "gpt2"), kTolerance);
  // A pytorch_model.bin that is not a torch.save archive is named.
  fs::create_directories(path("pickle"));
  fs::copy_file(fixture("gpt2/config.json"), path("pickle/config.json"));
  write_text(path("pickle/pytorch_model.bin"), "PK\3\4" + std::string(60, 'x'));
  EXPECT_NE(error_of([&] { open_hf(path("pickle")); })
                .find(path("pickle/pytorch_model.bin") + ": not a zip archive (no end-of-central-directory record)"),
            std::string::npos);
  // An archive alone has no config to build the model from.
  EXPECT_NE(error_of([&] { open_weights(fixture("tensors.pt")); })
                .find("tensors.pt: a PyTorch archive (torch.save) holding weights but no model config (not a nanoGPT "
                      "ckpt.pt"),
            std::string::npos);
  // So do a folder's safetensors and JSON files, which are not llama2.c files.
  EXPECT_NE(error_of([&] { open_weights(fixture("gpt2/model.safetensors")); })
                .find("model.safetensors: a file of a model folder (weights): give the folder that holds it"),
            std::string::npos);
  EXPECT_NE(error_of([&] { open_weights(fixture("gpt2/config.json")); })
                .find("config.json: a file of a model folder (a config or index): give the folder that holds it"),
            std::string::npos);
  // A pickle (nanoGPT's meta.pkl; torch.save's legacy format) is named as one, not read as llama2.c's header.
  const std::string meta = source_path("tests/reference/nanogpt_chars/meta.pkl");
  EXPECT_NE(error_of([&] { open_weights(meta); }).find(meta + ": a pickle, not a model file"), std::string::npos)
      << error_of([&] { open_weights(meta); });
  fs::remove(path("pickle/pytorch_model.bin"));
  EXPECT_NE(error_of([&] { open_hf(path("pickle")); })
                .find(": no model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
                      "pytorch_model.bin.index.json"),
            std::string::npos);
}

}  // namespace
}  // namespace hone::test
