// Fine-tuning datasets: templates, masking, chat formats, truncation, errors,
// and the batches SampleStream builds.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "data/tokenizers/assets.hpp"
#include "hone/core/files.hpp"
#include "hone/data/instruct.hpp"
#include "support/check.hpp"
#include "support/mds_fixture.hpp"

namespace hone::test {
namespace {

namespace fs = std::filesystem;
using data::InstructOptions;
using data::InstructTemplate;
using data::TokenizedSample;

class InstructTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gpt2_ = load_tokenizer(asset_path("tokenizers/gpt2")).release();
    llama3_ = load_tokenizer(asset_path("tokenizers/llama3")).release();
  }
  void SetUp() override {
    dir_ = testing::TempDir() + "hone_instruct_" + std::to_string(::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }

  std::vector<int32_t> ids(const Tokenizer& t, const std::string& text) { return t.encode(text); }

  // The text of a Llama 3 sample's learned tokens (its labels not masked).
  static std::string learned_text(const TokenizedSample& s) {
    std::vector<int32_t> learned;
    for (const int32_t label : s.labels)
      if (label != data::kIgnoreTarget) learned.push_back(label);
    return llama3_->decode(learned);
  }

  static const Tokenizer* gpt2_;
  static const Tokenizer* llama3_;
  std::string dir_;
};
const Tokenizer* InstructTest::gpt2_ = nullptr;
const Tokenizer* InstructTest::llama3_ = nullptr;

TEST_F(InstructTest, AlpacaMasksThePromptAndEndsWithEos) {
  const std::string path = file("a.jsonl", R"({"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"}
{"instruction": "Say hi.", "output": "hi"}
)");
  const auto d = data::load_instruct_dataset(path, *gpt2_, {.format = InstructTemplate::alpaca});
  ASSERT_EQ(d.samples.size(), 2u);
  const std::string prompt =
      "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
      "response that appropriately completes the request.\n\n### Instruction:\nAdd the numbers.\n\n### Input:\n2 and "
      "3\n\n### Response:\n";
  auto expected = ids(*gpt2_, prompt);
  const size_t prompt_len = expected.size();
  for (int32_t id : ids(*gpt2_, "5")) expected.push_back(id);
  expected.push_back(*gpt2_->eos_id());
  EXPECT_EQ(d.samples[0].tokens, expected);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(d.samples[0].labels[i], i < prompt_len ? -100 : expected[i]) << i;
  }
  // Without an input the shorter alpaca prompt is used.
  const auto no_input = ids(*gpt2_, data::format_prompt({{"instruction", "Say hi."}}, {}));
  EXPECT_TRUE(std::equal(no_input.begin(), no_input.end(), d.samples[1].tokens.begin()));
  // train_on_input: every token is a label.
  const auto all = data::load_instruct_dataset(path, *gpt2_, {.format = InstructTemplate::alpaca, .train_on_input = true});
  EXPECT_EQ(all.samples[0].labels, all.samples[0].tokens);
  // A field's text is no template: its braces stay as written (Python's str.format, torchtune's).
  EXPECT_EQ(data::format_prompt({{"instruction", "Fill in {input}."}, {"input", "Dear {instruction}, {name}"}}, {}),
            "Below is an instruction that describes a task, paired with an input that provides further context. "
            "Write a response that appropriately completes the request.\n\n### Instruction:\nFill in {input}.\n\n"
            "### Input:\nDear {instruction}, {name}\n\n### Response:\n");
}

TEST_F(InstructTest, SummarizeWithAColumnMap) {
  const std::string path = file("s.json", R"([{"description": "A long text about tea.", "summary": "tea"}])");
  const InstructOptions o{.format = InstructTemplate::summarize,
                          .column_map = {{"dialogue", "description"}, {"output", "summary"}}};
  const auto d = data::load_instruct_dataset(path, *gpt2_, o);
  auto expected = ids(*gpt2_, "Summarize this dialogue:\nA long text about tea.\n---\nSummary:\n");
  for (int32_t id : ids(*gpt2_, "tea")) expected.push_back(id);
  expected.push_back(*gpt2_->eos_id());
  EXPECT_EQ(d.samples.at(0).tokens, expected);
}

// The assistant's messages are learned whole, header and end of turn included,
// as torchtune's Llama 3 tokenizer masks a message.
TEST_F(InstructTest, Llama3ChatTrainsOnAssistantTurnsOnly) {
  const std::string path = file("c.jsonl", R"({"messages": [{"role": "user", "content": "Hi <|eot_id|>"}, {"role": "assistant", "content": "Hello!"}]}
)");
  const auto d = data::load_instruct_dataset(path, *llama3_, {.format = InstructTemplate::chat});
  const TokenizedSample& s = d.samples.at(0);
  const std::string text = llama3_->decode(s.tokens);
  EXPECT_EQ(text,
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi <|eot_id|><|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>");
  // The user's literal "<|eot_id|>" is text, not the special token.
  const int32_t eot = *llama3_->special_token_id("<|eot_id|>");
  EXPECT_EQ(std::count(s.tokens.begin(), s.tokens.end(), eot), 2);
  std::vector<int32_t> learned;
  for (size_t i = 0; i < s.tokens.size(); ++i)
    if (s.labels[i] != -100) learned.push_back(s.tokens[i]);
  EXPECT_EQ(llama3_->decode(learned), "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>");
  // GPT-2's tokenizer has no Llama 3 header tokens.
  EXPECT_THROW(data::load_instruct_dataset(path, *gpt2_, {.format = InstructTemplate::chat}), Error);
}

TEST_F(InstructTest, ShareGptConversationsReadLikeMessages) {
  const InstructOptions chat{.format = InstructTemplate::chat};
  const auto sample_of = [&](const std::string& name, const std::string& line, const InstructOptions& o) {
    const auto d = data::load_instruct_dataset(file(name, line + "\n"), *llama3_, o);
    EXPECT_EQ(d.samples.size(), 1u);
    return d.samples.at(0);
  };
  const TokenizedSample openai = sample_of("openai.jsonl",
                                           R"({"messages": [{"role": "system", "content": "Be brief."}, )"
                                           R"({"role": "user", "content": "Hi"}, )"
                                           R"({"role": "assistant", "content": "Hello!"}]})",
                                           chat);
  const std::string sharegpt_turns = R"([{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"}, )"
                                     R"({"from": "gpt", "value": "Hello!"}])";
  const TokenizedSample sharegpt =
      sample_of("sharegpt.jsonl", R"({"conversations": )" + sharegpt_turns + "}", chat);
  EXPECT_EQ(llama3_->decode(openai.tokens),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>");
  EXPECT_EQ(sharegpt.tokens, openai.tokens);
  EXPECT_EQ(sharegpt.labels, openai.labels);
  // A column_map entry for messages names the column, whatever its layout.
  InstructOptions mapped = chat;
  mapped.column_map["messages"] = "turns";
  EXPECT_EQ(sample_of("turns.jsonl", R"({"turns": )" + sharegpt_turns + "}", mapped).tokens, openai.tokens);

  // OpenAI's content parts: their texts, in order.
  const TokenizedSample parts = sample_of("parts.jsonl",
                                          R"({"messages": [{"role": "system", "content": [{"type": "text", "text": "Be "}, )"
                                          R"({"type": "text", "text": "brief."}]}, {"role": "user", "content": "Hi"}, )"
                                          R"({"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]}]})",
                                          chat);
  EXPECT_EQ(parts.tokens, openai.tokens);
  EXPECT_EQ(parts.labels, openai.labels);
  // Llama 3 trims each message, as Meta's template and torchtune do.
  const TokenizedSample padded = sample_of("padded.jsonl",
                                           R"({"messages": [{"role": "system", "content": "\nBe brief.  "}, )"
                                           R"({"role": "user", "content": " Hi\n"}, )"
                                           R"({"role": "assistant", "content": "Hello!\n\n"}]})",
                                           chat);
  EXPECT_EQ(padded.tokens, openai.tokens);
  EXPECT_EQ(padded.labels, openai.labels);

  // Each bad record's error names the file, line, message and field.
  const auto expect_error = [&](const std::string& line, const std::string& message, const InstructOptions& o) {
    const std::string path = file("bad.jsonl", line + "\n");
    const std::string error = error_of([&] { data::load_instruct_dataset(path, *llama3_, o); });
    EXPECT_NE(error.find("bad.jsonl:1: " + message), std::string::npos) << error;
  };
  expect_error(R"({"conversations": [{"from": "human", "value": "Hi"}, {"from": "bot", "value": "Yo"}]})",
               "message 1 of 'conversations': from 'bot' is not system, human or gpt", chat);
  expect_error(R"({"conversations": [{"from": "human", "text": "Hi"}]})",
               "message 0 of 'conversations' has no string 'value'", chat);
  expect_error(R"({"messages": [{"role": "user", "content": 3}]})", "message 0 of 'messages' has no string 'content'",
               chat);
  expect_error(R"({"messages": [{"role": 5, "content": "Hi"}]})", "message 0 of 'messages' has no string 'role'",
               chat);  // was: an internal error
  expect_error(R"({"dialogue": "Hi"})", "no 'messages' list of messages (nor a ShareGPT 'conversations' list, nor TRL's 'prompt' and 'completion' lists)", chat);
  expect_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
               "message 0 of 'messages': a content part that is not {\"type\": \"text\", \"text\": ...} (hone trains "
               "on text): {\"image_url\"", chat);
  expect_error(R"({"conversations": []})", "no 'turns' list of messages", mapped);
}

