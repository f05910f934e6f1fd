// hone tokenize --tokenizer FILE_OR_DIR [--text STR | --file F] [--special] [--decode]
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "hone/cli/commands.hpp"
#include "hone/core/error.hpp"
#include "hone/core/files.hpp"
#include "hone/data/tokenizers/loaders.hpp"
#include "hone/data/tokenizers/tokenizer.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone::cli {

Command add_tokenize(CLI::App& app) {
  struct Args {
    std::string tokenizer, text, file;
    bool decode = false, special = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "tokenize",
      "Print the token ids of a text as a JSON array, the text's own ids (special tokens in it are text unless "
      "--special; hone preprocess adds what its tokenizer type adds around a text, e.g. Llama's BOS); with "
      "--decode, the text of a JSON array of ids");
  sub->add_option("--tokenizer", args->tokenizer,
                  "tokenizer.json, tokenizer.model, a tiktoken rank file, a SentencePiece .model, nanoGPT's meta.pkl, or "
                  "a folder")
      ->required();
  auto* text = sub->add_option("--text", args->text, "The input (default: standard input)");
  sub->add_option("--file", args->file, "Read the input from this file")->excludes(text);
  sub->add_flag("--decode", args->decode,
                "The input is a JSON array of ids; print their text (U+FFFD where they cut a character)");
  sub->add_flag("--special", args->special,
                "Special tokens written in the text (<|endoftext|>, <s>) become their ids instead of being "
                "tokenized as text");
  return [args, text] {
    const auto tokenizer = load_tokenizer(args->tokenizer);
    std::string input;
    std::string source = "--text";
    if (!args->file.empty()) {
      input = read_file(args->file);
      source = args->file;
    } else if (text->count() > 0) {
      input = args->text;
    } else {
      input.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
      source = "standard input";
    }
    if (args->decode) {
      nlohmann::json ids;
      try {
        ids = nlohmann::json::parse(input);
      } catch (const nlohmann::json::parse_error& e) {
        fail("{}: byte {}: expected a JSON array of token ids", source, e.byte);
      } catch (const nlohmann::json::exception&) {  // a number too large for any C++ type
        fail("{}: expected a JSON array of token ids", source);
      }
      HONE_CHECK(ids.is_array(), "{}: expected a JSON array of token ids", source);
      std::vector<int32_t> v;
      for (size_t i = 0; i < ids.size(); ++i) {
        HONE_CHECK(ids[i].is_number_integer() && ids[i].get<int64_t>() >= 0 && ids[i].get<int64_t>() < (1 << 30),
                   "{}: element {}: expected a token id, got {}", source, i, ids[i].dump());
        v.push_back(ids[i].get<int32_t>());
      }
      // Text, as tiktoken's and transformers' decode give it: ids that cut a
      // character (its partial bytes, which a streaming caller would join) print U+FFFD.
      const std::string decoded = tokenizer->decode(v);
      std::string storage;
      const std::string_view shown = utf8::sanitize(decoded, storage);
      std::fwrite(shown.data(), 1, shown.size(), stdout);  // no newline added
      return 0;
    }
    const auto ids = tokenizer->encode(input, args->special ? SpecialTokens::recognize : SpecialTokens::as_text);
    fmt::print("[{}]\n", fmt::join(ids, ", "));
    return 0;
  };
}

}  // namespace hone::cli
