// The generate recipe: completions for prompts from the command line or a file,
// batched through the KV-cache decoder, with the statistics torchtune's generate
// recipe prints (tokens/s, memory bandwidth achieved, memory used).
#include <fmt/core.h>

#include <fstream>

#include "hone/core/text.hpp"
#include "hone/data/instruct.hpp"
#include "hone/model/sampling.hpp"
#include "hone/train/inference.hpp"
#include "hone/train/recipes.hpp"
#include "hone/train/run_config.hpp"

namespace hone {

Schema generate_schema() {
  Schema s = inference_schema();
  s.add({"prompt", ValueType::string, nullptr, "a prompt"});
  s.add({"prompts_file", ValueType::string, nullptr, "a file of prompts, one per line"});
  s.add({"template", ValueType::string, "plain", "how the prompt is presented, as in training",
         {"plain", "alpaca", "summarize", "chat"}});
  s.add({"chat_format", ValueType::string, "llama3", "chat template", {"llama3", "llama2", "chatml"}});
  s.add({"system_prompt", ValueType::string, "", "chat: a system message"});
  s.add({"max_new_tokens", ValueType::integer, 128, "tokens to generate at most"}, Range::positive());
  s.add({"temperature", ValueType::number, 0.8, "sampling temperature (0: greedy)"}, Range::not_negative());
  s.add({"top_k", ValueType::integer, 0, "sample from the k most likely tokens (0: all)"}, Range::not_negative());
  s.add({"top_p", ValueType::number, 1.0, "nucleus sampling threshold"}, Range::positive_fraction());
  s.add({"min_p", ValueType::number, 0.0,
         "then drop tokens less likely than min_p times the most likely one (0: off)"},
        Range::unit_interval());
  s.add({"repetition_penalty", ValueType::number, 1.0,
         "tokens already in the prompt or completion made less likely: positive logits divided by it, negative ones "
         "multiplied (transformers' repetition_penalty; 1: off)"},
        Range::positive());
  s.add({"stop_tokens", ValueType::string_list, Json::array(),
         "special tokens that end a completion besides the end of answer (e.g. \"<|endoftext|>\")"});
  return s;
}

int run_generate(const Config& c) {
  std::vector<std::string> prompts;
  if (c.has("prompt")) prompts.push_back(c.get<std::string>("prompt"));
  if (c.has("prompts_file")) {
    const std::string path = c.get<std::string>("prompts_file");
    std::ifstream in(path);
    HONE_CHECK(in.good(), "prompts_file {}: cannot read", path);
    const size_t given = prompts.size();
    for (std::string line; std::getline(in, line);) {
      if (line.find_first_not_of(" \t\r") != std::string::npos) prompts.push_back(line);
    }
    HONE_CHECK(prompts.size() > given, "prompts_file {}: no prompts in it (one a line; blank lines are skipped)", path);
  }
  HONE_CHECK(!prompts.empty(), "{}: give a prompt or a prompts_file", c.origin());

  InferenceModel m = load_inference_model(c);
  data::InstructOptions format;
  format.format = data::parse_instruct_template(c.get<std::string>("template"));
  format.chat_format = data::parse_chat_format(c.get<std::string>("chat_format"));
  format.system_prompt = c.get<std::string>("system_prompt");
  GenerationOptions o;
  o.max_new_tokens = c.get<int64_t>("max_new_tokens");
  o.sampling = {.temperature = c.get<double>("temperature"),
                .top_k = c.get<int64_t>("top_k"),
                .top_p = c.get<double>("top_p"),
                .min_p = c.get<double>("min_p"),
                .repetition_penalty = c.get<double>("repetition_penalty")};
  o.seed = uint64_t(c.get<int64_t>("seed"));
  o.stop_tokens.push_back(data::end_of_answer_token(*m.tokenizer, format));
  for (const std::string& s : c.get<std::vector<std::string>>("stop_tokens")) {
    auto id = m.tokenizer->special_token_id(s);
    HONE_CHECK(id.has_value(), "{}: stop token '{}' is not a special token of the tokenizer",
               c.origin_of("stop_tokens"), s);
    o.stop_tokens.push_back(*id);
  }
  std::vector<std::vector<int32_t>> encoded;
  for (const std::string& p : prompts) encoded.push_back(data::prompt_tokens(*m.tokenizer, p, format));

  Allocator& memory = allocator_for(m.model->device());
  const Generation g = generate(*m.model, encoded, o);
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> text = g.completions[i];
    if (!text.empty() && std::find(o.stop_tokens.begin(), o.stop_tokens.end(), text.back()) != o.stop_tokens.end()) {
      text.pop_back();  // the stop token is not part of the answer
    }
    fmt::print("{}{}\n", prompts.size() > 1 ? fmt::format("[{}] ", i) : "", prompts[i]);
    fmt::print("{}\n\n", m.tokenizer->decode(text));
  }
  // Every decoding step reads all the weights once, for all sequences together.
  size_t weight_bytes = 0;
  for (const Parameter& p : m.model->params().all()) weight_bytes += p.compute.nbytes();
  const int64_t steps = [&] {
    int64_t longest = 0;
    for (const auto& t : g.completions) longest = std::max<int64_t>(longest, int64_t(t.size()));
    return longest - 1;  // the first token of each comes from the prefill
  }();
  const double decode_rate = g.decode_seconds > 0 ? double(std::max<int64_t>(steps, 0)) / g.decode_seconds : 0;
  fmt::print(stderr, "model: {}\n", m.description);
  fmt::print(stderr, "prefill: {} tokens in {:.3f} s ({:.1f} tokens/s)\n", g.prompt_tokens, g.prefill_seconds,
             double(g.prompt_tokens) / std::max(g.prefill_seconds, 1e-9));
  fmt::print(stderr, "decode: {} tokens for {} {} in {:.3f} s: {:.1f} tokens/s\n", g.generated_tokens,
             prompts.size(), plural(int64_t(prompts.size()), "prompt"), g.decode_seconds,
             double(g.generated_tokens - int64_t(prompts.size())) / std::max(g.decode_seconds, 1e-9));
  fmt::print(stderr, "bandwidth achieved: {:.2f} GB/s ({} of weights read per step); memory used: {} (KV cache {})\n",
             double(weight_bytes) * decode_rate / 1e9, format_bytes(double(weight_bytes)),
             format_bytes(double(memory.stats().peak_allocated)), format_bytes(double(g.cache_bytes)));
  return 0;
}

}  // namespace hone
