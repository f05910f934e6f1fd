// Multiple-choice scoring against log-probabilities computed from the logits.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/tokenizers/assets.hpp"
#include "hone/model/sampling.hpp"
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

  // Σ log p(row[t] | row[:t]) over t >= first (the model reads all of the row but its last token).
  double log_likelihood(const std::vector<int32_t>& row, size_t first) {
    const std::vector<int32_t> inputs(row.begin(), row.end() - 1);
    model_.forward(Tensor::from(inputs, {1, int64_t(inputs.size())}));
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
  // TruthfulQA's mc2: the first two endings true, scored by their share of the three's probability.
  MultipleChoiceItem mc2 = item;
  mc2.true_endings = 2;
  const double share = (std::exp(ll[0]) + std::exp(ll[1])) / (std::exp(ll[0]) + std::exp(ll[1]) + std::exp(ll[2]));
  EXPECT_NEAR(evaluate_multiple_choice(model_, *tokenizer_, {mc2, items[1]}).accuracy, (share + 0.0) / 2, 1e-12);
  // Items scored together in one forward pass (rows of several lengths, padded) score as one at a time.
  const std::vector<MultipleChoiceItem> mixed = {items[0], mc2, items[1]};
  const MultipleChoiceResult one_by_one = evaluate_multiple_choice(model_, *tokenizer_, mixed, 1);
  for (const int64_t batch_size : {2, 3, 8}) {
    const MultipleChoiceResult together = evaluate_multiple_choice(model_, *tokenizer_, mixed, batch_size);
    EXPECT_EQ(together.chosen, one_by_one.chosen) << batch_size;
    EXPECT_DOUBLE_EQ(together.accuracy, one_by_one.accuracy) << batch_size;
    for (size_t k = 0; k < mixed.size(); ++k) {
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_NEAR(together.log_likelihoods[k][i], one_by_one.log_likelihoods[k][i], 1e-9) << batch_size;
      }
    }
  }
}

// Winogrande's choices are contexts, each followed by the same ending.
TEST_F(MultipleChoice, ChoicesOfTheirOwnContextScoreTheSharedEnding) {
  MultipleChoiceItem item;
  item.contexts = {"The cup fell off the table because the cup", "The cup fell off the table because the table"};
  item.endings = {"was tilted."};
  const std::vector<double> ll = ending_log_likelihoods(model_, *tokenizer_, item);
  ASSERT_EQ(ll.size(), 2u);
  const auto ending = tokenizer_->encode(" was tilted.");
  for (size_t i = 0; i < 2; ++i) {
    std::vector<int32_t> row = tokenizer_->encode(item.contexts[i]);
    const size_t context = row.size();
    row.insert(row.end(), ending.begin(), ending.end());
    EXPECT_NEAR(ll[i], log_likelihood(row, context), 1e-9) << i;
  }
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
  // An empty context is BOS (GPT-2's is its end-of-text token), so the ending's
  // first token counts; the ending follows its space, as the harness's " " + ending.
  std::vector<int32_t> row = {*tokenizer_->bos_id()};
  const std::vector<int32_t> mat = tokenizer_->encode(" mat.");
  row.insert(row.end(), mat.begin(), mat.end());
  EXPECT_NEAR(scores("", "mat."), log_likelihood(row, 1), 1e-9);
  EXPECT_EQ(scores("", " mat."), scores("", "mat."));
  const std::vector<int32_t> space_alone = {*tokenizer_->bos_id(), tokenizer_->encode(" ").at(0)};
  EXPECT_NEAR(scores("", ""), log_likelihood(space_alone, 1), 1e-9);
  // An empty ending is the delimiter alone, as the harness's " " + "".
  std::vector<int32_t> spaced_row = tokenizer_->encode("The cat sat on the");
  const size_t context = spaced_row.size();
  spaced_row.push_back(tokenizer_->encode(" ").at(0));
  EXPECT_NEAR(scores("The cat sat on the", ""), log_likelihood(spaced_row, context), 1e-9);
}

// A document scored whole as the harness's loglikelihood_rolling scores it:
// 600 tokens at max_seq_len 256 are three windows, tokens 0-255 after BOS
// (GPT-2's <|endoftext|>), 256-511 after token 255, and 512-599 after the 169
// tokens before them (256 inputs).
TEST_F(MultipleChoice, DocumentsAreScoredInRollingWindows) {
  ASSERT_EQ(model_.config().max_seq_len, 256);
  std::vector<int32_t> tokens;
  std::string text;
  while (tokens.size() < 600) {
    text += " apple pie";
    tokens = tokenizer_->encode(text);
  }
  while (tokens.size() > 600) tokens.pop_back();
  text = tokenizer_->decode(tokens);
  ASSERT_EQ(tokenizer_->encode(text), tokens);
  const auto slice = [&](size_t begin, size_t end) {
    return std::vector<int32_t>(tokens.begin() + std::ptrdiff_t(begin), tokens.begin() + std::ptrdiff_t(end));
  };
  std::vector<int32_t> first = {*tokenizer_->bos_id()};
  for (const int32_t t : slice(0, 256)) first.push_back(t);
  const double expected =
      log_likelihood(first, 1) + log_likelihood(slice(255, 512), 1) + log_likelihood(slice(343, 600), 169);
  const std::vector<Document> documents = {{.text = text, .words = 100, .bytes = 400, .where = "w.jsonl:1"},
                                           {.text = " pie", .words = 2, .bytes = 4, .where = "w.jsonl:2"}};
  std::vector<int32_t> pie = {*tokenizer_->bos_id()};
  for (const int32_t t : tokenizer_->encode(" pie")) pie.push_back(t);
  for (const int64_t batch_size : {1, 2, 4}) {
    const DocumentResult r = evaluate_documents(model_, *tokenizer_, documents, batch_size);
    ASSERT_EQ(r.log_likelihoods.size(), 2u);
    EXPECT_NEAR(r.log_likelihoods[0], expected, 1e-9) << batch_size;
    EXPECT_NEAR(r.log_likelihoods[1], log_likelihood(pie, 1), 1e-9) << batch_size;
    EXPECT_EQ(r.tokens, (std::vector<int64_t>{600, int64_t(pie.size()) - 1}));
    const double total = r.log_likelihoods[0] + r.log_likelihoods[1];
    EXPECT_NEAR(r.word_perplexity, std::exp(-total / 102), 1e-9 * r.word_perplexity);
    EXPECT_NEAR(r.byte_perplexity, std::exp(-total / 404), 1e-9 * r.byte_perplexity);
    EXPECT_NEAR(r.bits_per_byte, -total / 404 / std::log(2.0), 1e-12);
  }
}

