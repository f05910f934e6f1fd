#define PCRE2_CODE_UNIT_WIDTH 8
#include "hone/data/tokenizers/split_regex.hpp"

#include <pcre2.h>

#include "hone/core/error.hpp"
#include "hone/data/tokenizers/utf8.hpp"

namespace hone {
namespace {

// Unicode White_Space, spelled for the inside of a character class.
constexpr std::string_view kWhiteSpace = R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// JIT matching of long whitespace runs needs more than PCRE2's default 32 KiB
// stack; each thread gets one stack that grows on demand. The match limit is
// raised from PCRE2's 10 million steps, which a run of some million spaces
// (one document of a corpus) reached, failing the whole job; the patterns'
// steps grow linearly with a run.
struct JitStack {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  JitStack() {
    stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (stack && context) pcre2_jit_stack_assign(context, nullptr, stack);
    if (context) pcre2_set_match_limit(context, UINT32_MAX);
  }
  ~JitStack() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

pcre2_match_context* thread_match_context() {
  thread_local JitStack jit;
  return jit.context;
}

}  // namespace

std::string translate_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

SplitRegex::SplitRegex(std::string_view pattern, std::string_view where) {
  const std::string translated = translate_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (!code_) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    fail("{}: invalid pre-tokenization regex {:?}: {} (offset {} of the PCRE2 form)", where, std::string(pattern),
         reinterpret_cast<const char*>(message), size_t(offset));
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

SplitRegex::~SplitRegex() { pcre2_code_free(code_); }

SplitRegex::Pieces::Pieces(const SplitRegex& regex, std::string_view text) : regex_(regex), text_(text) {
  match_ = pcre2_match_data_create_from_pattern(regex.code_, nullptr);
  HONE_CHECK(match_ != nullptr, "out of memory creating PCRE2 match data");
}

SplitRegex::Pieces::~Pieces() { pcre2_match_data_free(match_); }

bool SplitRegex::Pieces::next(std::string_view& piece) {
  if (!pending_ && !exhausted_ && pos_ < text_.size()) {
    // Search from pos_; an empty match is skipped by searching one character on.
    size_t start = pos_;
    while (true) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text_.data());
      const int rc = regex_.jit_ ? pcre2_jit_match(regex_.code_, subject, text_.size(), start, 0, match_,
                                                   thread_match_context())
                                 : pcre2_match(regex_.code_, subject, text_.size(), start, PCRE2_NO_UTF_CHECK,
                                               match_, thread_match_context());
      if (rc == PCRE2_ERROR_NOMATCH) {
        exhausted_ = true;
        break;
      }
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof message);
        fail("pre-tokenization regex failed at byte {} of a {}-byte text: {}", start, text_.size(),
             reinterpret_cast<const char*>(message));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_);
      if (ovector[1] == ovector[0]) {
        start = ovector[0];
        if (start >= text_.size()) {
          exhausted_ = true;
          break;
        }
        start += size_t(utf8::char_length(static_cast<unsigned char>(text_[start])));
        continue;
      }
      match_begin_ = ovector[0];
      match_end_ = ovector[1];
      pending_ = true;
      break;
    }
  }
  if (pending_) {
    if (match_begin_ > pos_) {  // the gap before the match
      piece = text_.substr(pos_, match_begin_ - pos_);
      pos_ = match_begin_;
      return true;
    }
    piece = text_.substr(match_begin_, match_end_ - match_begin_);
    pos_ = match_end_;
    pending_ = false;
    return true;
  }
  if (pos_ < text_.size()) {  // the tail after the last match
    piece = text_.substr(pos_);
    pos_ = text_.size();
    return true;
  }
  return false;
}

}  // namespace hone