// LLM Foundry's fine-tuning records: prompt and response, in JSONL or in MDS
// shards (str columns; json columns hold chats), read with the plain template
// as records of input and output are.
TEST_F(InstructTest, LlmFoundryPromptResponseRecordsInJsonlAndMds) {
  const InstructOptions plain{.format = InstructTemplate::plain};
  const auto load = [&](const std::string& path, const InstructOptions& o, const Tokenizer& t) {
    return data::load_instruct_dataset(path, t, o).samples;
  };
  const auto want = load(file("io.jsonl", R"({"input": "Q: 2+2?\nA:", "output": " 4"}
{"input": "Say hi.", "output": " hi"}
)"),
                         plain, *llama3_);
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ(want[0].tokens.front(), *llama3_->bos_id());
  const auto same = [&](const std::vector<TokenizedSample>& got) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << i;
      EXPECT_EQ(got[i].labels, want[i].labels) << i;
    }
  };
  same(load(file("pr.jsonl", R"({"prompt": "Q: 2+2?\nA:", "response": " 4"}
{"prompt": "Say hi.", "response": " hi"}
)"),
            plain, *llama3_));
  const std::string messages = R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}])";
  write_mds_fixture(dir_ + "/foundry", {{"prompt", "str"}, {"response", "str"}, {"id", "int"}, {"chat", "json"}},
                    {{"Q: 2+2?\nA:", " 4", raw_bytes<int64_t>({7}), messages},
                     {"Say hi.", " hi", raw_bytes<int64_t>({8}), messages}});
  same(load(dir_ + "/foundry", plain, *llama3_));
  InstructOptions chat{.format = InstructTemplate::chat};
  chat.column_map["messages"] = "chat";
  EXPECT_EQ(load(dir_ + "/foundry", chat, *llama3_)[1].tokens,
            load(file("chat.jsonl", R"({"messages": )" + messages + "}\n"), {.format = InstructTemplate::chat},
                 *llama3_)[0]
                .tokens);

  // A column_map entry is the only column read; errors name the sample.
  InstructOptions mapped = plain;
  mapped.column_map["input"] = "question";
  EXPECT_NE(error_of([&] { load(dir_ + "/foundry", mapped, *llama3_); })
                .find(dir_ + "/foundry: sample 0: no 'question' column (the template's 'input'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load(file("none.jsonl", R"({"text": "x"})" "\n"), plain, *llama3_); })
                .find("none.jsonl:1: no 'input' column nor 'prompt'"),
            std::string::npos);
  write_mds_fixture(dir_ + "/badjson", {{"chat", "json"}}, {{"[{"}});
  EXPECT_NE(error_of([&] { load(dir_ + "/badjson", chat, *llama3_); })
                .find(dir_ + "/badjson: sample 0: column 'chat' is not valid JSON"),
            std::string::npos);
}

// Records tokenized as Hugging Face's Trainer takes them (input_ids, labels with
// -100, attention_mask): the same samples as the records they were made from.
TEST_F(InstructTest, HuggingFaceTokenizedRecords) {
  const std::string text = file("a.jsonl", R"({"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"}
{"instruction": "Say hi.", "output": "hi"}
)");
  const auto from_text = data::load_instruct_dataset(text, *gpt2_, {.max_seq_len = 128}).samples;
  ASSERT_EQ(from_text.size(), 2u);
  std::string records, padded;
  for (const TokenizedSample& s : from_text) {
    records += nlohmann::json{{"input_ids", s.tokens}, {"labels", s.labels}}.dump() + "\n";
    // Right-padded by 8 with the pad left out of the loss and the mask.
    std::vector<int32_t> tokens = s.tokens, labels = s.labels, mask(s.tokens.size(), 1);
    tokens.resize(tokens.size() + 8, 0);
    labels.resize(labels.size() + 8, -100);
    mask.resize(mask.size() + 8, 0);
    padded += nlohmann::json{{"input_ids", tokens}, {"labels", labels}, {"attention_mask", mask}}.dump() + "\n";
  }
  for (const std::string name : {"tokens.jsonl", "padded.jsonl"}) {
    const auto d = data::load_instruct_dataset(file(name, name == "tokens.jsonl" ? records : padded), *gpt2_,
                                               {.max_seq_len = 128});
    ASSERT_EQ(d.samples.size(), 2u) << name;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(d.samples[i].tokens, from_text[i].tokens) << name;
      EXPECT_EQ(d.samples[i].labels, from_text[i].labels) << name;
    }
  }
  // Without labels every token is learned.
  const auto all = data::load_instruct_dataset(file("ids.jsonl", R"({"input_ids": [5, 6, 7]})"), *gpt2_, {});
  EXPECT_EQ(all.samples[0].labels, (std::vector<int32_t>{5, 6, 7}));

  const auto error = [&](const std::string& lines) {
    return error_of([&] { data::load_instruct_dataset(file("bad.jsonl", lines), *gpt2_, {}); });
  };
  EXPECT_NE(error(R"({"input_ids": [1, 2], "labels": [1]})")
                .find("bad.jsonl:1: 2 input_ids, 1 labels and 2 attention_mask: they go position by position"),
            std::string::npos);
  EXPECT_NE(error(R"({"input_ids": [1, 2], "labels": [-5, 2]})")
                .find("bad.jsonl:1: 'labels' holds -5, not a token id or -100"),
            std::string::npos);
  EXPECT_NE(error(R"({"input_ids": [1, -100]})").find("bad.jsonl:1: 'input_ids' holds -100, not a token id"),
            std::string::npos);
  EXPECT_NE(error(R"({"input_ids": [1, 60000]})")
                .find("bad.jsonl:1: token id 60000 is beyond this tokenizer's 50257 ids"),
            std::string::npos);
  EXPECT_NE(error("{\"input_ids\": [1, 2]}\n{\"text\": \"x\"}\n")
                .find("bad.jsonl:2: no 'input_ids' (the first record has them)"),
            std::string::npos);
}