// A pair longer than max_seq_len keeps its last max_seq_len + 1 tokens, all but
// the last read by the model, as the harness's
// (context + continuation)[-(max_length + 1):][:-1].
TEST_F(MultipleChoice, ALongPairKeepsTheLastMaxSeqLenTokensAsInputs) {
  const int64_t max_seq_len = model_.config().max_seq_len;
  std::string context;
  for (int64_t i = 0; i < max_seq_len; ++i) context += " apple";
  const MultipleChoiceItem item{context, {" pie and cake", " tree"}, 0, 0, {}, "long.jsonl:1"};
  const std::vector<double> ll = ending_log_likelihoods(model_, *tokenizer_, item);
  for (size_t e = 0; e < 2; ++e) {
    std::vector<int32_t> all = tokenizer_->encode(context + item.endings[e]);
    const size_t ending = tokenizer_->encode(item.endings[e]).size();
    all.erase(all.begin(), all.end() - (max_seq_len + 1));
    EXPECT_NEAR(ll[e], log_likelihood(all, all.size() - ending), 1e-9) << item.endings[e];
  }
  // An ending that does not fit is named with its item.
  std::string huge;
  for (int64_t i = 0; i <= max_seq_len; ++i) huge += " pear";
  EXPECT_EQ(error_of([&] { ending_log_likelihoods(model_, *tokenizer_, {"x", {huge, "y"}, 0, 0, {}, "t.jsonl:3"}); }),
            fmt::format("t.jsonl:3: an ending of {} tokens does not fit max_seq_len {}", max_seq_len + 1,
                        max_seq_len));
}

TEST(MultipleChoiceFile, ReadsHellaSwagStyleFilesAndNamesBadLines) {
  const std::string path = testing::TempDir() + "hone_mc.jsonl";
  std::ofstream(path) << R"({"ctx": "a", "endings": ["b", "c"], "label": "1"})" << "\n"
                      << R"({"context": "x", "choices": ["y", "z", "w"], "label": 0})" << "\n";
  const EvalTask task = read_eval_task(path);
  EXPECT_EQ(task.layout, TaskLayout::plain);
  const auto& items = task.items;
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].label, 1);
  EXPECT_EQ(items[1].endings.size(), 3u);
  std::ofstream(path) << R"({"ctx": "a", "endings": ["b", "c"], "label": 5})" << "\n";
  EXPECT_NE(error_of([&] { read_eval_task(path); }).find(":1: label 5 is not an ending index"), std::string::npos);
  for (const char* label : {R"("A")", R"("1x")", "1.5", "null"}) {
    std::ofstream(path) << R"({"ctx": "a", "endings": ["b", "c"], "label": )" << label << "}\n";
    EXPECT_NE(error_of([&] { read_eval_task(path); }).find(":1: 'label' must be an integer"), std::string::npos)
        << label;
  }
  std::filesystem::remove(path);
}

