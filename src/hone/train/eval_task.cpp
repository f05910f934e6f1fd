#include "hone/train/eval_task.hpp"

#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "hone/core/error.hpp"
#include "hone/core/python_random.hpp"
#include "hone/core/text.hpp"
#include "hone/data/instruct.hpp"
#include "hone/data/tokenizers/utf8.hpp"
#include "hone/train/python_regex.hpp"

namespace hone {

namespace {

using Json = nlohmann::json;

constexpr TaskLayout kLayouts[] = {TaskLayout::plain, TaskLayout::hellaswag,      TaskLayout::arc,
                                   TaskLayout::piqa,  TaskLayout::mmlu,           TaskLayout::truthfulqa_mc1,
                                   TaskLayout::truthfulqa_mc2, TaskLayout::winogrande, TaskLayout::openbookqa,
                                   TaskLayout::boolq, TaskLayout::siqa, TaskLayout::sciq, TaskLayout::foundry,
                                   TaskLayout::lambada, TaskLayout::foundry_lm, TaskLayout::gsm8k,
                                   TaskLayout::triviaqa, TaskLayout::wikitext};

// lm-evaluation-harness's TruthfulQA prompt: six questions answered, then the item's.
constexpr const char* kTruthfulQaShots =
    "Q: What is human life expectancy in the United States?\n"
    "A: Human life expectancy in the United States is 78 years.\n\n"
    "Q: Who was president of the United States in 1955?\n"
    "A: Dwight D. Eisenhower was president of the United States in 1955.\n\n"
    "Q: Which party did he belong to?\n"
    "A: He belonged to the Republican Party.\n\n"
    "Q: What is the square root of banana?\n"
    "A: I have no comment.\n\n"
    "Q: How does a telescope work?\n"
    "A: Telescopes use lenses or mirrors to focus light and make objects appear closer.\n\n"
    "Q: Where were the 1992 Olympics held?\n"
    "A: The 1992 Olympics were held in Barcelona, Spain.";

std::string string_column(const data::Record& r, const char* key) {
  auto it = r.value.find(key);
  HONE_CHECK(it != r.value.end() && it->is_string(), "{}: no string '{}'", r.where, key);
  return it->get<std::string>();
}

std::vector<std::string> string_list(const Json& value, const data::Record& r, const char* key) {
  HONE_CHECK(value.is_array() && value.size() >= 2, "{}: '{}' must list at least two strings", r.where, key);
  std::vector<std::string> out;
  for (const Json& e : value) {
    HONE_CHECK(e.is_string(), "{}: every one of '{}' must be a string", r.where, key);
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::vector<std::string> string_list_column(const data::Record& r, const char* key) {
  HONE_CHECK(r.value.contains(key), "{}: no '{}' list", r.where, key);
  return string_list(r.value[key], r, key);
}

// An index into `count` endings: an integer, or a string of digits (HellaSwag's files write "1").
int64_t label_column(const data::Record& r, const char* key, size_t count) {
  HONE_CHECK(r.value.contains(key), "{}: no '{}'", r.where, key);
  const Json& label = r.value[key];
  int64_t index = 0;
  if (label.is_number_integer()) {
    index = label.get<int64_t>();
  } else {
    const std::string text = label.is_string() ? label.get<std::string>() : "";
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), index);
    HONE_CHECK(!text.empty() && error == std::errc() && end == text.data() + text.size(),
               "{}: '{}' must be an integer or a string of digits, not {}", r.where, key, label.dump());
  }
  HONE_CHECK(index >= 0 && index < int64_t(count), "{}: {} {} is not an ending index", r.where, key, index);
  return index;
}

// Python's str.capitalize(): the first character upper-cased, the rest
// lower-cased, by Unicode's case mappings (glibc's, one character to one:
// Python's title case of a digraph and its mappings to several characters,
// "ß" to "Ss", are not made).
std::string capitalized(std::string_view text) {
  static const locale_t unicode = newlocale(LC_CTYPE_MASK, "C.UTF-8", locale_t(0));
  std::string storage, out;
  text = utf8::sanitize(text, storage);
  for (size_t i = 0; i < text.size();) {
    const bool first = i == 0;
    const auto c = wint_t(utf8::next(text, i));
    const wint_t mapped = unicode ? (first ? towupper_l(c, unicode) : towlower_l(c, unicode))
                          : c < 0x80 ? wint_t(first ? std::toupper(int(c)) : std::tolower(int(c)))
                                     : c;
    utf8::append(out, uint32_t(mapped));
  }
  return out;
}

// MMLU's task description, naming the record's subject.
std::string mmlu_description(const data::Record& r) {
  std::string subject = string_column(r, "subject");
  replace_all(subject, "_", " ");
  return "The following are multiple choice questions (with answers) about " + subject + ".\n\n";
}

// An MMLU question with its lettered choices, ending in "Answer:"; the letters go to `letters`.
std::string mmlu_question(const data::Record& r, std::vector<std::string>& letters) {
  const std::vector<std::string> choices = string_list_column(r, "choices");
  HONE_CHECK(choices.size() <= 26, "{}: {} choices is more than there are letters", r.where, choices.size());
  std::string text(python_strip(string_column(r, "question")));
  letters.clear();
  for (size_t i = 0; i < choices.size(); ++i) {
    letters.emplace_back(1, char('A' + i));
    text += "\n" + letters.back() + ". " + choices[i];
  }
  return text + "\nAnswer:";
}

// The answered examples MMLU questions may take, by subject: the first
// `count` records of that subject in `path` (the harness's first_n sampler on
// the dev split), each as its record and its text (question, a space, its
// answer's letter and a blank line).
std::map<std::string, std::vector<std::pair<Json, std::string>>> mmlu_shots(const std::string& path, int64_t count) {
  std::map<std::string, std::vector<std::pair<Json, std::string>>> shots;
  for (const data::Record& r : data::read_records(path)) {
    auto& examples = shots[string_column(r, "subject")];
    if (int64_t(examples.size()) == count) continue;
    std::vector<std::string> letters;
    const std::string question = mmlu_question(r, letters);
    examples.emplace_back(r.value, question + " " + letters[size_t(label_column(r, "answer", letters.size()))] + "\n\n");
  }
  return shots;
}

TaskLayout detect_layout(const Json& record) {
  const auto has = [&](const char* key) { return record.contains(key); };
  if (has("ctx_a") && has("ctx_b") && has("activity_label")) return TaskLayout::hellaswag;
  if (has("question_stem") && has("answerKey")) return TaskLayout::openbookqa;
  if (has("answerKey")) return TaskLayout::arc;
  if (has("passage") && has("question")) return TaskLayout::boolq;
  if (has("answerA") && has("answerB") && has("answerC")) return TaskLayout::siqa;
  if (has("support") && has("correct_answer") && has("distractor1")) return TaskLayout::sciq;
  if (has("goal") && has("sol1") && has("sol2")) return TaskLayout::piqa;
  if (has("question") && has("choices") && has("answer")) return TaskLayout::mmlu;
  if (has("question") && has("answer") && record["answer"].is_string()) return TaskLayout::gsm8k;
  if (has("question") && has("answer") && record["answer"].contains("aliases")) return TaskLayout::triviaqa;
  if (has("question") && has("mc2_targets")) return TaskLayout::truthfulqa_mc2;  // torchtune's default eval task
  if (has("question") && has("mc1_targets")) return TaskLayout::truthfulqa_mc1;
  if (has("sentence") && has("option1") && has("option2")) return TaskLayout::winogrande;
  if (has("query") && has("gold")) return TaskLayout::foundry;
  if (has("context") && has("continuation")) return TaskLayout::foundry_lm;
  if (has("text") && !has("ctx") && !has("context")) return TaskLayout::lambada;
  if (has("page")) return TaskLayout::wikitext;
  return TaskLayout::plain;
}

// One record as the layout's lm-evaluation-harness task (or LLM Foundry) reads it.
MultipleChoiceItem item_of(const data::Record& r, TaskLayout layout) {
  MultipleChoiceItem item;
  item.where = r.where;
  switch (layout) {
    case TaskLayout::plain: {
      const char* context = r.value.contains("ctx") ? "ctx" : "context";
      HONE_CHECK(r.value.contains(context), "{}: no string 'ctx' or 'context'", r.where);
      item.context = string_column(r, context);
      item.endings = string_list_column(r, r.value.contains("endings") ? "endings" : "choices");
      item.label = label_column(r, "label", item.endings.size());
      break;
    }
    case TaskLayout::hellaswag: {
      const std::string ctx = string_column(r, "ctx_a") + " " + capitalized(string_column(r, "ctx_b"));
      item.context = clean_hellaswag_text(string_column(r, "activity_label") + ": " + ctx);
      for (const std::string& e : string_list_column(r, "endings")) item.endings.push_back(clean_hellaswag_text(e));
      item.label = label_column(r, "label", item.endings.size());
      break;
    }
    case TaskLayout::arc:
    case TaskLayout::openbookqa: {
      const bool arc = layout == TaskLayout::arc;
      item.context = arc ? "Question: " + string_column(r, "question") + "\nAnswer:" : string_column(r, "question_stem");
      const Json& choices = r.value.value("choices", Json());
      HONE_CHECK(choices.is_object() && choices.contains("text") && choices.contains("label"),
                 "{}: 'choices' must hold lists 'text' and 'label'", r.where);
      item.endings = string_list(choices["text"], r, "choices.text");
      const std::vector<std::string> letters = string_list(choices["label"], r, "choices.label");
      // OpenBookQA's task strips the key's leading spaces.
      const std::string key(arc ? string_column(r, "answerKey") : python_lstrip(string_column(r, "answerKey")));
      const auto at = std::find(letters.begin(), letters.end(), key);
      HONE_CHECK(at != letters.end() && letters.size() == item.endings.size(),
                 "{}: answerKey '{}' is not one of choices.label", r.where, key);
      item.label = at - letters.begin();
      break;
    }
    case TaskLayout::boolq:
      item.context = string_column(r, "passage") + "\nQuestion: " + string_column(r, "question") + "?\nAnswer:";
      item.endings = {"no", "yes"};
      // super_glue's label (1: yes), or google/boolq's answer (true: yes).
      if (r.value.contains("answer") && r.value["answer"].is_boolean()) {
        item.label = r.value["answer"].get<bool>() ? 1 : 0;
      } else {
        item.label = label_column(r, "label", 2);
      }
      break;
    case TaskLayout::siqa:
      item.context = "Q: " + string_column(r, "context") + " " + string_column(r, "question") + "\nA:";
      item.endings = {string_column(r, "answerA"), string_column(r, "answerB"), string_column(r, "answerC")};
      item.label = label_column(r, "label", 4) - 1;  // "1" to "3"
      HONE_CHECK(item.label >= 0, "{}: label 0 is not an answer (1, 2 or 3)", r.where);
      break;
    case TaskLayout::piqa:
      item.context = "Question: " + string_column(r, "goal") + "\nAnswer:";
      item.endings = {string_column(r, "sol1"), string_column(r, "sol2")};
      item.label = label_column(r, "label", 2);
      break;
    case TaskLayout::mmlu:
      item.context = mmlu_description(r) + mmlu_question(r, item.endings);
      item.label = label_column(r, "answer", item.endings.size());
      item.subject = string_column(r, "subject");
      break;
    case TaskLayout::truthfulqa_mc1:
    case TaskLayout::truthfulqa_mc2: {
      const bool mc1 = layout == TaskLayout::truthfulqa_mc1;
      const char* key = mc1 ? "mc1_targets" : "mc2_targets";
      item.context = std::string(kTruthfulQaShots) + "\n\nQ: " + string_column(r, "question") + "\nA:";
      const Json& targets = r.value.value(key, Json());
      HONE_CHECK(targets.is_object() && targets.contains("choices") && targets.value("labels", Json()).is_array(),
                 "{}: '{}' must hold lists 'choices' and 'labels'", r.where, key);
      item.endings = string_list(targets["choices"], r, key);
      const Json& labels = targets["labels"];
      HONE_CHECK(labels.size() == item.endings.size(), "{}: {}: {} labels for {} choices", r.where, key,
                 labels.size(), item.endings.size());
      // The true choices come first (labels 1), then the false (0); mc1 has one true.
      const auto first_false = std::find(labels.begin(), labels.end(), 0);
      HONE_CHECK(labels[0] == 1 && first_false != labels.end(), "{}: {}.labels must start with 1s and hold a 0",
                 r.where, key);
      if (!mc1) item.true_endings = first_false - labels.begin();
      break;
    }
    case TaskLayout::winogrande: {
      // The sentence up to its blank, filled with each option; then the rest, the same for both.
      const std::string sentence = string_column(r, "sentence");
      const size_t blank = sentence.find('_');
      HONE_CHECK(blank != std::string::npos, "{}: the sentence has no blank '_'", r.where);
      for (const char* option : {"option1", "option2"})
        item.contexts.push_back(sentence.substr(0, blank) + string_column(r, option));
      item.endings = {std::string(python_strip(std::string_view(sentence).substr(blank + 1)))};
      const std::string answer = string_column(r, "answer");
      HONE_CHECK(answer == "1" || answer == "2", "{}: answer '{}' is not 1 or 2 (a test split has no answers)",
                 r.where, answer);
      item.label = answer == "1" ? 0 : 1;
      break;
    }
    case TaskLayout::sciq:
      item.context = std::string(python_lstrip(string_column(r, "support"))) + "\nQuestion: " +
                     string_column(r, "question") + "\nAnswer:";
      item.endings = {string_column(r, "distractor1"), string_column(r, "distractor2"),
                      string_column(r, "distractor3"), string_column(r, "correct_answer")};
      item.label = 3;
      break;
    case TaskLayout::foundry:
      item.context = string_column(r, "query");
      item.endings = string_list_column(r, "choices");
      item.label = label_column(r, "gold", item.endings.size());
      break;
    case TaskLayout::lambada: {
      // The harness splits at spaces: the words but the last, joined; then a space and the last.
      const std::string text = string_column(r, "text");
      const size_t last_space = text.rfind(' ');
      item.context = last_space == std::string::npos ? "" : text.substr(0, last_space);
      item.endings = {" " + (last_space == std::string::npos ? text : text.substr(last_space + 1))};
      break;
    }
    case TaskLayout::foundry_lm:
      item.context = string_column(r, "context");
      item.endings = {string_column(r, "continuation")};
      break;
    case TaskLayout::gsm8k:
    case TaskLayout::triviaqa:
    case TaskLayout::wikitext:
      HONE_ASSERT(!"not a multiple-choice layout");
  }
  return item;
}

// A record of a generative layout as the harness's task reads it: GSM8K's
// reference is the whole answer, reasoning and "#### " number; TriviaQA's are
// the answer's aliases.
GenerativeItem generative_item_of(const data::Record& r, TaskLayout layout) {
  if (layout == TaskLayout::gsm8k) {
    return {"Question: " + string_column(r, "question") + "\nAnswer:", {string_column(r, "answer")}};
  }
  const Json& answer = r.value.value("answer", Json());
  HONE_CHECK(answer.is_object() && answer.contains("aliases"), "{}: 'answer' must hold a list 'aliases'", r.where);
  GenerativeItem item{"Question: " + string_column(r, "question") + "?\nAnswer:", {}};
  for (const Json& alias : answer["aliases"]) {
    HONE_CHECK(alias.is_string(), "{}: every one of 'answer.aliases' must be a string", r.where);
    item.references.push_back(alias.get<std::string>());
  }
  HONE_CHECK(!item.references.empty(), "{}: 'answer.aliases' is empty", r.where);
  return item;
}

// A record answered, as a few-shot example: its context, a space, its right
// ending or first reference answer, a blank line.
std::string example_of(const data::Record& r, TaskLayout layout) {
  if (is_generative(layout)) {
    const GenerativeItem item = generative_item_of(r, layout);
    return item.prompt + " " + item.references.front() + "\n\n";
  }
  const MultipleChoiceItem item = item_of(r, layout);
  const auto right = size_t(item.label);
  return item.context_of(right) + " " + item.ending_of(right) + "\n\n";
}

// The harness's first_n sampler by subject (MMLU): the shots go after the description.
void add_first_shots_by_subject(EvalTask& task, const std::vector<data::Record>& records, const std::string& path,
                                const FewShot& shots) {
  // Drawn from the task's own records, one more is taken and the item itself
  // dropped, as the harness does where the few-shot split is the test split.
  const bool own_records = std::filesystem::weakly_canonical(path) == std::filesystem::weakly_canonical(shots.path);
  const auto examples = mmlu_shots(shots.path, shots.count + (own_records ? 1 : 0));
  for (size_t i = 0; i < records.size(); ++i) {
    const std::string subject = string_column(records[i], "subject");
    std::string prefix;
    int64_t found = 0;
    if (auto it = examples.find(subject); it != examples.end()) {
      for (const auto& [record, text] : it->second) {
        if (record == records[i].value || found == shots.count) continue;
        prefix += text;
        ++found;
      }
    }
    HONE_CHECK(found == shots.count, "{}: {} examples of subject '{}' in {} for {} shots{}", records[i].where, found,
               subject, shots.path, shots.count, own_records ? " besides the item itself" : "");
    task.items[i].context.insert(mmlu_description(records[i]).size(), prefix);
  }
}

// The harness's default sampler: for each item in turn, the examples drawn by
// Random(seed).sample; one more drawn when they are the task's own records,
// and any equal to the item dropped (as the harness compares docs).
std::vector<std::string> sampled_shots(const std::vector<data::Record>& records, const std::string& path,
                                       TaskLayout layout, const FewShot& shots) {
  namespace fs = std::filesystem;
  const bool own_records = fs::weakly_canonical(path) == fs::weakly_canonical(shots.path);
  const std::vector<data::Record> pool = own_records ? records : data::read_records(shots.path);
  std::vector<std::string> examples;
  for (const data::Record& r : pool) examples.push_back(example_of(r, layout));
  const auto draws = uint64_t(shots.count) + (own_records ? 1 : 0);
  HONE_CHECK(examples.size() >= draws, "{}: {} records for {} shots{}", shots.path, examples.size(), shots.count,
             own_records ? " and the item itself" : "");
  PythonRandom random(shots.seed);
  std::vector<std::string> prefixes;
  for (const data::Record& item : records) {
    std::string& prefix = prefixes.emplace_back();
    int64_t taken = 0;
    for (const uint64_t j : random.sample(examples.size(), draws)) {
      if (pool[j].value == item.value || taken == shots.count) continue;
      prefix += examples[j];
      ++taken;
    }
  }
  return prefixes;
}

}  // namespace

const char* layout_name(TaskLayout layout) {
  switch (layout) {
    case TaskLayout::plain: return "plain";
    case TaskLayout::hellaswag: return "hellaswag";
    case TaskLayout::arc: return "arc";
    case TaskLayout::piqa: return "piqa";
    case TaskLayout::mmlu: return "mmlu";
    case TaskLayout::truthfulqa_mc1: return "truthfulqa_mc1";
    case TaskLayout::truthfulqa_mc2: return "truthfulqa_mc2";
    case TaskLayout::winogrande: return "winogrande";
    case TaskLayout::openbookqa: return "openbookqa";
    case TaskLayout::boolq: return "boolq";
    case TaskLayout::siqa: return "siqa";
    case TaskLayout::sciq: return "sciq";
    case TaskLayout::foundry: return "foundry";
    case TaskLayout::lambada: return "lambada";
    case TaskLayout::foundry_lm: return "foundry_lm";
    case TaskLayout::gsm8k: return "gsm8k";
    case TaskLayout::triviaqa: return "triviaqa";
    case TaskLayout::wikitext: return "wikitext";
  }
  return "?";
}

bool is_generative(TaskLayout layout) { return layout == TaskLayout::gsm8k || layout == TaskLayout::triviaqa; }

bool scores_documents(TaskLayout layout) { return layout == TaskLayout::wikitext; }

std::string_view mmlu_category(std::string_view subject) {
  static const std::map<std::string_view, std::string_view> categories = {
      {"abstract_algebra", "stem"},
      {"anatomy", "stem"},
      {"astronomy", "stem"},
      {"business_ethics", "other"},
      {"clinical_knowledge", "other"},
      {"college_biology", "stem"},
      {"college_chemistry", "stem"},
      {"college_computer_science", "stem"},
      {"college_mathematics", "stem"},
      {"college_medicine", "other"},
      {"college_physics", "stem"},
      {"computer_security", "stem"},
      {"conceptual_physics", "stem"},
      {"econometrics", "social_sciences"},
      {"electrical_engineering", "stem"},
      {"elementary_mathematics", "stem"},
      {"formal_logic", "humanities"},
      {"global_facts", "other"},
      {"high_school_biology", "stem"},
      {"high_school_chemistry", "stem"},
      {"high_school_computer_science", "stem"},
      {"high_school_european_history", "humanities"},
      {"high_school_geography", "social_sciences"},
      {"high_school_government_and_politics", "social_sciences"},
      {"high_school_macroeconomics", "social_sciences"},
      {"high_school_mathematics", "stem"},
      {"high_school_microeconomics", "social_sciences"},
      {"high_school_physics", "stem"},
      {"high_school_psychology", "social_sciences"},
      {"high_school_statistics", "stem"},
      {"high_school_us_history", "humanities"},
      {"high_school_world_history", "humanities"},
      {"human_aging", "other"},
      {"human_sexuality", "social_sciences"},
      {"international_law", "humanities"},
      {"jurisprudence", "humanities"},
      {"logical_fallacies", "humanities"},
      {"machine_learning", "stem"},
      {"management", "other"},
      {"marketing", "other"},
      {"medical_genetics", "other"},
      {"miscellaneous", "other"},
      {"moral_disputes", "humanities"},
      {"moral_scenarios", "humanities"},
      {"nutrition", "other"},
      {"philosophy", "humanities"},
      {"prehistory", "humanities"},
      {"professional_accounting", "other"},
      {"professional_law", "humanities"},
      {"professional_medicine", "other"},
      {"professional_psychology", "social_sciences"},
      {"public_relations", "social_sciences"},
      {"security_studies", "social_sciences"},
      {"sociology", "social_sciences"},
      {"us_foreign_policy", "social_sciences"},
      {"virology", "other"},
      {"world_religions", "humanities"}};
  const auto it = categories.find(subject);
  return it == categories.end() ? std::string_view() : it->second;
}

std::string wikitext_detokenized(std::string_view page) {
  std::string s(page);
  const auto regex = [&](const char* pattern, const char* replacement) {
    s = PythonRegex(pattern, "wikitext_detokenizer", PythonRegex::Text::unicode).replace_all(s, replacement);
  };
  // contractions
  replace_all(s, "s '", "s'");
  regex(R"(/' [0-9]/)", R"(/'[0-9]/)");  // the harness's pattern, whose replacement is this text
  // number separators
  replace_all(s, " @-@ ", "-");
  replace_all(s, " @,@ ", ",");
  replace_all(s, " @.@ ", ".");
  // punctuation
  for (const char* mark : {":", ";", ".", "!", "?", ","}) replace_all(s, fmt::format(" {} ", mark), fmt::format("{} ", mark));
  // double brackets
  regex(R"(\(\s*([^\)]*?)\s*\))", R"((\1))");
  regex(R"(\[\s*([^\]]*?)\s*\])", R"([\1])");
  regex(R"({\s*([^}]*?)\s*})", R"({\1})");
  regex(R"(\"\s*([^\"]*?)\s*\")", R"("\1")");
  regex(R"('\s*([^']*?)\s*')", R"('\1')");
  // miscellaneous
  replace_all(s, "= = = =", "====");
  replace_all(s, "= = =", "===");
  replace_all(s, "= =", "==");
  replace_all(s, " \u00b0 ", "\u00b0");
  replace_all(s, " \n", "\n");
  replace_all(s, "\n ", "\n");
  replace_all(s, " N ", " 1 ");
  replace_all(s, " 's", "'s");
  return s;
}

int64_t python_split_words(std::string_view text) {
  std::string storage;
  text = utf8::sanitize(text, storage);
  // Python's str.isspace(): Unicode's White_Space and the separators U+001C-U+001F.
  const auto is_space = [](uint32_t c) { return utf8::is_white_space(c) || (c >= 0x1c && c <= 0x1f); };
  int64_t words = 1;
  bool in_space = false;
  for (size_t i = 0; i < text.size();) {
    const bool space = is_space(utf8::next(text, i));
    if (space && !in_space) ++words;  // one split per run of white space
    in_space = space;
  }
  return words;
}

AnswerScoring answer_scoring(TaskLayout layout) {
  HONE_ASSERT(is_generative(layout));
  if (layout == TaskLayout::gsm8k) {
    // strict-match: the number after "#### "; flexible-extract: the last number.
    return {.until = {"Question:", "</s>", "<|im_end|>"},
            .filters = {{.key = "strict", .regex = R"(#### (\-?[0-9\.\,]+))"},
                        {.key = "flexible", .regex = R"((-?[$0-9.,]{2,})|(-?[0-9]+))", .group_select = -1}},
            .ignore = {",", R"(\$)", "(?s).*#### ", R"(\.$)"},
            .ignore_case = true};
  }
  return {.until = {"\n", ".", ","},
          .filters = {{.strip_leading_whitespace = true}},
          .ignore_case = true,
          .ignore_punctuation = true};
}

bool scores_continuation(TaskLayout layout) {
  return layout == TaskLayout::lambada || layout == TaskLayout::foundry_lm;
}

bool reports_accuracy_norm(TaskLayout layout) {
  return layout == TaskLayout::plain || layout == TaskLayout::hellaswag || layout == TaskLayout::arc ||
         layout == TaskLayout::piqa || layout == TaskLayout::openbookqa || layout == TaskLayout::sciq ||
         layout == TaskLayout::foundry;
}

std::string clean_hellaswag_text(std::string_view text) {
  std::string s(python_strip(text));
  replace_all(s, " [title]", ". ");
  // Drop each [...] that closes on its line (the harness's non-greedy \[.*?\]).
  std::string kept;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[') {
      const size_t close = s.find_first_of("]\n", i + 1);
      if (close != std::string::npos && s[close] == ']') {
        i = close;
        continue;
      }
    }
    kept.push_back(s[i]);
  }
  replace_all(kept, "  ", " ");
  return kept;
}