// LLM Foundry's pre-tokenized fine-tuning shards (convert_finetuning_dataset.py
// given a tokenizer): a `turns` json column of {input_ids, labels} per turn, or,
// from its older versions, `input_ids` and `labels` as ndarray:uint32 or as raw
// bytes of token_encoding_type. Stitched as its collator does: prompt, response,
// ..., EOS after the last response unless it is there already.
TEST_F(InstructTest, LlmFoundryPreTokenizedTurns) {
  const int32_t eos = *gpt2_->eos_id();
  const std::vector<int32_t> p1{10, 11, 12}, r1{20, 21}, p2{30}, r2{40, 41, eos};
  const auto turn = [](const std::vector<int32_t>& prompt, const std::vector<int32_t>& response) {
    return nlohmann::json{{"input_ids", prompt}, {"labels", response}, {"attention_mask", {1}}};
  };
  write_mds_fixture(dir_ + "/turns", {{"turns", "json"}},
                    {{nlohmann::json{turn(p1, r1), turn(p2, r2)}.dump()}, {nlohmann::json{turn(p2, r1)}.dump()}});
  const auto concat = [](std::initializer_list<std::vector<int32_t>> parts) {
    std::vector<int32_t> out;
    for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
    return out;
  };
  const auto masked = [](const std::vector<int32_t>& ids) { return std::vector<int32_t>(ids.size(), -100); };
  auto d = data::load_instruct_dataset(dir_ + "/turns", *gpt2_, {.max_seq_len = 64});
  ASSERT_EQ(d.samples.size(), 2u);
  EXPECT_EQ(d.samples[0].tokens, concat({p1, r1, p2, r2}));  // r2 ends with EOS already
  EXPECT_EQ(d.samples[0].labels, concat({masked(p1), r1, masked(p2), r2}));
  EXPECT_EQ(d.samples[1].tokens, concat({p2, r1, {eos}}));
  // LLM Foundry's default, target_responses: last; and train_on_input (its target_prompts: all).
  InstructOptions last{.max_seq_len = 64};
  last.train_on_every_response = false;
  EXPECT_EQ(data::load_instruct_dataset(dir_ + "/turns", *gpt2_, last).samples[0].labels,
            concat({masked(p1), masked(r1), masked(p2), r2}));
  EXPECT_EQ(data::load_instruct_dataset(dir_ + "/turns", *gpt2_, {.train_on_input = true, .max_seq_len = 64})
                .samples[0]
                .labels,
            concat({p1, r1, p2, r2}));

  // One turn in input_ids and labels columns, as ndarrays or raw bytes, read alike.
  const auto ndarray = [](const std::vector<int32_t>& ids) {
    std::vector<uint32_t> values(ids.begin(), ids.end());
    return std::string{char(1 << 2), char(values.size())} + raw_bytes(values);  // 1-D, one-byte length
  };
  write_mds_fixture(dir_ + "/ndarray", {{"input_ids", "ndarray:uint32"}, {"labels", "ndarray:uint32"}},
                    {{ndarray(p2), ndarray(r1)}});
  const std::vector<int64_t> p2_64(p2.begin(), p2.end()), r1_64(r1.begin(), r1.end());
  write_mds_fixture(dir_ + "/bytes", {{"input_ids", "bytes"}, {"labels", "bytes"}},
                    {{raw_bytes(p2_64), raw_bytes(r1_64)}});
  for (const char* name : {"/ndarray", "/bytes"}) {
    d = data::load_instruct_dataset(dir_ + name, *gpt2_, {.max_seq_len = 64});
    ASSERT_EQ(d.samples.size(), 1u) << name;
    EXPECT_EQ(d.samples[0].tokens, concat({p2, r1, {eos}})) << name;
    EXPECT_EQ(d.samples[0].labels, concat({masked(p2), r1, {eos}})) << name;
  }
  // int64 bytes read as int32 give ids the sample did not hold: every other is 0.
  InstructOptions int32_bytes{.max_seq_len = 64};
  int32_bytes.token_encoding_type = "int32";
  EXPECT_EQ(data::load_instruct_dataset(dir_ + "/bytes", *gpt2_, int32_bytes).samples[0].tokens,
            concat({{30, 0, 20, 0, 21, 0}, {eos}}));
  // Cut to max_seq_len like any sample; a sample left with nothing to learn is dropped.
  d = data::load_instruct_dataset(dir_ + "/turns", *gpt2_, {.max_seq_len = 3});
  EXPECT_EQ(d.dropped, 1);
  EXPECT_EQ(d.samples.size(), 1u);

  const auto error = [&](const std::string& turns) {
    fs::remove_all(dir_ + "/bad");
    write_mds_fixture(dir_ + "/bad", {{"turns", "json"}}, {{turns}});
    return error_of([&] { data::load_instruct_dataset(dir_ + "/bad", *gpt2_, {}); });
  };
  EXPECT_NE(error(R"([{"input_ids": [1, 60000], "labels": [2]}])")
                .find("/bad: sample 0: token id 60000 is beyond this tokenizer's 50257 ids"),
            std::string::npos);
  EXPECT_NE(error(R"([{"input_ids": [1], "labels": [-3]}])")
                .find("sample 0: turn 0: 'labels' holds -3, not a token id"),
            std::string::npos);
  EXPECT_NE(error(R"([{"input_ids": [1]}])").find("sample 0: turn 0 has no 'labels' list of token ids"),
            std::string::npos);
  EXPECT_NE(error(R"({"input_ids": [1]})").find("sample 0: column 'turns' is not a JSON list of turns"),
            std::string::npos);
}

// target_responses: last learns only the conversation's last answer.
TEST_F(InstructTest, ChatLearnsTheLastResponseOnlyWhenAsked) {
  const std::string path = file("two.jsonl", R"({"messages": [{"role": "user", "content": "Hi"}, )"
                                             R"({"role": "assistant", "content": "Hello!"}, )"
                                             R"({"role": "user", "content": "Bye"}, )"
                                             R"({"role": "assistant", "content": "See you."}]})"
                                             "\n");
  const auto learned_text = [&](const InstructOptions& o) {
    const TokenizedSample s = data::load_instruct_dataset(path, *llama3_, o).samples.at(0);
    std::vector<int32_t> learned;
    for (size_t i = 0; i < s.tokens.size(); ++i)
      if (s.labels[i] != -100) learned.push_back(s.tokens[i]);
    return llama3_->decode(learned);
  };
  const std::string header = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  InstructOptions o{.format = InstructTemplate::chat};
  EXPECT_EQ(learned_text(o), header + "Hello!<|eot_id|>" + header + "See you.<|eot_id|>");
  o.train_on_every_response = false;
  EXPECT_EQ(learned_text(o), header + "See you.<|eot_id|>");
}

// dataset.system_prompt is never learned, not even with train_on_input (as
// torchtune's new_system_prompt); a record's own system message is, then.
TEST_F(InstructTest, AnInjectedSystemPromptIsNeverLearned) {
  const std::string path = file("sys.jsonl", R"({"messages": [{"role": "system", "content": "Own."}, )"
                                             R"({"role": "user", "content": "Hi"}, )"
                                             R"({"role": "assistant", "content": "Hello!"}]})"
                                             "\n");
  const std::unique_ptr<Tokenizer> qwen3 = load_tokenizer(asset_path("tokenizers/qwen3")),
                                    mistral = load_tokenizer(asset_path("tokenizers/mistral"));
  for (const auto& [tokenizer, format] :
       {std::pair<const Tokenizer*, data::ChatFormat>{llama3_, data::ChatFormat::llama3},
        std::pair<const Tokenizer*, data::ChatFormat>{qwen3.get(), data::ChatFormat::chatml},
        std::pair<const Tokenizer*, data::ChatFormat>{mistral.get(), data::ChatFormat::llama2}}) {
    const auto learned_text = [&](const std::string& system_prompt) {
      const InstructOptions o{
          .format = InstructTemplate::chat, .chat_format = format, .train_on_input = true, .system_prompt = system_prompt};
      const TokenizedSample s = data::load_instruct_dataset(path, *tokenizer, o).samples.at(0);
      std::vector<int32_t> learned;
      for (size_t i = 1; i < s.tokens.size(); ++i)  // the first token is never a target
        if (s.labels[i] != -100) learned.push_back(s.tokens[i]);
      return tokenizer->decode(learned);
    };
    const std::string injected = learned_text("Be brief."), own = learned_text("");
    EXPECT_EQ(injected.find("Be brief."), std::string::npos) << injected;
    EXPECT_EQ(injected.find("system"), std::string::npos) << injected;
    EXPECT_EQ(injected.find("SYS"), std::string::npos) << injected;
    EXPECT_NE(injected.find("Hi"), std::string::npos) << injected;
    EXPECT_NE(own.find("Own."), std::string::npos) << own;
  }
}