// Records of each task's own layout become the prompts and choices
// lm-evaluation-harness's task of that name builds (LLM Foundry's for its files).
TEST(MultipleChoiceFile, ReadsEachTasksLayoutAsLmEvaluationHarnessPromptsIt) {
  const std::string path = testing::TempDir() + "hone_layouts.jsonl";
  const auto read = [&](const std::string& line, std::string_view layout = "auto") {
    std::ofstream(path) << line << "\n";
    return read_eval_task(path, layout);
  };
  // HellaSwag: activity label, ctx_a, ctx_b capitalized (the rest lower-cased), WikiHow's brackets cleaned.
  EvalTask t = read(
      R"({"activity_label": "Personal Care", "ctx_a": "[header] How to dye hair [title] Buy the dye.", )"
      R"("ctx_b": "[step] Pick a COLOR", "ctx": "unused", "endings": ["You can [substeps] mix it.", "  Rinse  well. "], )"
      R"("label": "1"})");
  EXPECT_EQ(t.layout, TaskLayout::hellaswag);
  EXPECT_EQ(t.items[0].context, "Personal Care: How to dye hair. Buy the dye. pick a color");
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{"You can mix it.", "Rinse well."}));
  EXPECT_EQ(t.items[0].label, 1);
  // Capitalized as Python's str.capitalize() does, beyond ASCII too.
  EXPECT_EQ(read(R"({"activity_label": "Cooking", "ctx_a": "A chef.", "ctx_b": "\u00e9mile ORDERS \u00c0 LA CARTE", )"
                 R"("endings": ["x", "y"], "label": 0})")
                .items[0]
                .context,
            "Cooking: A chef. \u00c9mile orders \u00e0 la carte");
  // The same record read as plain takes ctx as it is.
  EXPECT_EQ(read(R"({"activity_label": "a", "ctx_a": "b", "ctx_b": "c", "ctx": "d", "endings": ["e", "f"], "label": 0})",
                 "plain")
                .items[0]
                .context,
            "d");
  t = read(R"({"id": "x", "question": "Which is a gas?", "choices": {"text": ["ice", "steam"], "label": ["A", "B"]}, )"
           R"("answerKey": "B"})");
  EXPECT_EQ(t.layout, TaskLayout::arc);
  EXPECT_EQ(t.items[0].context, "Question: Which is a gas?\nAnswer:");
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{"ice", "steam"}));
  EXPECT_EQ(t.items[0].label, 1);
  // The harness's task names for a layout (arc_challenge: arc).
  EXPECT_EQ(read(R"({"question": "q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "A"})",
                 "arc_challenge")
                .layout,
            TaskLayout::arc);
  t = read(R"({"goal": "Open a jar", "sol1": "twist the lid", "sol2": "hit it", "label": 0})");
  EXPECT_EQ(t.layout, TaskLayout::piqa);
  EXPECT_EQ(t.items[0].context, "Question: Open a jar\nAnswer:");
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{"twist the lid", "hit it"}));
  t = read(R"({"question": " 2+2? ", "subject": "elementary_mathematics", "choices": ["3", "4", "5", "6"], "answer": 1})");
  EXPECT_EQ(t.layout, TaskLayout::mmlu);
  EXPECT_EQ(t.items[0].context,
            "The following are multiple choice questions (with answers) about elementary mathematics.\n\n2+2?\nA. 3\nB. "
            "4\nC. 5\nD. 6\nAnswer:");
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{"A", "B", "C", "D"}));
  EXPECT_EQ(t.items[0].label, 1);
  // TruthfulQA (truthful_qa's multiple_choice): the harness's six-question prompt; mc2 unless mc1 is asked for.
  const std::string truthful = R"({"question": "Is the sky green?", )"
                               R"("mc1_targets": {"choices": ["No.", "Yes.", "Often."], "labels": [1, 0, 0]}, )"
                               R"("mc2_targets": {"choices": ["No.", "Not usually.", "Yes."], "labels": [1, 1, 0]}})";
  t = read(truthful);
  EXPECT_EQ(t.layout, TaskLayout::truthfulqa_mc2);
  EXPECT_TRUE(t.items[0].context.starts_with("Q: What is human life expectancy in the United States?\nA: Human "));
  EXPECT_TRUE(t.items[0].context.ends_with("Barcelona, Spain.\n\nQ: Is the sky green?\nA:"));
  EXPECT_EQ(t.items[0].context.size(), 598u);  // as PyYAML renders the harness's truthfulqa_mc1.yaml
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{"No.", "Not usually.", "Yes."}));
  EXPECT_EQ(t.items[0].true_endings, 2);
  t = read(truthful, "truthfulqa_mc1");
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{"No.", "Yes.", "Often."}));
  EXPECT_EQ(t.items[0].label, 0);
  EXPECT_EQ(t.items[0].true_endings, 0);
  // Winogrande: the sentence up to its blank with each option, then the same rest.
  t = read(R"({"sentence": "The cup fell off the table because _ was tilted.", "option1": "the cup", )"
           R"("option2": "the table", "answer": "2"})");
  EXPECT_EQ(t.layout, TaskLayout::winogrande);
  EXPECT_EQ(t.items[0].contexts,
            (std::vector<std::string>{"The cup fell off the table because the cup",
                                      "The cup fell off the table because the table"}));
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{"was tilted."}));
  EXPECT_EQ(t.items[0].label, 1);
  EXPECT_EQ(t.items[0].choices(), 2u);
  EXPECT_FALSE(reports_accuracy_norm(t.layout));
  EXPECT_NE(error_of([&] { read(R"({"sentence": "a _ b", "option1": "x", "option2": "y", "answer": ""})"); })
                .find(":1: answer '' is not 1 or 2"),
            std::string::npos);
  // OpenBookQA: the question stem alone; the key's leading spaces stripped.
  t = read(R"({"question_stem": "Ice is", "choices": {"text": ["hot", "cold"], "label": ["A", "B"]}, )"
           R"("answerKey": " B"})");
  EXPECT_EQ(t.layout, TaskLayout::openbookqa);
  EXPECT_EQ(t.items[0].context, "Ice is");
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{"hot", "cold"}));
  EXPECT_EQ(t.items[0].label, 1);
  EXPECT_TRUE(reports_accuracy_norm(t.layout));
  // BoolQ (super_glue's label, or google/boolq's answer): no or yes after the passage and question.
  t = read(R"({"passage": "Water is wet.", "question": "is water wet", "label": 1, "idx": 0})");
  EXPECT_EQ(t.layout, TaskLayout::boolq);
  EXPECT_EQ(t.items[0].context, "Water is wet.\nQuestion: is water wet?\nAnswer:");
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{"no", "yes"}));
  EXPECT_EQ(t.items[0].label, 1);
  EXPECT_FALSE(reports_accuracy_norm(t.layout));
  EXPECT_EQ(read(R"({"passage": "p", "question": "q", "answer": false})").items[0].label, 0);
  // Social IQa: labels "1" to "3".
  t = read(R"({"context": "Kai fed the cat.", "question": "Why?", "answerA": "hungry cat", "answerB": "to sleep", )"
           R"("answerC": "no reason", "label": "1"})");
  EXPECT_EQ(t.layout, TaskLayout::siqa);
  EXPECT_EQ(t.items[0].context, "Q: Kai fed the cat. Why?\nA:");
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{"hungry cat", "to sleep", "no reason"}));
  EXPECT_EQ(t.items[0].label, 0);
  EXPECT_NE(error_of([&] {
              read(R"({"context": "c", "question": "q", "answerA": "a", "answerB": "b", "answerC": "c", "label": "4"})");
            }).find(":1: label 4 is not an ending index"),
            std::string::npos);
  // SciQ: the support, left-stripped, then the question; the right answer is the fourth choice.
  t = read(R"({"question": "What falls?", "distractor3": "d3", "distractor1": "d1", "distractor2": "d2", )"
           R"("correct_answer": "rain", "support": "  Clouds hold water."})");
  EXPECT_EQ(t.layout, TaskLayout::sciq);
  EXPECT_EQ(t.items[0].context, "Clouds hold water.\nQuestion: What falls?\nAnswer:");
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{"d1", "d2", "d3", "rain"}));
  EXPECT_EQ(t.items[0].label, 3);
  EXPECT_TRUE(reports_accuracy_norm(t.layout));
  t = read(R"({"query": "Q: 1+1?\nA:", "choices": ["2", "3"], "gold": 0})");
  EXPECT_EQ(t.layout, TaskLayout::foundry);
  EXPECT_EQ(t.items[0].context, "Q: 1+1?\nA:");
  EXPECT_STREQ(layout_name(t.layout), "foundry");

  // Errors name the record and what is missing.
  const std::string unknown_key =
      R"({"question": "q", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "E"})";
  EXPECT_NE(error_of([&] { read(unknown_key); })
                .find(":1: answerKey 'E' is not one of choices.label"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read(R"({"ctx": "a", "endings": ["b", "c"], "label": 0})", "piqa"); })
                .find(":1: no string 'goal'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read(R"({"ctx": "a", "endings": ["b", "c"], "label": 0})", "drop"); })
                .find("unknown task layout 'drop': expected one of auto, plain, hellaswag, arc, piqa, mmlu, "
                      "truthfulqa_mc1, truthfulqa_mc2, winogrande, openbookqa, boolq, siqa, sciq, foundry, lambada, "
                      "foundry_lm, gsm8k, triviaqa"),
            std::string::npos);
  std::filesystem::remove(path);
}

