// Multiple-choice scoring against log-probabilities computed from the logits.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/tokenizers/assets.hpp"
#include "hone/train/evaluation.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

// A tiny f64 Llama over GPT-2's vocabulary, and log-probabilities computed
// directly from its logits.
class MultipleChoice : public ::testing::Test {
 protected:
  static ModelConfig config(int64_t vocab_size) {
    ModelConfig c = model_preset("llama_tiny");
    c.vocab_size = vocab_size;
    c.init_std = 0.1;
    return c;
  }

  // Σ log p(row[t] | row[:t]) over t >= first.
  double log_likelihood(const std::vector<int32_t>& row, size_t first) {
    model_.forward(Tensor::from(row, {1, int64_t(row.size())}));
    const auto logits = model_.logits().to_vector<double>();
    const size_t V = size_t(model_.config().vocab_size);
    double sum_log_p = 0;
    for (size_t t = first; t < row.size(); ++t) {
      const double* r = logits.data() + (t - 1) * V;
      double max = *std::max_element(r, r + V), sum = 0;
      for (size_t j = 0; j < V; ++j) sum += std::exp(r[j] - max);
      sum_log_p += r[row[t]] - max - std::log(sum);
    }
    return sum_log_p;
  }

  void SetUp() override { model_.init_weights(4); }

  std::unique_ptr<Tokenizer> tokenizer_ = load_tokenizer(asset_path("tokenizers/gpt2"));
  Transformer model_{config(tokenizer_->vocab_size()), DType::f64};
};

TEST_F(MultipleChoice, ScoresAreTheLogProbabilitiesOfTheEndings) {
  const MultipleChoiceItem item{"The cat sat on the", {" mat.", " moon, quietly.", " dog"}, 0};
  const std::vector<double> ll = ending_log_likelihoods(model_, *tokenizer_, item);
  ASSERT_EQ(ll.size(), 3u);
  const auto context = tokenizer_->encode(item.context);
  for (size_t e = 0; e < 3; ++e) {
    std::vector<int32_t> all = context;
    const auto ending = tokenizer_->encode(item.endings[e]);
    all.insert(all.end(), ending.begin(), ending.end());
    EXPECT_NEAR(ll[e], log_likelihood(all, context.size()), 1e-9) << item.endings[e];
  }
  // Accuracy counts the argmax; normalised accuracy divides by the ending's bytes.
  std::vector<MultipleChoiceItem> items = {item, item};
  const size_t best = size_t(std::max_element(ll.begin(), ll.end()) - ll.begin());
  items[0].label = int64_t(best);
  items[1].label = int64_t((best + 1) % 3);
  const MultipleChoiceResult r = evaluate_multiple_choice(model_, *tokenizer_, items);
  EXPECT_EQ(r.items, 2);
  EXPECT_DOUBLE_EQ(r.accuracy, 0.5);
}

// As lm-evaluation-harness pairs them: one space between context and ending
// unless the seam has one, and the ending's tokens taken from the whole text.
TEST_F(MultipleChoice, EndingsFollowTheContextAfterOneSpace) {
  const auto scores = [&](const std::string& context, const std::string& ending) {
    return ending_log_likelihoods(model_, *tokenizer_, {context, {ending, "x"}, 0})[0];
  };
  const double spaced = scores("The cat sat on the", " mat.");
  EXPECT_EQ(scores("The cat sat on the", "mat."), spaced);
  EXPECT_EQ(scores("The cat sat on the ", "mat."), spaced);
  EXPECT_NE(scores("The cat sat on the", "\nmat."), spaced);
  // An empty context is the end-of-text token, so the ending's first token counts.
  std::vector<int32_t> row = {*tokenizer_->eos_id()};
  const std::vector<int32_t> mat = tokenizer_->encode("mat.");
  row.insert(row.end(), mat.begin(), mat.end());
  EXPECT_NEAR(scores("", "mat."), log_likelihood(row, 1), 1e-9);
}

TEST(MultipleChoiceFile, ReadsHellaSwagStyleFilesAndNamesBadLines) {
  const std::string path = testing::TempDir() + "hone_mc.jsonl";
  std::ofstream(path) << R"({"ctx": "a", "endings": ["b", "c"], "label": "1"})" << "\n"
                      << R"({"context": "x", "choices": ["y", "z", "w"], "label": 0})" << "\n";
  const auto items = read_multiple_choice(path);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].label, 1);
  EXPECT_EQ(items[1].endings.size(), 3u);
  std::ofstream(path) << R"({"ctx": "a", "endings": ["b", "c"], "label": 5})" << "\n";
  try {
    read_multiple_choice(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(":1: label 5"), std::string::npos) << e.what();
  }
  for (const char* label : {R"("A")", R"("1x")", "1.5", "null"}) {
    std::ofstream(path) << R"({"ctx": "a", "endings": ["b", "c"], "label": )" << label << "}\n";
    try {
      read_multiple_choice(path);
      FAIL() << label;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(":1: 'label' must be an integer"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(path);
}

// Hugging Face's HellaSwag is Parquet, labels as strings: read as its JSONL is.
TEST(MultipleChoiceFile, ReadsParquetTasks) {
  const std::string fixtures = source_path("tests/data/formats/parquet/");
  const auto expected = nlohmann::json::parse(std::ifstream(fixtures + "expected.json"))["tasks"];
  const auto items = read_multiple_choice(fixtures + "hellaswag.parquet");
  ASSERT_EQ(items.size(), expected.size());
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(items[i].context, expected[i]["ctx"].get<std::string>());
    EXPECT_EQ(items[i].endings, expected[i]["endings"].get<std::vector<std::string>>());
    EXPECT_EQ(items[i].label, int64_t(i % 4));
  }
  EXPECT_NE(error_of([&] { read_multiple_choice(fixtures + "chats.parquet"); })
                .find("chats.parquet: row 0: no string 'ctx' or 'context'"),
            std::string::npos);
}

}  // namespace
}  // namespace hone::test