// With in_chat_format the other templates write their prompt and response as a
// user's and an assistant's message, as torchtune's model tokenizers do
// (alpaca_dataset with llama3_tokenizer); without one, plain text.
TEST_F(InstructTest, AlpacaInAChatFormatIsAUserAndAnAssistantMessage) {
  const std::string path = file("a.jsonl", R"({"instruction": "Say hi.", "output": "hi"})"
                                           "\n");
  const InstructOptions alpaca{
      .format = InstructTemplate::alpaca, .chat_format = data::ChatFormat::llama3, .in_chat_format = true};
  const TokenizedSample s = data::load_instruct_dataset(path, *llama3_, alpaca).samples.at(0);
  const std::string prompt =
      "Below is an instruction that describes a task. Write a response that appropriately completes the "
      "request.\n\n### Instruction:\nSay hi.\n\n### Response:";  // trimmed, as every Llama 3 message
  const std::string header = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(llama3_->decode(s.tokens), "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n" + prompt +
                                           "<|eot_id|>" + header + "hi<|eot_id|>");
  std::vector<int32_t> learned;
  for (size_t i = 0; i < s.tokens.size(); ++i)
    if (s.labels[i] != -100) learned.push_back(s.tokens[i]);
  EXPECT_EQ(llama3_->decode(learned), header + "hi<|eot_id|>");
  // A prompt to answer is formatted alike, and the answer ends at the end of turn.
  const std::string answer_prompt = llama3_->decode(data::prompt_tokens(*llama3_, "Say hi.", alpaca));
  EXPECT_EQ(answer_prompt, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n" + prompt + "<|eot_id|>" +
                               header);
  EXPECT_EQ(data::end_of_answer_token(*llama3_, alpaca), *llama3_->special_token_id("<|eot_id|>"));
  // Without: BOS, the prompt, the answer and EOS (whatever chat_format says).
  const TokenizedSample plain =
      data::load_instruct_dataset(path, *llama3_, {.format = InstructTemplate::alpaca, .chat_format = data::ChatFormat::chatml})
          .samples.at(0);
  EXPECT_EQ(llama3_->decode(plain.tokens), "<|begin_of_text|>" + prompt + "\nhi<|end_of_text|>");
  EXPECT_EQ(data::end_of_answer_token(*llama3_, {.format = InstructTemplate::alpaca}), *llama3_->eos_id());
  // Mistral's (torchtune's MistralChatTemplate): [INST] around the prompt, EOS after the answer.
  const std::unique_ptr<Tokenizer> mistral = load_tokenizer(asset_path("tokenizers/mistral"));
  const TokenizedSample inst =
      data::load_instruct_dataset(
          path, *mistral,
          {.format = InstructTemplate::alpaca, .chat_format = data::ChatFormat::llama2, .in_chat_format = true})
          .samples.at(0);
  EXPECT_EQ(inst.tokens.front(), *mistral->bos_id());
  EXPECT_EQ(inst.tokens.back(), *mistral->eos_id());
  EXPECT_NE(mistral->decode(inst.tokens).find("[INST] Below is an instruction"), std::string::npos)
      << mistral->decode(inst.tokens);
  EXPECT_NE(mistral->decode(inst.tokens).find("### Response:\n [/INST] hi"), std::string::npos)
      << mistral->decode(inst.tokens);
}

// A response follows its prompt as in the whole text: SentencePiece-style
// tokenizers (a dummy prefix "▁" before a text encoded alone) do not start it
// with a second "▁" (torchtune trims it too); byte-level BPE has no such prefix.
TEST_F(InstructTest, ResponsesAreTokenizedAsTheyContinueTheirPrompt) {
  const std::string path = file("a.jsonl", R"({"instruction": "Say hi", "output": " hi there"})"
                                           "\n" R"({"instruction": "Say hi", "output": "hi there"})" "\n");
  for (const std::string name : {"tokenizers/mistral", "tokenizers/spm/sotu.model", "tokenizers/gpt2"}) {
    SCOPED_TRACE(name);
    const std::unique_ptr<Tokenizer> t = load_tokenizer(asset_path(name));
    const auto samples = data::load_instruct_dataset(path, *t, {}).samples;
    for (const auto& [sample, response] : {std::pair{samples.at(0), " hi there"}, std::pair{samples.at(1), "hi there"}}) {
      std::vector<int32_t> whole;
      if (t->bos_id() != t->eos_id()) whole.push_back(*t->bos_id());
      t->encode_into(data::format_prompt({{"instruction", "Say hi"}}, {}) + response, whole);
      whole.push_back(*t->eos_id());
      EXPECT_EQ(sample.tokens, whole) << t->decode(sample.tokens);
    }
  }
}

// The chat template a fine-tune's checkpoints and exports carry renders, in
// transformers' Jinja environment, the text the run trained on: tokenized, the
// sample's tokens, and with the generation prompt, the prompt hone generates from.
TEST_F(InstructTest, ChatTemplatesRenderWhatTrainingFormats) {
  const std::unique_ptr<Tokenizer> qwen3 = load_tokenizer(asset_path("tokenizers/qwen3"));
  const std::unique_ptr<Tokenizer> mistral = load_tokenizer(asset_path("tokenizers/mistral"));
  using Json = nlohmann::json;
  const auto message = [](const char* role, const char* content) { return Json{{"role", role}, {"content", content}}; };
  const Json conversation = {message("system", "Answer briefly."), message("user", " Hi, what's 2+2?\n"),
                             message("assistant", "4."), message("user", "And \"quotes\", ünïcode\nand {{ braces }}?"),
                             message("assistant", "Yes: \\n done.")};
  // The template's rendering, or nullopt where python3 has no jinja2 (a failure: install-deps.sh installs it).
  const auto render = [&](const std::string& jinja, const Json& messages, bool generation_prompt) {
    const std::string out = dir_ + "/rendered.txt";
    const std::string command = "/usr/bin/python3 '" + source_path("tests/data/render_chat_template.py") + "' '" +
                                file("template.jinja", jinja) + "' '" + file("messages.json", messages.dump()) + "' " +
                                (generation_prompt ? "1 '" : "0 '") + out + "'";
    const int status = std::system(command.c_str());
    EXPECT_TRUE(WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 77)) << command;
    return WEXITSTATUS(status) == 0 ? std::optional(read_file(out)) : std::nullopt;
  };
  struct Case {
    const Tokenizer* tokenizer;
    data::ChatFormat format;
    std::string system_prompt;
  };
  for (const auto& [tokenizer, format, system_prompt] :
       {Case{llama3_, data::ChatFormat::llama3, ""}, Case{llama3_, data::ChatFormat::llama3, "Be \"kind\".\n"},
        Case{qwen3.get(), data::ChatFormat::chatml, ""}, Case{qwen3.get(), data::ChatFormat::chatml, "Be kind."},
        Case{mistral.get(), data::ChatFormat::llama2, ""}, Case{mistral.get(), data::ChatFormat::llama2, "Be kind."}}) {
    const InstructOptions o{.format = InstructTemplate::chat, .chat_format = format, .system_prompt = system_prompt};
    SCOPED_TRACE(fmt::format("chat format {}, system prompt '{}'", int(format), system_prompt));
    const std::optional<std::string> jinja = data::chat_template(*tokenizer, o);
    ASSERT_TRUE(jinja);
    const std::optional<std::string> text = render(*jinja, conversation, false);
    ASSERT_TRUE(text) << "/usr/bin/python3 has no jinja2: scripts/install-deps.sh installs python3-jinja2";
    // A system prompt replaces the record's system message, as torchtune's new_system_prompt does.
    EXPECT_EQ(text->find("Answer briefly.") == std::string::npos, !system_prompt.empty()) << *text;
    const std::string records = file("chat.jsonl", Json{{"messages", conversation}}.dump() + "\n");
    EXPECT_EQ(tokenizer->encode(*text, SpecialTokens::recognize),
              data::load_instruct_dataset(records, *tokenizer, o).samples.at(0).tokens)
        << *text;
    const std::optional<std::string> prompt = render(*jinja, Json{message("user", "Hi")}, true);
    ASSERT_TRUE(prompt);
    EXPECT_EQ(tokenizer->encode(*prompt, SpecialTokens::recognize), data::prompt_tokens(*tokenizer, "Hi", o))
        << *prompt;
  }
  // The other templates are no chat: no chat template.
  EXPECT_FALSE(data::chat_template(*llama3_, {.format = InstructTemplate::alpaca}));
}

