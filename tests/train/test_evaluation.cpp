// Multiple-choice scoring against log-probabilities computed from the logits.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "data/tokenizers/assets.hpp"
#include "hone/train/evaluation.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

TEST(MultipleChoice, ScoresAreTheLogProbabilitiesOfTheEndings) {
  auto tokenizer = load_tokenizer(asset_path("tokenizers/gpt2"));
  ModelConfig c = model_preset("llama_tiny");
  c.vocab_size = tokenizer->vocab_size();
  c.init_std = 0.1;
  Transformer model(c, DType::f64);
  model.init_weights(4);
  const MultipleChoiceItem item{"The cat sat on the", {" mat.", " moon, quietly.", " dog"}, 0};
  const std::vector<double> ll = ending_log_likelihoods(model, *tokenizer, item);
  ASSERT_EQ(ll.size(), 3u);
  const auto context = tokenizer->encode(item.context);
  for (size_t e = 0; e < 3; ++e) {
    std::vector<int32_t> all = context;
    const auto ending = tokenizer->encode(item.endings[e]);
    all.insert(all.end(), ending.begin(), ending.end());
    model.forward(Tensor::from(all, {1, int64_t(all.size())}));
    const auto logits = model.logits().to_vector<double>();
    const size_t V = size_t(c.vocab_size);
    double expected = 0;
    for (size_t t = context.size(); t < all.size(); ++t) {
      const double* row = logits.data() + (t - 1) * V;
      double max = *std::max_element(row, row + V), sum = 0;
      for (size_t j = 0; j < V; ++j) sum += std::exp(row[j] - max);
      expected += row[all[t]] - max - std::log(sum);
    }
    EXPECT_NEAR(ll[e], expected, 1e-9) << item.endings[e];
  }
  // Accuracy counts the argmax; normalised accuracy divides by the ending's bytes.
  std::vector<MultipleChoiceItem> items = {item, item};
  const size_t best = size_t(std::max_element(ll.begin(), ll.end()) - ll.begin());
  items[0].label = int64_t(best);
  items[1].label = int64_t((best + 1) % 3);
  const MultipleChoiceResult r = evaluate_multiple_choice(model, *tokenizer, items);
  EXPECT_EQ(r.items, 2);
  EXPECT_DOUBLE_EQ(r.accuracy, 0.5);
}

// As lm-evaluation-harness pairs them: one space between context and ending
// unless the seam has one, and the ending's tokens taken from the whole text.
TEST(MultipleChoice, EndingsFollowTheContextAfterOneSpace) {
  auto tokenizer = load_tokenizer(asset_path("tokenizers/gpt2"));
  ModelConfig c = model_preset("llama_tiny");
  c.vocab_size = tokenizer->vocab_size();
  c.init_std = 0.1;
  Transformer model(c, DType::f64);
  model.init_weights(4);
  const auto scores = [&](const std::string& context, const std::string& ending) {
    return ending_log_likelihoods(model, *tokenizer, {context, {ending, "x"}, 0})[0];
  };
  const double spaced = scores("The cat sat on the", " mat.");
  EXPECT_EQ(scores("The cat sat on the", "mat."), spaced);
  EXPECT_EQ(scores("The cat sat on the ", "mat."), spaced);
  EXPECT_NE(scores("The cat sat on the", "\nmat."), spaced);
  // An empty context is the end-of-text token, so the ending's first token counts.
  const std::vector<int32_t> mat = tokenizer->encode("mat.");
  std::vector<int32_t> row = {*tokenizer->eos_id()};
  row.insert(row.end(), mat.begin(), mat.end());
  model.forward(Tensor::from(row, {1, int64_t(row.size())}));
  const auto logits = model.logits().to_vector<double>();
  const size_t V = size_t(c.vocab_size);
  double expected = 0;
  for (size_t t = 1; t < row.size(); ++t) {
    const double* r = logits.data() + (t - 1) * V;
    double max = *std::max_element(r, r + V), sum = 0;
    for (size_t j = 0; j < V; ++j) sum += std::exp(r[j] - max);
    expected += r[row[t]] - max - std::log(sum);
  }
  EXPECT_NEAR(scores("", "mat."), expected, 1e-9);
}

TEST(MultipleChoice, ReadsHellaSwagStyleFilesAndNamesBadLines) {
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

}  // namespace
}  // namespace hone::test
