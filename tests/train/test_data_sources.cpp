// The documents a pretraining config names: blends, held-out validation
// documents, and validation data of its own (dataset.validation_path); the
// instruct dataset keys as options.
#include <unistd.h>

#include <filesystem>
#include <map>

#include "hone/data/formats/megatron.hpp"
#include "hone/train/data_sources.hpp"
#include "hone/train/run_config.hpp"
#include "support/check.hpp"
#include "support/mds_fixture.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;

class PretrainingData : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::TempDir() + "hone_data_sources_" + std::to_string(::getpid());
    fs::create_directories(root_);
    // Every token of a dataset is its own number, so a sample tells its source.
    write("big", 1, 20);
    write("small", 2, 4);
    write("held", 3, 5);
    write("held2", 4, 5);
  }
  void TearDown() override { fs::remove_all(root_); }

  void write(const std::string& name, int32_t token, int documents) {
    data::MegatronWriter w(prefix(name), data::MegatronDType::u16, 16);
    for (int d = 0; d < documents; ++d) w.add_document(std::vector<int32_t>(30, token));
    w.finish();
  }
  std::string prefix(const std::string& name) const { return root_ + "/" + name; }

  Config config(const std::string& path, double validation_fraction) const {
    Config c;
    c.set("seed", 1);
    c.set("dataset.type", "megatron");
    c.set("dataset.path", path);
    c.set("dataset.validation_fraction", validation_fraction);
    return c;
  }

  // How many of a stream's first `samples` samples come from each dataset (by token).
  static std::map<int32_t, int> draws(const std::vector<data::DocumentRange>& ranges,
                                      const std::vector<double>& weights, int samples) {
    data::PretrainStream stream(ranges, weights, {.seq_len = 8, .batch_size = 1, .shuffle = false, .vocab_size = 16});
    std::map<int32_t, int> count;
    for (int i = 0; i < samples; ++i) ++count[stream.next().tokens.data<int32_t>()[0]];
    return count;
  }

  std::string root_;
};