// A prompt to generate from reads its special tokens as their ids, as
// transformers' tokenizer(text) and vLLM do (a chat rendered by the caller).
TEST_F(InstructTest, APlainPromptReadsItsSpecialTokens) {
  EXPECT_EQ(data::prompt_tokens(*gpt2_, "Hello<|endoftext|>The", {.format = InstructTemplate::plain}),
            (std::vector<int32_t>{15496, 50256, 464}));
}

// Hugging Face datasets' Parquet files: rows are records, as the same records in JSONL.
TEST_F(InstructTest, ParquetRowsAreRecords) {
  const std::string fixtures = source_path("tests/data/formats/parquet/");
  const nlohmann::json expected = nlohmann::json::parse(std::ifstream(fixtures + "expected.json"));
  std::string lines;
  for (const auto& record : expected["records"]) lines += record.dump() + "\n";
  const InstructOptions alpaca{.format = InstructTemplate::alpaca, .max_seq_len = 64};
  const auto want = data::load_instruct_dataset(file("records.jsonl", lines), *gpt2_, alpaca);
  const auto got = data::load_instruct_dataset(fixtures + "snappy_v1.parquet", *gpt2_, alpaca);
  ASSERT_EQ(got.samples.size(), 300u);
  EXPECT_EQ(got.truncated, want.truncated);
  for (size_t i = 0; i < got.samples.size(); ++i) {
    EXPECT_EQ(got.samples[i].tokens, want.samples[i].tokens) << i;
    EXPECT_EQ(got.samples[i].labels, want.samples[i].labels) << i;
  }
  // A dataset's shards: a folder of them (other files left out) or a pattern, in name order.
  fs::create_directories(dir_ + "/hub/data");
  fs::copy_file(fixtures + "zstd_v2.parquet", dir_ + "/hub/data/train-00001-of-00002.parquet");
  fs::copy_file(fixtures + "snappy_v1.parquet", dir_ + "/hub/data/train-00000-of-00002.parquet");
  std::ofstream(dir_ + "/hub/data/README.md") << "# a dataset card\n";
  for (const std::string& shards : {dir_ + "/hub/data", dir_ + "/hub/data/train-*.parquet"}) {
    const auto sharded = data::load_instruct_dataset(shards, *gpt2_, alpaca);
    ASSERT_EQ(sharded.samples.size(), 600u) << shards;
    for (size_t i = 0; i < sharded.samples.size(); ++i)
      EXPECT_EQ(sharded.samples[i].tokens, want.samples[i % 300].tokens) << shards << " " << i;
  }
  EXPECT_NE(error_of([&] { data::load_instruct_dataset(dir_ + "/hub", *gpt2_, alpaca); })
                .find(dir_ + "/hub: a folder without record files"),
            std::string::npos);
  EXPECT_NE(error_of([&] { data::load_instruct_dataset(dir_ + "/hub/test-*.parquet", *gpt2_, alpaca); })
                .find("no file or folder matches this pattern"),
            std::string::npos);
  // Errors name the file and the row.
  EXPECT_NE(error_of([&] { data::load_instruct_dataset(fixtures + "chats.parquet", *llama3_, {.format = InstructTemplate::chat}); })
                .find("chats.parquet: row 3: message 2 of 'messages' has no string 'content'"),
            std::string::npos);
}

TEST_F(InstructTest, TruncatesAndDropsWhatCannotBeLearned) {
  const std::string long_output(400, 'x');
  const std::string path = file("t.jsonl", "{\"input\": \"" + std::string(300, 'a') + "\", \"output\": \"b\"}\n" +
                                               "{\"input\": \"q\", \"output\": \"" + long_output + "\"}\n");
  const auto d = data::load_instruct_dataset(path, *gpt2_, {.format = InstructTemplate::plain, .max_seq_len = 20});
  EXPECT_EQ(d.dropped, 1);  // its response fell beyond the cut
  EXPECT_EQ(d.truncated, 2);
  ASSERT_EQ(d.samples.size(), 1u);
  EXPECT_EQ(d.samples[0].tokens.size(), 20u);
}

