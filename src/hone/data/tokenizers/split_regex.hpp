#pragma once
// Pre-tokenization: splits text into pieces with the regular expression of the
// reference tokenizer, compiled with PCRE2 (UTF + UCP, JIT-compiled when the
// platform supports it).
#include <cstddef>
#include <string>
#include <string_view>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;

namespace hone {

// The reference patterns, as OpenAI's tiktoken and Meta's Llama 3 define them.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// cl100k_base; Llama 3 uses the same pattern.
inline constexpr std::string_view kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class SplitRegex {
 public:
  // `pattern` in the syntax tiktoken (Rust regex) and HF tokenizers (Oniguruma)
  // use; `where` names its source for error messages.
  SplitRegex(std::string_view pattern, std::string_view where);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  // Iterates over the pieces of valid UTF-8 text: each match, and each stretch of
  // text between matches (HF's "Isolated" split behaviour).
  class Pieces {
   public:
    Pieces(const SplitRegex& regex, std::string_view text);
    ~Pieces();
    Pieces(const Pieces&) = delete;
    Pieces& operator=(const Pieces&) = delete;
    // The next piece, or false at the end of the text.
    bool next(std::string_view& piece);

   private:
    const SplitRegex& regex_;
    std::string_view text_;
    pcre2_real_match_data_8* match_ = nullptr;
    size_t pos_ = 0;             // text consumed so far
    size_t match_begin_ = 0;     // the pending match, when pending_
    size_t match_end_ = 0;
    bool pending_ = false;
    bool exhausted_ = false;     // no match at or after pos_
  };

 private:
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

// The pattern rewritten for PCRE2: \s and \S become Unicode White_Space classes
// (what Rust regex and Oniguruma mean by them; PCRE2's own \s differs on U+0085
// and U+180E). Exposed for tests.
std::string translate_pattern(std::string_view pattern);

}  // namespace hone