// MMLU's few-shot prompt: the first examples of the question's subject in the
// dev records, answered, between the description and the question.
TEST(MultipleChoiceFile, MmluFewShotTakesTheFirstExamplesOfTheSubject) {
  const std::string dir = testing::TempDir() + "hone_mmlu_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const auto record = [](const std::string& subject, const std::string& question, int answer) {
    return nlohmann::json{{"question", question}, {"subject", subject}, {"choices", {"yes", "no"}}, {"answer", answer}}
               .dump() +
           "\n";
  };
  std::ofstream(dir + "/dev.jsonl") << record("astronomy", "Is the sun a star?", 0) << record("virology", "V1?", 1)
                                    << record("astronomy", "Is the moon a star?", 1)
                                    << record("astronomy", "Third?", 0) << record("virology", "V2?", 0);
  std::ofstream(dir + "/test.jsonl") << record("astronomy", "Is Mars a star?", 1) << record("virology", "V3?", 0);
  const EvalTask task = read_eval_task(dir + "/test.jsonl", "auto", {dir + "/dev.jsonl", 2});
  EXPECT_EQ(task.items[0].context,
            "The following are multiple choice questions (with answers) about astronomy.\n\n"
            "Is the sun a star?\nA. yes\nB. no\nAnswer: A\n\n"
            "Is the moon a star?\nA. yes\nB. no\nAnswer: B\n\n"
            "Is Mars a star?\nA. yes\nB. no\nAnswer:");
  EXPECT_EQ(task.items[1].context,
            "The following are multiple choice questions (with answers) about virology.\n\n"
            "V1?\nA. yes\nB. no\nAnswer: B\n\nV2?\nA. yes\nB. no\nAnswer: A\n\nV3?\nA. yes\nB. no\nAnswer:");
  EXPECT_EQ(task.items[0].endings, (std::vector<std::string>{"A", "B"}));
  // Too few examples of a subject is an error.
  EXPECT_NE(error_of([&] { read_eval_task(dir + "/test.jsonl", "auto", {dir + "/dev.jsonl", 3}); })
                .find("test.jsonl:2: 2 examples of subject 'virology' in " + dir + "/dev.jsonl for 3 shots"),
            std::string::npos);
  // Examples from the task's own file: the first of the subject other than the
  // item itself (its answer is not in its own prompt), as the harness drops it.
  const EvalTask own = read_eval_task(dir + "/dev.jsonl", "auto", {dir + "/dev.jsonl", 1});
  EXPECT_EQ(own.items[0].context,  // "Is the sun a star?" takes the next astronomy question
            "The following are multiple choice questions (with answers) about astronomy.\n\n"
            "Is the moon a star?\nA. yes\nB. no\nAnswer: B\n\n"
            "Is the sun a star?\nA. yes\nB. no\nAnswer:");
  EXPECT_EQ(own.items[2].context,  // "Is the moon a star?" takes the first
            "The following are multiple choice questions (with answers) about astronomy.\n\n"
            "Is the sun a star?\nA. yes\nB. no\nAnswer: A\n\n"
            "Is the moon a star?\nA. yes\nB. no\nAnswer:");
  std::filesystem::remove_all(dir);
}