TEST_F(InstructTest, ErrorsNameFileLineAndColumn) {
  auto error = [&](const std::string& name, const std::string& text) {
    try {
      data::load_instruct_dataset(file(name, text), *gpt2_, {.format = InstructTemplate::alpaca});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("bad.jsonl", "{\"instruction\": \"x\", \"output\": \"y\"}\n{broken\n").find("bad.jsonl:2: not valid JSON"),
            std::string::npos);
  EXPECT_NE(error("missing.jsonl", "{\"instruction\": \"x\"}\n").find("missing.jsonl:1: no 'output' column"),
            std::string::npos);
  // LLM Foundry's prompt/response records under another template: the error says which reads them.
  EXPECT_NE(error("foundry.jsonl", "{\"prompt\": \"x\", \"response\": \"y\"}\n")
                .find("is the plain template's: dataset.template: plain"),
            std::string::npos);
  EXPECT_NE(error("null.jsonl", "{\"instruction\": \"x\", \"output\": null}\n")
                .find("null.jsonl:1: column 'output' is null (the template's 'output')"),
            std::string::npos);
  EXPECT_NE(error("x.csv", "a,b\n").find("instruct datasets are .jsonl or .json"), std::string::npos);
  // Where a syntax error is: the byte, line and column of an array, the line and column of a JSON line.
  EXPECT_EQ(error("array.json", "[\n  {\"instruction\": \"x\", \"output\": \"y\"},\n  {\"instruction\": x}\n]\n"),
            file("array.json", "") + ": not valid JSON (byte 60: parse error at line 3, column 19: syntax error while "
                                     "parsing value - invalid literal; last read: '\"instruction\": x')");
  EXPECT_NE(error("bad.jsonl", "{\"instruction\": \"x\", \"output\": \"y\"}\n{broken\n")
                .find("bad.jsonl:2: not valid JSON (byte 2: parse error at line 1, column 2: "),
            std::string::npos);
  EXPECT_NE(error("huge.json", "[{\"instruction\": \"x\", \"output\": \"y\", \"score\": 1e999}]")
                .find("huge.json: not valid JSON (number overflow parsing '1e999')"),
            std::string::npos);
  // JSON Lines named .json (Hugging Face datasets' to_json()) read as JSON Lines; one object is neither.
  const std::string lines = "{\"instruction\": \"x\", \"output\": \"y\"}\n{\"instruction\": \"z\", \"output\": \"w\"}\n";
  EXPECT_EQ(data::load_instruct_dataset(file("lines.json", lines), *gpt2_, {}).samples.size(), 2u);
  EXPECT_EQ(data::load_instruct_dataset(file("lines.json", lines), *gpt2_, {}).samples[1].tokens,
            data::load_instruct_dataset(file("lines.jsonl", lines), *gpt2_, {}).samples[1].tokens);
  EXPECT_NE(error("one.json", "{\n  \"instruction\": \"x\",\n  \"output\": \"y\"\n}\n")
                .find("one.json: one JSON object across lines: expected an array of records, or JSON Lines"),
            std::string::npos);
  // An array after a UTF-8 byte-order mark is the same array.
  const std::string array = "[\n  {\"instruction\": \"x\", \"output\": \"y\"},\n  {\"instruction\": \"z\", \"output\": \"w\"}\n]\n";
  EXPECT_EQ(data::load_instruct_dataset(file("bom.json", "\xEF\xBB\xBF" + array), *gpt2_, {}).samples[1].tokens,
            data::load_instruct_dataset(file("lines.jsonl", lines), *gpt2_, {}).samples[1].tokens);
}

// DPO's pairs: conversations (the prompt's turns in both) or a prompt string
// with two answers, each side masked up to its answer; the chosen side first.
TEST_F(InstructTest, PreferencePairsFromConversationsOrAPromptWithTwoAnswers) {
  const std::string conversations = file("p.jsonl", R"({"chosen": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."}], "rejected": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Rome."}]}
)");
  const InstructOptions chat{.format = InstructTemplate::chat};
  const auto d = data::load_preference_dataset(conversations, *llama3_, chat);
  ASSERT_EQ(d.samples.size(), 2u);
  const auto learned = [&](const TokenizedSample& s) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < s.tokens.size(); ++i)
      if (s.labels[i] != -100) ids.push_back(s.tokens[i]);
    return llama3_->decode(ids);
  };
  const std::string header = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(learned(d.samples[0]), header + "Paris.<|eot_id|>");
  EXPECT_EQ(learned(d.samples[1]), header + "Rome.<|eot_id|>");
  // The same conversation from a prompt string and answer strings (renamed columns).
  const std::string strings = file("q.jsonl", R"({"question": "Capital of France?", "good": "Paris.", "bad": "Rome."}
)");
  InstructOptions mapped = chat;
  mapped.column_map = {{"prompt", "question"}, {"chosen", "good"}, {"rejected", "bad"}};
  const auto from_strings = data::load_preference_dataset(strings, *llama3_, mapped);
  ASSERT_EQ(from_strings.samples.size(), 2u);
  EXPECT_EQ(from_strings.samples[0].tokens, d.samples[0].tokens);
  EXPECT_EQ(from_strings.samples[1].labels, d.samples[1].labels);
  // A non-chat template formats the prompt as it does for instruct records.
  const auto alpaca = data::load_preference_dataset(
      file("a.jsonl", R"({"prompt": "Say hi.", "chosen": "hi", "rejected": "no"})"), *gpt2_,
      {.format = InstructTemplate::alpaca});
  auto expected = ids(*gpt2_, data::format_prompt({{"instruction", "Say hi."}}, {}));
  for (int32_t id : ids(*gpt2_, "hi")) expected.push_back(id);
  expected.push_back(*gpt2_->eos_id());
  EXPECT_EQ(alpaca.samples.at(0).tokens, expected);
}

TEST_F(InstructTest, PreferencePairsDropTogetherAndErrorsNameRecordAndColumn) {
  // The second pair's rejected answer falls beyond the cut: the whole pair goes.
  const std::string path = file("t.jsonl", "{\"prompt\": \"q\", \"chosen\": \"a\", \"rejected\": \"b\"}\n"
                                           "{\"prompt\": \"" + std::string(60, 'q') + "\", \"chosen\": \"a\", \"rejected\": \"b\"}\n");
  const auto d = data::load_preference_dataset(path, *gpt2_, {.format = InstructTemplate::plain, .max_seq_len = 20});
  EXPECT_EQ(d.dropped, 1);
  EXPECT_EQ(d.samples.size(), 2u);
  const auto error = [&](const std::string& name, const std::string& text) {
    return error_of([&] { data::load_preference_dataset(file(name, text), *gpt2_, {.format = InstructTemplate::plain}); });
  };
  EXPECT_NE(error("n.jsonl", "{\"prompt\": \"q\", \"chosen\": \"a\"}\n").find("n.jsonl:1: no 'rejected' column"),
            std::string::npos);
  EXPECT_NE(error("x.jsonl", "{\"chosen\": \"a\", \"rejected\": [{\"role\": \"user\", \"content\": \"b\"}]}\n")
                .find("x.jsonl:1: 'chosen' and 'rejected' must both be lists of messages or both strings"),
            std::string::npos);
  // Conversations are the chat template's (another one learned nothing of them, and dropped every pair).
  const std::string no_content = "{\"chosen\": [{\"role\": \"user\"}], \"rejected\": []}\n";
  EXPECT_NE(error("m.jsonl", no_content)
                .find("m.jsonl:1: 'chosen' and 'rejected' are conversations (lists of messages), the chat template's: "
                      "dataset.template: chat"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              data::load_preference_dataset(file("m.jsonl", no_content), *llama3_, {.format = InstructTemplate::chat});
            }).find("m.jsonl:1: message 0 of 'chosen' has no string 'content'"),
            std::string::npos);
}

// TRL's fine-tuning layouts: language modeling (`text`, all learned: the text
// template), prompt/completion strings (the plain template's, the completion
// learned), conversational prompt/completion (the prompt's messages never
// learned); tool calls refused; a record of another layout names its template.
TEST_F(InstructTest, TrlLayoutsReadAsTrlReadsThem) {
  const auto sample = [&](const std::string& record, const InstructOptions& o) {
    return data::load_instruct_dataset(file("trl.jsonl", record + "\n"), *llama3_, o).samples.at(0);
  };
  const TokenizedSample text = sample(R"({"text": "The sky is blue."})", {.format = InstructTemplate::text});
  EXPECT_EQ(llama3_->decode(text.tokens), "<|begin_of_text|>The sky is blue.<|end_of_text|>");
  EXPECT_EQ(learned_text(text), "The sky is blue.<|end_of_text|>");
  const TokenizedSample completion =
      sample(R"({"prompt": "The sky is", "completion": " blue."})", {.format = InstructTemplate::plain});
  EXPECT_EQ(llama3_->decode(completion.tokens), "<|begin_of_text|>The sky is blue.<|end_of_text|>");
  EXPECT_EQ(learned_text(completion), " blue.<|end_of_text|>");
  const TokenizedSample conversation = sample(
      R"({"prompt": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, )"
      R"({"role": "user", "content": "Sky?"}], "completion": [{"role": "assistant", "content": "Blue."}]})",
      {.format = InstructTemplate::chat});
  EXPECT_NE(llama3_->decode(conversation.tokens).find("Hello.<|eot_id|>"), std::string::npos);
  EXPECT_EQ(learned_text(conversation), "<|start_header_id|>assistant<|end_header_id|>\n\nBlue.<|eot_id|>");
  const auto error = [&](const std::string& record, const InstructOptions& o) {
    return error_of([&] { sample(record, o); });
  };
  EXPECT_NE(error(R"({"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "", )"
                  R"("tool_calls": [{"type": "function"}]}]})",
                  {.format = InstructTemplate::chat})
                .find("message 1 of 'messages' calls a tool or answers one"),
            std::string::npos);
  // The default template (alpaca) on TRL's records: the template that reads them named.
  EXPECT_NE(error(R"({"text": "x"})", {}).find("; a text record (TRL's language modeling) is the text template's: "
                                               "dataset.template: text"),
            std::string::npos)
      << error(R"({"text": "x"})", {});
  EXPECT_NE(error(R"({"prompt": "x", "completion": "y"})", {})
                .find("is the plain template's: dataset.template: plain"),
            std::string::npos);
  EXPECT_NE(error(R"({"messages": []})", {}).find("is the chat template's: dataset.template: chat"), std::string::npos);
}