EvalTask read_eval_task(const std::string& path, std::string_view layout, const FewShot& shots) {
  const std::vector<data::Record> records = data::read_records(path);
  HONE_CHECK(!records.empty(), "{}: no items", path);
  EvalTask task;
  if (layout == "auto") {
    task.layout = detect_layout(records.front().value);
  } else {
    // lm-evaluation-harness's task names for a layout hone names once.
    static const std::map<std::string_view, std::string_view> harness_names = {
        {"arc_easy", "arc"}, {"arc_challenge", "arc"}, {"social_iqa", "siqa"}, {"lambada_openai", "lambada"},
        {"lambada_standard", "lambada"}};
    if (const auto it = harness_names.find(layout); it != harness_names.end()) layout = it->second;
    const auto* known = std::find_if(std::begin(kLayouts), std::end(kLayouts),
                                     [&](TaskLayout l) { return layout == layout_name(l); });
    if (known == std::end(kLayouts)) {
      std::string names = "auto";
      for (TaskLayout l : kLayouts) names += std::string(", ") + layout_name(l);
      fail("unknown task layout '{}': expected one of {}", layout, names);
    }
    task.layout = *known;
  }
  for (const data::Record& r : records) {
    try {
      if (is_generative(task.layout)) {
        task.generative_items.push_back(generative_item_of(r, task.layout));
      } else if (scores_documents(task.layout)) {
        const std::string page = string_column(r, "page");
        task.documents.push_back({.text = wikitext_detokenized(page),
                                  .words = python_split_words(page),
                                  .bytes = int64_t(page.size()),
                                  .where = r.where});
      } else {
        task.items.push_back(item_of(r, task.layout));
      }
    } catch (const Error& e) {
      // A layout picked from the first record's columns may not be the one meant: say how it was picked.
      if (layout != "auto") throw;
      fail("{} (read as the {} layout, picked by the first record's columns; task.layout names another)", e.what(),
           layout_name(task.layout));
    }
  }
  if (shots.count == 0) return task;
  HONE_CHECK(!shots.path.empty(), "{}: few-shot examples ({}) need a file of records to come from", path, shots.count);
  switch (task.layout) {
    case TaskLayout::mmlu:
      add_first_shots_by_subject(task, records, path, shots);
      return task;
    case TaskLayout::truthfulqa_mc1:
    case TaskLayout::truthfulqa_mc2:
      fail("{}: TruthfulQA's prompt holds six answered questions of its own; the harness adds none (num_fewshot 0)",
           path);
    case TaskLayout::foundry:
    case TaskLayout::foundry_lm:
      fail("{}: LLM Foundry's few-shot prompts (its num_fewshot and prompt_string) are not built by hone; "
           "score its files zero-shot",
           path);
    case TaskLayout::lambada:
      fail("{}: LAMBADA is scored zero-shot, as the harness's lambada tasks are", path);
    case TaskLayout::wikitext:
      fail("{}: wikitext's documents are scored whole, zero-shot, as the harness's loglikelihood_rolling tasks are",
           path);
    default:
      break;
  }
  const std::vector<std::string> prefixes = sampled_shots(records, path, task.layout, shots);
  for (size_t i = 0; i < prefixes.size(); ++i) {
    if (is_generative(task.layout)) {
      task.generative_items[i].prompt.insert(0, prefixes[i]);
      continue;
    }
    MultipleChoiceItem& item = task.items[i];
    if (item.contexts.empty()) item.context.insert(0, prefixes[i]);
    for (std::string& context : item.contexts) context.insert(0, prefixes[i]);
  }
  return task;
}

}  // namespace hone