// The other layouts' examples are drawn as the harness's default sampler draws
// them; the expected prompts are what Python printed for the same records:
//   r = random.Random(1234)
//   for doc in test: shots = [x for x in r.sample(train, 2) if x != doc][:2]
// each shot its question, " ", its right solution and "\n\n".
TEST(MultipleChoiceFile, OtherLayoutsDrawTheirExamplesAsTheHarness) {
  const std::string dir = testing::TempDir() + "hone_shots_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  {
    std::ofstream train(dir + "/train.jsonl"), test(dir + "/test.jsonl");
    for (int i = 0; i < 8; ++i) {
      train << nlohmann::json{{"goal", fmt::format("G{}", i)}, {"sol1", fmt::format("a{}", i)},
                              {"sol2", fmt::format("b{}", i)}, {"label", i % 2}}
                   .dump()
            << "\n";
    }
    for (int i = 0; i < 3; ++i) test << nlohmann::json{{"goal", fmt::format("T{}", i)}, {"sol1", "s"}, {"sol2", "t"}, {"label", 0}}.dump() << "\n";
  }
  const EvalTask piqa = read_eval_task(dir + "/test.jsonl", "auto", {dir + "/train.jsonl", 2});
  EXPECT_EQ(piqa.items[0].context, "Question: G7\nAnswer: b7\n\nQuestion: G0\nAnswer: a0\n\nQuestion: T0\nAnswer:");
  EXPECT_EQ(piqa.items[1].context, "Question: G0\nAnswer: a0\n\nQuestion: G7\nAnswer: b7\n\nQuestion: T1\nAnswer:");
  EXPECT_EQ(piqa.items[2].context, "Question: G0\nAnswer: a0\n\nQuestion: G5\nAnswer: b5\n\nQuestion: T2\nAnswer:");
  EXPECT_EQ(piqa.items[2].endings, (std::vector<std::string>{"s", "t"}));

  // Examples from the task's own records: one more drawn, the item itself left
  // out (Random(1): item 1 drew itself first). Winogrande's example is its
  // sentence filled with the right option; each option's context gets it.
  {
    std::ofstream wino(dir + "/wino.jsonl");
    for (int i = 0; i < 4; ++i) {
      wino << nlohmann::json{{"sentence", fmt::format("S{} _ rest{}.", i, i)}, {"option1", fmt::format("x{}", i)},
                             {"option2", fmt::format("y{}", i)}, {"answer", std::to_string(1 + i % 2)}}
                  .dump()
           << "\n";
    }
  }
  const EvalTask wino =
      read_eval_task(dir + "/wino.jsonl", "auto", {.path = dir + "/wino.jsonl", .count = 1, .seed = 1});
  const char* expected_shots[] = {"S1 y1 rest1.\n\n", "S0 x0 rest0.\n\n", "S0 x0 rest0.\n\n", "S1 y1 rest1.\n\n"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(wino.items[size_t(i)].contexts,
              (std::vector<std::string>{fmt::format("{}S{} x{}", expected_shots[i], i, i),
                                        fmt::format("{}S{} y{}", expected_shots[i], i, i)}));
  }
  // Too few records, and TruthfulQA (whose prompt holds its own examples), are errors.
  EXPECT_NE(error_of([&] { read_eval_task(dir + "/wino.jsonl", "auto", {dir + "/wino.jsonl", 4}); })
                .find("wino.jsonl: 4 records for 4 shots and the item itself"),
            std::string::npos);
  std::ofstream(dir + "/truthful.jsonl")
      << R"({"question": "q", "mc1_targets": {"choices": ["a", "b"], "labels": [1, 0]}})" << "\n";
  EXPECT_NE(error_of([&] { read_eval_task(dir + "/truthful.jsonl", "auto", {dir + "/train.jsonl", 1}); })
                .find("TruthfulQA's prompt holds six answered questions of its own"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_eval_task(dir + "/test.jsonl", "auto", {"", 1}); })
                .find("few-shot examples (1) need a file of records to come from"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(MultipleChoiceFile, HellaSwagCleaningKeepsBracketsThatDoNotCloseOnTheirLine) {
  EXPECT_EQ(clean_hellaswag_text("a [b\nc] d"), "a [b\nc] d");
  EXPECT_EQ(clean_hellaswag_text("x [y"), "x [y");
  EXPECT_EQ(clean_hellaswag_text("  one [a][b]two  "), "one two");
  EXPECT_EQ(clean_hellaswag_text("a   b"), "a  b");  // Python's replace: one pass, no overlaps
}

// Hugging Face's HellaSwag, ARC and MMLU are Parquet: labels as strings,
// ARC's choices a struct of two lists, MMLU's a list; read as their JSONL are.
TEST(MultipleChoiceFile, ReadsParquetTasks) {
  const std::string fixtures = source_path("tests/data/formats/parquet/");
  const auto expected = nlohmann::json::parse(std::ifstream(fixtures + "expected.json"));
  const auto items = read_eval_task(fixtures + "hellaswag.parquet").items;
  ASSERT_EQ(items.size(), expected["tasks"].size());
  for (size_t i = 0; i < items.size(); ++i) {
    EXPECT_EQ(items[i].context, expected["tasks"][i]["ctx"].get<std::string>());
    EXPECT_EQ(items[i].endings, expected["tasks"][i]["endings"].get<std::vector<std::string>>());
    EXPECT_EQ(items[i].label, int64_t(i % 4));
  }
  const EvalTask arc = read_eval_task(fixtures + "arc.parquet");
  EXPECT_EQ(arc.layout, TaskLayout::arc);
  ASSERT_EQ(arc.items.size(), expected["arc"].size());
  for (size_t i = 0; i < arc.items.size(); ++i) {
    const auto& row = expected["arc"][i];
    EXPECT_EQ(arc.items[i].context, "Question: " + row["question"].get<std::string>() + "\nAnswer:");
    EXPECT_EQ(arc.items[i].endings, row["choices"]["text"].get<std::vector<std::string>>());
    const auto labels = row["choices"]["label"].get<std::vector<std::string>>();
    EXPECT_EQ(labels[size_t(arc.items[i].label)], row["answerKey"].get<std::string>());
  }
  const EvalTask mmlu = read_eval_task(fixtures + "mmlu.parquet");
  EXPECT_EQ(mmlu.layout, TaskLayout::mmlu);
  ASSERT_EQ(mmlu.items.size(), expected["mmlu"].size());
  EXPECT_EQ(mmlu.items[1].context,
            "The following are multiple choice questions (with answers) about high school mathematics.\n\nWhat is 1 + "
            "1?\nA. 1\nB. 2\nC. 3\nD. 4\nAnswer:");
  EXPECT_EQ(mmlu.items[1].label, 1);
  EXPECT_NE(error_of([&] { read_eval_task(fixtures + "chats.parquet"); })
                .find("chats.parquet: row 0: no string 'ctx' or 'context'"),
            std::string::npos);
}


// GSM8K: the harness's prompt and whole answer as the reference; its default
// sampler's examples (Python: r = random.Random(1234), r.sample(train, 3) for
// each of the two items).
TEST(GenerativeTaskFile, ReadsGsm8kAsTheHarnessPromptsIt) {
  const std::string dir = testing::TempDir() + "hone_gsm8k_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  {
    std::ofstream train(dir + "/train.jsonl"), test(dir + "/test.jsonl");
    for (int i = 0; i < 10; ++i) {
      train << nlohmann::json{{"question", fmt::format("Q{}?", i)},
                              {"answer", fmt::format("Half of {} is {}.\n#### {}", 2 * i, i, i)}}
                   .dump()
            << "\n";
    }
    for (int i = 0; i < 2; ++i) test << R"({"question": "T?", "answer": "#### 0"})" << "\n";
  }
  const EvalTask zero_shot = read_eval_task(dir + "/test.jsonl");
  EXPECT_EQ(zero_shot.layout, TaskLayout::gsm8k);
  EXPECT_TRUE(zero_shot.items.empty());
  ASSERT_EQ(zero_shot.generative_items.size(), 2u);
  EXPECT_EQ(zero_shot.generative_items[0].prompt, "Question: T?\nAnswer:");
  EXPECT_EQ(zero_shot.generative_items[0].references, (std::vector<std::string>{"#### 0"}));
  EXPECT_FALSE(reports_accuracy_norm(TaskLayout::gsm8k));

  const EvalTask task = read_eval_task(dir + "/test.jsonl", "gsm8k", {dir + "/train.jsonl", 3});
  EXPECT_EQ(task.generative_items[0].prompt,
            "Question: Q7?\nAnswer: Half of 14 is 7.\n#### 7\n\nQuestion: Q1?\nAnswer: Half of 2 is 1.\n#### 1\n\n"
            "Question: Q0?\nAnswer: Half of 0 is 0.\n#### 0\n\nQuestion: T?\nAnswer:");
  EXPECT_EQ(task.generative_items[1].prompt,
            "Question: Q1?\nAnswer: Half of 2 is 1.\n#### 1\n\nQuestion: Q0?\nAnswer: Half of 0 is 0.\n#### 0\n\n"
            "Question: Q9?\nAnswer: Half of 18 is 9.\n#### 9\n\nQuestion: T?\nAnswer:");
  // TriviaQA: a question mark after the question; the aliases are the references, the first the shots' answer.
  std::ofstream(dir + "/trivia.jsonl") << R"({"question": "Who sang Help", "answer": {"aliases": ["The Beatles", )"
                                          R"("Beatles"], "value": "The Beatles"}})"
                                       << "\n"
                                       << R"({"question": "Capital of France", "answer": {"aliases": ["Paris"]}})"
                                       << "\n";
  const EvalTask trivia = read_eval_task(dir + "/trivia.jsonl", "auto", {dir + "/trivia.jsonl", 1});
  EXPECT_EQ(trivia.layout, TaskLayout::triviaqa);
  EXPECT_EQ(trivia.generative_items[0].references, (std::vector<std::string>{"The Beatles", "Beatles"}));
  EXPECT_EQ(trivia.generative_items[0].prompt,
            "Question: Capital of France?\nAnswer: Paris\n\nQuestion: Who sang Help?\nAnswer:");
  EXPECT_EQ(trivia.generative_items[1].prompt,
            "Question: Who sang Help?\nAnswer: The Beatles\n\nQuestion: Capital of France?\nAnswer:");
  std::ofstream(dir + "/bad.jsonl") << R"({"question": "T?", "answer": 3})" << "\n";
  EXPECT_NE(error_of([&] { read_eval_task(dir + "/bad.jsonl", "gsm8k"); }).find("bad.jsonl:1: no string 'answer'"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(PythonRegex, FindsAndRemovesAsPythonsRe) {
  const PythonRegex either("(-?[$0-9.,]{2,})|(-?[0-9]+)", "test");
  // re.findall: a tuple of both groups per match, "" for the one that took no part.
  EXPECT_EQ(either.find_all("12 apples, 5 pears"),
            (std::vector<std::vector<std::string>>{{"12", ""}, {"", "5"}}));
  EXPECT_EQ(PythonRegex("[a-z]+", "test").find_all("ab1cd"), (std::vector<std::vector<std::string>>{{"ab"}, {"cd"}}));
  EXPECT_TRUE(PythonRegex("x", "test").find_all("abc").empty());
  // re.sub(p, "", s): (?s) lets . cross lines; $ also matches before a final newline.
  EXPECT_EQ(PythonRegex("(?s).*#### ", "test").remove_all("a\n#### 1\nb #### 2"), "2");
  EXPECT_EQ(PythonRegex(R"(\.$)", "test").remove_all("7.\n"), "7\n");
  EXPECT_EQ(PythonRegex("b*", "test").remove_all("abcb"), "ac");  // empty matches remove nothing
  EXPECT_NE(error_of([] { PythonRegex("(unclosed", "task.filter"); }).find("task.filter: invalid regular expression"),
            std::string::npos);
  // re.sub(p, r"(\1)", s); on text (a str) \s takes Unicode's spaces, on bytes ASCII's alone.
  const std::string spaced = "( a\u00a0) (b )";
  EXPECT_EQ(PythonRegex(R"(\(\s*([^\)]*?)\s*\))", "test", PythonRegex::Text::unicode).replace_all(spaced, R"((\1))"),
            "(a) (b)");
  EXPECT_EQ(PythonRegex(R"(\(\s*([^\)]*?)\s*\))", "test").replace_all(spaced, R"([\1])"), "[a\u00a0] [b]");
  EXPECT_EQ(PythonRegex("x*", "test", PythonRegex::Text::unicode).replace_all("\u00e9a", "-"), "-\u00e9-a-");
}

// The harness's wikitext_detokenizer and word count, on pages of wikitext-2's
// kind (the expectations are what Python's re and str made of them).
TEST(Wikitext, DetokenizesAndCountsWordsAsTheHarness) {
  EXPECT_EQ(wikitext_detokenized(" = Valkyria Chronicles III = \n \n Senj\u014d no Valkyria 3 : Unrecorded Chronicles "
                                 "( Japanese : \u6226\u5834 , lit . Valkyria of the Battlefield 3 ) , commonly "
                                 "referred to as Valkyria Chronicles III outside Japan , is a tactical role @-@ playing "
                                 "video game . \n"),
            " = Valkyria Chronicles III =\n\nSenj\u014d no Valkyria 3: Unrecorded Chronicles (Japanese: \u6226\u5834, "
            "lit. Valkyria of the Battlefield 3), commonly referred to as Valkyria Chronicles III outside Japan, is a "
            "tactical role-playing video game.\n");
  EXPECT_EQ(wikitext_detokenized(" = = Gameplay = = \n The game 's 1 @,@ 000 units cost $ 3 @.@ 5 million ; \" it was  "
                                 "good \" , he said ! [ 7 ] { x } ' quoted ' . It was 20 \u00b0 C . N is the number ? "
                                 "The players ' guns /' 5/ "),
            " == Gameplay ==\nThe game's 1,000 units cost $ 3.5 million; \"it was  good\", he said! [7] {x}' quoted '. "
            "It was 20\u00b0C. 1 is the number? The players' guns /'[0-9]/ ");
  EXPECT_EQ(wikitext_detokenized(" = = = = Deep = = = = \n (\u00a0spaced\u2003) "), " ==== Deep ====\n(spaced) ");
  // len(re.split(r"\s+", page)): white space at either end counts a word more.
  EXPECT_EQ(python_split_words(" = Title = \n foo bar\n"), 7);
  EXPECT_EQ(python_split_words("a  b\tc"), 3);
  EXPECT_EQ(python_split_words(""), 1);
  EXPECT_EQ(python_split_words("x\u00a0y\u2003z"), 3);
  EXPECT_EQ(python_split_words("a\x1c" "b"), 2);
}

// The harness's gsm8k and triviaqa scoring, against what Python's re and
// string made of the same completions (tests/reference/eval/generate_answer_scores.py).
TEST(AnswerScorer, MatchesTheHarnessScoresComputedInPython) {
  std::ifstream in(source_path("tests/reference/eval/answer_scores.json"));
  const nlohmann::json tasks = nlohmann::json::parse(in);
  for (const auto& [name, layout] : {std::pair{"gsm8k", TaskLayout::gsm8k}, {"triviaqa", TaskLayout::triviaqa}}) {
    const AnswerScorer scorer(answer_scoring(layout));
    ASSERT_GE(tasks[name].size(), 6u) << name;
    for (const nlohmann::json& c : tasks[name]) {
      const AnswerScorer::Score score =
          scorer.score(c["completion"].get<std::string>(), c["references"].get<std::vector<std::string>>());
      EXPECT_EQ(score.answers, c["answers"].get<std::vector<std::string>>()) << name << ": " << c["completion"];
      EXPECT_EQ(score.matches, c["matches"].get<std::vector<bool>>()) << name << ": " << c["completion"];
    }
  }
}

// generate_until is greedy generation cut before the first stop string
// (GenerationOptions.finished stops each sequence there).
TEST_F(MultipleChoice, GenerateUntilStopsAtTheFirstStopString) {
  const std::vector<std::string> prompts = {"The cat sat on the", "Question: 2+2?\nAnswer:", "Hello"};
  GenerationOptions greedy;
  greedy.max_new_tokens = 12;
  greedy.sampling.temperature = 0;
  std::vector<std::string> full;
  for (const std::string& p : prompts) {
    full.push_back(tokenizer_->decode(generate(model_, {tokenizer_->encode(p)}, greedy).completions[0]));
  }
  greedy.finished = [](size_t, const std::vector<int32_t>& completion) { return completion.size() == 3; };
  EXPECT_EQ(generate(model_, {{1, 2}, {3}}, greedy).completions[1].size(), 3u);
  // No stop string: the whole greedy completion, batched two at a time.
  int64_t last_progress = -1;
  EXPECT_EQ(generate_until(model_, *tokenizer_, prompts, {.until = {}, .max_new_tokens = 12, .batch_size = 2},
                           [&](int64_t done) { last_progress = done; }),
            full);
  EXPECT_EQ(last_progress, 2);
  // A stop string taken from the middle of the first completion cuts it there.
  const std::string stop = full[0].substr(full[0].size() / 2, 3);
  const std::vector<std::string> cut =
      generate_until(model_, *tokenizer_, prompts, {.until = {"never seen", stop}, .max_new_tokens = 12});
  EXPECT_EQ(cut[0], full[0].substr(0, full[0].find(stop)));
  for (size_t i = 1; i < prompts.size(); ++i) EXPECT_EQ(cut[i], full[i].substr(0, full[i].find(stop)));
  EXPECT_NE(error_of([&] { generate_until(model_, *tokenizer_, prompts, {.max_new_tokens = 256}); })
                .find("max_new_tokens 256 leaves no room for a prompt in the model's max_seq_len 256"),
            std::string::npos);
}


// LAMBADA as the harness splits it, and LLM Foundry's language-modeling files.
TEST(ContinuationTaskFile, ReadsLambadaAndFoundryLanguageModeling) {
  const std::string path = testing::TempDir() + "hone_lambada.jsonl";
  std::ofstream(path) << R"({"text": "He looked at the  old map"})" << "\n" << R"({"text": "Alone"})" << "\n";
  EvalTask t = read_eval_task(path);
  EXPECT_EQ(t.layout, TaskLayout::lambada);
  EXPECT_TRUE(scores_continuation(t.layout));
  EXPECT_EQ(t.items[0].context, "He looked at the  old");  // Python's split(' '): the double space stays
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{" map"}));
  EXPECT_EQ(t.items[1].context, "");
  EXPECT_EQ(t.items[1].endings, (std::vector<std::string>{" Alone"}));
  EXPECT_NE(error_of([&] { read_eval_task(path, "auto", {path, 1}); }).find("LAMBADA is scored zero-shot"),
            std::string::npos);
  std::ofstream(path) << R"({"context": "The sky is", "continuation": " blue"})" << "\n";
  t = read_eval_task(path);
  EXPECT_EQ(t.layout, TaskLayout::foundry_lm);
  EXPECT_EQ(t.items[0].context, "The sky is");
  EXPECT_EQ(t.items[0].endings, (std::vector<std::string>{" blue"}));
  EXPECT_FALSE(scores_continuation(TaskLayout::foundry));
  std::filesystem::remove(path);
}

// A continuation's log-likelihood and greediness, against the logits: the
// model's own most likely next token as a continuation is greedy.
TEST_F(MultipleChoice, ContinuationsAreScoredByLikelihoodAndGreediness) {
  const std::string context = "The cat sat on the";
  const std::vector<int32_t> context_ids = tokenizer_->encode(context);
  model_.forward(Tensor::from(context_ids, {1, int64_t(context_ids.size())}));
  const auto logits = model_.logits().to_vector<double>();
  const auto V = size_t(model_.config().vocab_size);
  const double* last = logits.data() + (context_ids.size() - 1) * V;
  const auto best = int32_t(std::max_element(last, last + V) - last);
  const std::vector<int32_t> best_ids = {best};
  const std::string greedy_word = tokenizer_->decode(best_ids);
  std::vector<int32_t> expected_ids = context_ids;
  expected_ids.push_back(best);
  ASSERT_EQ(tokenizer_->encode(context + greedy_word), expected_ids) << "pick a context whose best token re-encodes";

  const std::vector<MultipleChoiceItem> items = {{context, {greedy_word}, 0}, {context, {" moon, quietly."}, 0}};
  const ContinuationResult r = evaluate_continuations(model_, *tokenizer_, items);
  ASSERT_EQ(r.items, 2);
  EXPECT_TRUE(r.greedy[0]);
  EXPECT_FALSE(r.greedy[1]);
  EXPECT_NEAR(r.log_likelihoods[0], log_likelihood(expected_ids, context_ids.size()), 1e-9);
  std::vector<int32_t> moon = tokenizer_->encode(context + " moon, quietly.");
  EXPECT_NEAR(r.log_likelihoods[1], log_likelihood(moon, context_ids.size()), 1e-9);
  EXPECT_DOUBLE_EQ(r.accuracy, 0.5);
  EXPECT_NEAR(r.perplexity, std::exp(-(r.log_likelihoods[0] + r.log_likelihoods[1]) / 2), 1e-12);
  // Both in one forward pass: the same scores.
  const ContinuationResult together = evaluate_continuations(model_, *tokenizer_, items, 2);
  EXPECT_EQ(together.greedy, r.greedy);
  for (size_t k = 0; k < 2; ++k) EXPECT_NEAR(together.log_likelihoods[k], r.log_likelihoods[k], 1e-9);
}

}  // namespace
}  // namespace hone::test