// TRL's preference layouts: an explicit prompt as messages (never learned), and
// an implicit one, the sides' shared start: their first messages alike, or
// their strings' shared text (a space before the first difference going with
// the answers, as TRL's extract_prompt has it).
TEST_F(InstructTest, PreferencePromptsExplicitAndImplicitAsTrlReadsThem) {
  const auto pair = [&](const std::string& name, const std::string& record, const InstructOptions& o) {
    const auto d = data::load_preference_dataset(file(name, record + "\n"), *llama3_, o);
    return std::pair{d.samples.at(0), d.samples.at(1)};
  };
  // Implicit, strings, plain template: prompt "The sky is", answers " blue." and " green.".
  const auto [blue, green] = pair("s.jsonl", R"({"chosen": "The sky is blue.", "rejected": "The sky is green."})",
                                  {.format = InstructTemplate::plain});
  EXPECT_EQ(llama3_->decode(blue.tokens), "<|begin_of_text|>The sky is blue.<|end_of_text|>");
  EXPECT_EQ(learned_text(blue), " blue.<|end_of_text|>");
  EXPECT_EQ(learned_text(green), " green.<|end_of_text|>");
  // Explicit, messages: the system and user turns written and masked.
  const InstructOptions chat{.format = InstructTemplate::chat};
  const std::string system_user =
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sky colour?"}])";
  const auto [explicit_chosen, explicit_rejected] =
      pair("e.jsonl",
           R"({"prompt": )" + system_user + R"(, "chosen": [{"role": "assistant", "content": "Blue."}], )"
           R"("rejected": [{"role": "assistant", "content": "Green."}]})",
           chat);
  EXPECT_NE(llama3_->decode(explicit_chosen.tokens).find("Be brief.<|eot_id|><|start_header_id|>user"),
            std::string::npos)
      << llama3_->decode(explicit_chosen.tokens);
  EXPECT_EQ(learned_text(explicit_chosen), "<|start_header_id|>assistant<|end_header_id|>\n\nBlue.<|eot_id|>");
  EXPECT_EQ(learned_text(explicit_rejected), "<|start_header_id|>assistant<|end_header_id|>\n\nGreen.<|eot_id|>");
  // Implicit, messages: the shared turns (an earlier answer included) are the prompt.
  const std::string shared = R"({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}, )"
                             R"({"role": "user", "content": "Sky colour?"}, )";
  const auto [implicit_chosen, implicit_rejected] =
      pair("i.jsonl",
           R"({"chosen": [)" + shared + R"({"role": "assistant", "content": "Blue."}], "rejected": [)" + shared +
               R"({"role": "assistant", "content": "Green."}]})",
           chat);
  EXPECT_NE(llama3_->decode(implicit_chosen.tokens).find("Hello.<|eot_id|>"), std::string::npos)
      << llama3_->decode(implicit_chosen.tokens);
  EXPECT_EQ(learned_text(implicit_chosen), "<|start_header_id|>assistant<|end_header_id|>\n\nBlue.<|eot_id|>");
  EXPECT_EQ(learned_text(implicit_rejected), "<|start_header_id|>assistant<|end_header_id|>\n\nGreen.<|eot_id|>");
}

// Groups (DPO's pairs) stay whole and in order through shuffling, ranks and resume.
TEST(SampleStream, GroupsStayTogetherInOrder) {
  std::vector<TokenizedSample> samples;
  for (int32_t i = 0; i < 12; ++i) samples.push_back({{i, 1}, {-100, 1}});  // pair i / 2, side i % 2
  const data::SampleStreamOptions o{.batch_size = 2, .seq_len = 2, .seed = 3, .world_size = 2, .group_size = 2};
  data::SampleStream rank0(samples, o), rank1(samples, {.batch_size = 2, .seq_len = 2, .seed = 3, .rank = 1,
                                                         .world_size = 2, .group_size = 2});
  EXPECT_EQ(rank0.samples_per_epoch(), 6);
  std::vector<int32_t> seen;
  for (int step = 0; step < 3; ++step) {  // two epochs
    for (data::SampleStream* s : {&rank0, &rank1}) {
      const std::vector<int32_t> tokens = s->next().tokens.to_vector<int32_t>();
      ASSERT_EQ(tokens.size(), 8u);  // 2 pairs of 2 rows of 2 tokens
      for (size_t row = 0; row < 4; row += 2) {
        EXPECT_EQ(tokens[row * 2] % 2, 0);
        EXPECT_EQ(tokens[(row + 1) * 2], tokens[row * 2] + 1);  // its rejected side next
        seen.push_back(tokens[row * 2]);
      }
    }
  }
  std::vector<int32_t> first_epoch(seen.begin(), seen.begin() + 6);
  EXPECT_NE(first_epoch, (std::vector<int32_t>{0, 2, 4, 6, 8, 10}));  // shuffled
  std::sort(first_epoch.begin(), first_epoch.end());
  EXPECT_EQ(first_epoch, (std::vector<int32_t>{0, 2, 4, 6, 8, 10}));  // each pair once an epoch
  EXPECT_THROW(data::SampleStream(std::vector<TokenizedSample>(samples.begin(), samples.begin() + 3), o), Error);
}

TEST(SampleStream, PadsShiftsTargetsShufflesAndResumes) {
  std::vector<TokenizedSample> samples;
  for (int32_t i = 0; i < 5; ++i) samples.push_back({{100 + i, 1, 2, 3}, {-100, -100, 2, 3}});
  data::SampleStream s(samples, {.batch_size = 2, .seq_len = 6, .seed = 9, .shuffle = false});
  Batch b = s.next();
  EXPECT_EQ(b.tokens.to_vector<int32_t>(), (std::vector<int32_t>{100, 1, 2, 3, 0, 0, 101, 1, 2, 3, 0, 0}));
  EXPECT_EQ(b.targets.to_vector<int32_t>(),
            (std::vector<int32_t>{-100, 2, 3, -100, -100, -100, -100, 2, 3, -100, -100, -100}));
  const data::SampleStreamOptions shuffling{.batch_size = 5, .seq_len = 6, .seed = 9};
  data::SampleStream shuffled(samples, shuffling);
  const auto epoch1 = shuffled.next().tokens.to_vector<int32_t>();
  const nlohmann::json state = shuffled.state();
  const auto epoch2 = shuffled.next().tokens.to_vector<int32_t>();
  EXPECT_NE(epoch1, epoch2);
  data::SampleStream resumed(samples, shuffling);
  resumed.restore(state);
  EXPECT_EQ(resumed.next().tokens.to_vector<int32_t>(), epoch2);
}