TEST_F(PretrainingData, ABlendKeepsItsWeightsWhenNothingIsHeldOut) {
  // By size the big dataset would give 5 samples in 6; the blend asks for half.
  const std::string blend = "0.5 " + prefix("big") + " 0.5 " + prefix("small");
  const TrainingData d = open_pretraining_data(config(blend, 0.0), 16);
  EXPECT_TRUE(d.validation.empty());
  EXPECT_EQ(d.train_weights, (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(draws(d.train, d.train_weights, 40), (std::map<int32_t, int>{{1, 20}, {2, 20}}));

  // Held out of each source, the validation documents are blended the same way.
  const TrainingData held = open_pretraining_data(config(blend, 0.25), 16);
  ASSERT_EQ(held.validation.size(), 2u);
  EXPECT_EQ(held.validation[0].first, 15);  // the big dataset's last 5 of 20 documents
  EXPECT_EQ(held.validation[1].first, 3);   // the small one's last of 4
  EXPECT_EQ(held.validation_weights, (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(held.train_weights, (std::vector<double>{0.5, 0.5}));
}

// Prefixes without weights blend by their tokens, as Megatron's --data-path
// does; weights on some and not others are an error.
TEST_F(PretrainingData, PrefixesWithoutWeightsBlendBySize) {
  const TrainingData d = open_pretraining_data(config(prefix("big") + " " + prefix("small"), 0.0), 16);
  EXPECT_EQ(d.train_weights, (std::vector<double>{600, 120}));  // 20 and 4 documents of 30 tokens
  EXPECT_EQ(draws(d.train, d.train_weights, 60), (std::map<int32_t, int>{{1, 50}, {2, 10}}));
  EXPECT_NE(error_of([&] { open_pretraining_data(config("1 " + prefix("big") + " " + prefix("small") + " x", 0.0), 16); })
                .find("should be a positive blend weight"),
            std::string::npos);
  // strtod reads these as numbers; none is a weight.
  for (const std::string weight : {"1e400", "inf", "nan"}) {
    const std::string blend = weight + " " + prefix("big") + " 1 " + prefix("small");
    EXPECT_NE(error_of([&] { open_pretraining_data(config(blend, 0.0), 16); })
                  .find("'" + weight + "' should be a positive blend weight"),
              std::string::npos)
        << weight;
  }
}

TEST_F(PretrainingData, ValidationPathGivesValidationDataOfItsOwn) {
  Config c = config(prefix("big"), 0.25);
  c.set("dataset.validation_path", "1 " + prefix("held") + " 3 " + prefix("held2"));
  // A fraction to hold out as well is refused (it would be ignored); its default or 0 holds nothing out.
  EXPECT_EQ(error_of([&] { open_pretraining_data(c, 16); }),
            "the command line: dataset.validation_fraction 0.25 would hold data out of dataset.path for validation, "
            "where dataset.validation_path gives validation data of its own: give one of them");
  c.set("dataset.validation_fraction", kPretrainingValidationFraction);
  const TrainingData d = open_pretraining_data(c, 16);
  // Training takes every document of dataset.path: nothing is held out of it.
  ASSERT_EQ(d.train.size(), 1u);
  EXPECT_EQ(d.train[0].first, 0);
  EXPECT_EQ(d.train[0].end, 20);
  EXPECT_TRUE(d.train_weights.empty());
  ASSERT_EQ(d.validation.size(), 2u);
  EXPECT_EQ(d.validation[0].end - d.validation[0].first, 5);
  EXPECT_EQ(d.validation_weights, (std::vector<double>{1, 3}));
  EXPECT_EQ(draws(d.validation, d.validation_weights, 8), (std::map<int32_t, int>{{3, 2}, {4, 6}}));
  EXPECT_NE(d.description.find("big (20 documents); validation: "), std::string::npos) << d.description;
  EXPECT_NE(d.description.find("held2 (5 documents)"), std::string::npos) << d.description;

  // Errors name the key and where it came from.
  c.set("dataset.validation_path", prefix("missing"));
  EXPECT_NE(error_of([&] { open_pretraining_data(c, 16); }).find(prefix("missing") + ".idx"), std::string::npos);
  c.set("dataset.validation_path", "2 " + prefix("held") + " " + prefix("held2"));
  EXPECT_NE(error_of([&] { open_pretraining_data(c, 16); })
                .find("the command line: dataset.validation_path '2 " + prefix("held") + " " + prefix("held2") +
                      "' is neither one path nor 'WEIGHT PATH' pairs"),
            std::string::npos);
  // Mock data makes its own validation documents: a path for it would be ignored.
  Config mock;
  mock.set("seed", 1);
  mock.set("dataset.type", "mock");
  mock.set("dataset.validation_fraction", 0.1);
  mock.set("dataset.mock.documents", 10);
  mock.set("dataset.mock.document_length", 20);
  mock.set("dataset.validation_path", prefix("held"));
  EXPECT_NE(error_of([&] { open_pretraining_data(mock, 16); })
                .find("dataset.validation_path " + prefix("held") + " is set but dataset.type is mock"),
            std::string::npos);
}

// LLM Foundry's shards: `tokens` as raw bytes (int64 unless token_encoding_type
// says otherwise) train like NDArray tokens; shards of text say how to tokenize them.
TEST_F(PretrainingData, MdsShardsOfLlmFoundry) {
  const std::string raw64 = root_ + "/raw64", raw32 = root_ + "/raw32", text = root_ + "/text";
  write_mds_fixture(raw64, {{"tokens", "bytes"}}, std::vector(6, std::vector{raw_bytes(std::vector<int64_t>(30, 5))}));
  write_mds_fixture(raw32, {{"tokens", "bytes"}}, std::vector(2, std::vector{raw_bytes(std::vector<int32_t>(30, 6))}));
  Config c = config("1 " + raw64 + " 1 " + raw32, 0.0);
  c.set("dataset.type", "mds");
  c.set("dataset.token_encoding_type", "int64");
  EXPECT_NE(error_of([&] { open_pretraining_data(c, 16); }).find(raw32 + "/shard.00000.mds: sample 0"),
            std::string::npos);
  c.set("dataset.path", raw64);
  TrainingData d = open_pretraining_data(c, 16);
  EXPECT_EQ(d.train[0].source->num_documents(), 6);
  EXPECT_EQ(draws(d.train, d.train_weights, 10), (std::map<int32_t, int>{{5, 10}}));
  c.set("dataset.path", raw32);
  c.set("dataset.token_encoding_type", "int32");
  d = open_pretraining_data(c, 16);
  EXPECT_EQ(d.train[0].source->document_length(1), 30);
  EXPECT_EQ(draws(d.train, d.train_weights, 4), (std::map<int32_t, int>{{6, 4}}));

  write_mds_fixture(text, {{"text", "str"}}, {{"some text"}});
  c.set("dataset.path", text + "/");
  EXPECT_NE(error_of([&] { open_pretraining_data(c, 16); })
                .find(text + "/: holds text (a 'text' column), not token ids: tokenize it once with `hone preprocess "
                             "--input " + text + " --output-prefix " + text + "_tokens --format mds"),
            std::string::npos);
}

// dataset.column_map names fields a template reads (ShareGPT's `conversations`
// too, as torchtune's column_map names it); dataset.system_prompt is a chat
// format's. A key given on the command line is named as such.
TEST(InstructOptions, ColumnMapFieldsAndTheSystemPromptAreChecked) {
  Schema schema = instruct_dataset_schema();
  schema.add(mds_tokens_schema());
  const auto options = [&](const std::string& yaml, const std::vector<std::string>& overrides = {}) {
    Config c = Config::from_yaml(yaml, "run.yaml");
    for (const std::string& o : overrides) c.apply_override(o);
    return instruct_options_from(schema.resolve(c));
  };
  EXPECT_EQ(options("dataset: {template: chat, column_map: {conversations: chats}}\n").column_map.at("messages"),
            "chats");
  EXPECT_EQ(options("dataset: {column_map: {instruction: task}}\n").column_map.at("instruction"), "task");
  // The text template's field too (it was refused).
  EXPECT_EQ(options("dataset: {template: text, column_map: {text: body}}\n").column_map.at("text"), "body");
  EXPECT_EQ(error_of([&] { options("dataset: {column_map: {instrution: task}}\n"); }),
            "run.yaml: dataset.column_map.instrution: no template reads a field 'instrution' (did you mean "
            "'instruction'?); the fields: instruction, input, output, dialogue, messages, prompt, completion, text, "
            "chosen, rejected, conversations");
  EXPECT_NE(error_of([&] { options("dataset: {template: chat, column_map: {messages: a, conversations: b}}\n"); })
                .find("has both messages and conversations"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { options("dataset: {template: alpaca}\n", {"dataset.column_map.outptu=answer"}); }),
            "the command line: dataset.column_map.outptu: no template reads a field 'outptu' (did you mean "
            "'output'?); the fields: instruction, input, output, dialogue, messages, prompt, completion, text, chosen, "
            "rejected, conversations");
  EXPECT_EQ(error_of([&] { options("dataset: {column_map: {output: answer}}\n", {"dataset.column_map.input=7"}); }),
            "the command line: dataset.column_map.input must name a column");
  // Another template's field would go unread.
  EXPECT_EQ(error_of([&] { options("dataset: {template: plain, column_map: {prompt: question}}\n"); }),
            "run.yaml: dataset.column_map.prompt: the plain template reads input, output, not prompt");
  EXPECT_EQ(error_of([&] { options("dataset: {template: chat, column_map: {conversations: a, output: b}}\n"); }),
            "run.yaml: dataset.column_map.output: the chat template reads messages, prompt, completion, not output");
  EXPECT_EQ(options("dataset: {template: chat, column_map: {prompt: a, completion: b}}\n").column_map.at("completion"),
            "b");
  // DPO's pairs (loss.type) read their own three, under any template.
  Schema dpo = schema;
  dpo.add({"loss.type", ValueType::string, "sigmoid", "the preference loss"});
  dpo.add({"dataset.packed", ValueType::boolean, false, "packed rows"});
  const auto dpo_options = [&](const std::string& yaml) {
    return instruct_options_from(dpo.resolve(Config::from_yaml(yaml, "run.yaml")));
  };
  EXPECT_EQ(dpo_options("dataset: {template: plain, column_map: {prompt: question}}\n").column_map.at("prompt"),
            "question");
  EXPECT_EQ(error_of([&] { dpo_options("dataset: {template: alpaca, column_map: {input: context}}\n"); }),
            "run.yaml: dataset.column_map.input: preference pairs read prompt, chosen, rejected, not input");
  EXPECT_EQ(options("dataset: {template: chat, system_prompt: Be kind.}\n").system_prompt, "Be kind.");
  EXPECT_EQ(options("dataset: {in_chat_format: true, system_prompt: Be kind.}\n").system_prompt, "Be kind.");
  EXPECT_EQ(error_of([&] { options("dataset: {system_prompt: Be kind.}\n"); }),
            "run.yaml: dataset.system_prompt is a chat format's system message: the alpaca template writes plain "
            "text without one (give dataset.template: chat, or dataset.in_chat_format: true)");
  // A chat's format is llama3 unless given; the other templates are written in it with in_chat_format.
  EXPECT_EQ(options("dataset: {template: chat}\n").chat_format, data::ChatFormat::llama3);
  EXPECT_FALSE(options("dataset: {template: alpaca, chat_format: llama2}\n").in_chat_format);
  EXPECT_TRUE(options("dataset: {template: alpaca, in_chat_format: true}\n").in_chat_format);
  // torchtune's dataset keys say what hone's are.
  EXPECT_NE(error_of([&] { schema.resolve(Config::from_yaml("dataset: {source: json}\n", "run.yaml")); })
                .find("'dataset.source': torchtune's (load_dataset's); hone reads local records from dataset.path"),
            std::string::npos);
}

}  // namespace
}  // namespace hone::test