TEST(SampleStream, PacksWholeSamplesWithTheirOwnPositions) {
  std::vector<TokenizedSample> samples;
  for (int32_t i = 0; i < 6; ++i) {
    const int32_t n = 2 + i % 3;  // lengths 2, 3, 4, 2, 3, 4
    TokenizedSample s;
    for (int32_t t = 0; t < n; ++t) {
      s.tokens.push_back(100 * (i + 1) + t);
      s.labels.push_back(t == 0 ? -100 : 100 * (i + 1) + t);
    }
    samples.push_back(s);
  }
  const data::SampleStreamOptions packing{.batch_size = 1, .seq_len = 8, .seed = 3, .shuffle = false, .packed = true};
  data::SampleStream s(samples, packing);
  EXPECT_EQ(s.samples_per_epoch(), 3);  // rows: [2+3] (4 does not fit), [4+2], [3+4]
  Batch b = s.next();
  EXPECT_EQ(b.tokens.to_vector<int32_t>(), (std::vector<int32_t>{100, 101, 200, 201, 202, 0, 0, 0}));
  EXPECT_EQ(b.positions.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(b.targets.to_vector<int32_t>(), (std::vector<int32_t>{101, -100, 201, 202, -100, -100, -100, -100}));
  const nlohmann::json state = s.state();
  const auto second = s.next().tokens.to_vector<int32_t>();
  EXPECT_EQ(second, (std::vector<int32_t>{300, 301, 302, 303, 400, 401, 0, 0}));
  data::SampleStream resumed(samples, packing);
  resumed.restore(state);
  EXPECT_EQ(resumed.next().tokens.to_vector<int32_t>(), second);
  // Two ranks split the packed rows of the global batch.
  data::SampleStreamOptions second_rank = packing;
  second_rank.rank = 1;
  second_rank.world_size = 2;
  data::SampleStream r1(samples, second_rank);
  EXPECT_EQ(r1.next().tokens.to_vector<int32_t>(), second);
  // An evaluation pass (after rewind): the row after the last sample is
  // padding, not the first samples again.
  data::SampleStreamOptions two_rows = packing;
  two_rows.batch_size = 2;
  data::SampleStream pass(samples, two_rows);
  pass.rewind();
  pass.next();
  EXPECT_FALSE(pass.pass_done());
  const Batch end = pass.next();
  EXPECT_TRUE(pass.pass_done());
  EXPECT_EQ(end.tokens.to_vector<int32_t>(),
            (std::vector<int32_t>{500, 501, 502, 600, 601, 602, 603, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  const std::vector<int32_t> targets = end.targets.to_vector<int32_t>();
  EXPECT_TRUE(std::all_of(targets.begin() + 8, targets.end(), [](int32_t t) { return t == -100; }));
}

// A packed row ends with its epoch: the next epoch's samples start a row of
// their own, so that epochs=1 trains each sample once (as torchtune packs a
// dataset once); they topped up the epoch's last row.
TEST(SampleStream, APackedRowEndsWithItsEpoch) {
  std::vector<TokenizedSample> samples(2);
  for (int32_t i = 0; i < 2; ++i) {
    for (int32_t t = 0; t < 2 + i; ++t) {  // 2 and 3 tokens: a row of 8 has room for the next epoch's first
      samples[size_t(i)].tokens.push_back(100 * (i + 1) + t);
      samples[size_t(i)].labels.push_back(100 * (i + 1) + t);
    }
  }
  data::SampleStream s(samples, {.batch_size = 1, .seq_len = 8, .shuffle = false, .packed = true});
  EXPECT_EQ(s.samples_per_epoch(), 1);
  for (int epoch = 0; epoch < 3; ++epoch) {
    EXPECT_EQ(s.next().tokens.to_vector<int32_t>(), (std::vector<int32_t>{100, 101, 200, 201, 202, 0, 0, 0}))
        << "epoch " << epoch;
  }
}

// Rows are cut to the longest sample of the global batch (every rank the
// same), rounded up to the multiple, never past seq_len; packed rows too.
TEST(SampleStream, CutsRowsToTheLongestSampleOfTheGlobalBatch) {
  std::vector<TokenizedSample> samples;
  for (int32_t n : {3, 5, 2, 9, 4, 1}) {
    TokenizedSample s;
    for (int32_t t = 0; t < n; ++t) {
      s.tokens.push_back(10 * n + t);
      s.labels.push_back(t == 0 ? -100 : 10 * n + t);
    }
    samples.push_back(s);
  }
  const data::SampleStreamOptions cut{.batch_size = 1, .seq_len = 12, .length_multiple = 4, .shuffle = false,
                                      .pad_id = 7, .world_size = 2};
  data::SampleStreamOptions second = cut;
  second.rank = 1;
  data::SampleStream first_rank(samples, cut), second_rank(samples, second);
  // Samples of 3 and 5 tokens: both ranks' rows are 8 long.
  Batch a = first_rank.next(), b = second_rank.next();
  EXPECT_EQ(a.tokens.shape(), Shape({1, 8}));
  EXPECT_EQ(a.tokens.to_vector<int32_t>(), (std::vector<int32_t>{30, 31, 32, 7, 7, 7, 7, 7}));
  EXPECT_EQ(a.targets.to_vector<int32_t>(), (std::vector<int32_t>{31, 32, -100, -100, -100, -100, -100, -100}));
  EXPECT_EQ(b.tokens.to_vector<int32_t>(), (std::vector<int32_t>{50, 51, 52, 53, 54, 7, 7, 7}));
  // 2 and 9: 12, not past seq_len; 4 and 1: 4.
  EXPECT_EQ(first_rank.next().tokens.shape(), Shape({1, 12}));
  EXPECT_EQ(first_rank.next().tokens.shape(), Shape({1, 4}));
  // Without a multiple every row is seq_len long.
  data::SampleStreamOptions whole = cut;
  whole.length_multiple = 0;
  EXPECT_EQ(data::SampleStream(samples, whole).next().tokens.shape(), Shape({1, 12}));
  // Packed rows: 3 + 5 + 2 (9 does not fit), 9 (4 does not fit), 4 + 1.
  data::SampleStreamOptions packed = cut;
  packed.packed = true;
  packed.world_size = 1;
  data::SampleStream p(samples, packed);
  const Batch row = p.next();
  EXPECT_EQ(row.tokens.shape(), Shape({1, 12}));
  EXPECT_EQ(row.positions.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 0, 1}));
  EXPECT_EQ(p.next().tokens.shape(), Shape({1, 12}));
  const Batch last = p.next();
  EXPECT_EQ(last.tokens.shape(), Shape({1, 8}));
  EXPECT_EQ(last.positions.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 0, 0, 1, 2}));
}

// group_by_length: each 50 global batches take their samples longest first
// (every rank alike); an epoch still sees every sample once, and a restored
// position continues the same order.
TEST(SampleStream, GroupsSamplesOfSimilarLength) {
  std::vector<TokenizedSample> samples;
  for (int32_t i = 0; i < 200; ++i) {
    const int32_t length = 1 + i * 37 % 200;  // every length 1...200 once; each token says its sample's length
    samples.push_back({std::vector<int32_t>(size_t(length), length), std::vector<int32_t>(size_t(length), length)});
  }
  const data::SampleStreamOptions grouped{
      .batch_size = 1, .seq_len = 256, .length_multiple = 1, .seed = 5, .group_by_length = true, .world_size = 2};
  data::SampleStreamOptions second = grouped;
  second.rank = 1;
  data::SampleStream first_rank(samples, grouped), second_rank(samples, second);
  std::vector<int32_t> seen;
  for (int batch = 0; batch < 100; ++batch) {
    const Batch a = first_rank.next(), b = second_rank.next();
    const int32_t length_a = a.tokens.to_vector<int32_t>()[0], length_b = b.tokens.to_vector<int32_t>()[0];
    EXPECT_GE(length_a, length_b) << "batch " << batch;
    EXPECT_EQ(a.tokens.size(1), length_a);  // the batch is cut to its longer sample, rank 0's
    if (batch % 50 != 0) {
      EXPECT_LE(length_a, seen[seen.size() - 1]) << "batch " << batch;  // longest first
    }
    seen.insert(seen.end(), {length_a, length_b});
  }
  // The groups are of shuffled samples: the first is not the 100 longest.
  EXPECT_LE(*std::min_element(seen.begin(), seen.begin() + 100), 100);
  std::sort(seen.begin(), seen.end());
  for (int32_t i = 0; i < 200; ++i) EXPECT_EQ(seen[size_t(i)], i + 1);
  data::SampleStream again(samples, grouped);
  again.next();
  const nlohmann::json state = again.state();
  const auto next = again.next().tokens.to_vector<int32_t>();
  data::SampleStream resumed(samples, grouped);
  resumed.restore(state);
  EXPECT_EQ(resumed.next().tokens.to_vector<int32_t>(), next);
}

}  // namespace
}  // namespace hone::test
