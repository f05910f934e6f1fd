#pragma once
// Lets several tokenizer threads feed one TokenWriter so that the output is the
// same for any number of threads: document k is written after documents 0..k-1,
// whichever thread finishes it first.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <vector>

#include "hone/data/formats/token_writer.hpp"

namespace hone::data {

class OrderedDocumentSink {
 public:
  // At most `window` documents wait for an earlier one; submit() blocks beyond that,
  // which bounds memory. Workers must take document numbers in increasing order from
  // a shared counter, so the missing document is always being worked on.
  OrderedDocumentSink(TokenWriter& writer, size_t window);

  // Thread-safe. Documents are numbered 0, 1, 2, ... in input order. An error of the
  // writer is rethrown here, in this and every later call.
  void submit(uint64_t index, std::vector<int32_t> tokens, std::vector<int32_t> sequence_lengths = {});
  // After every submit() has returned: checks that no document is missing, then finishes the writer.
  void finish();

  uint64_t written() const;

 private:
  struct Pending {
    std::vector<int32_t> tokens, sequence_lengths;
  };

  TokenWriter& writer_;
  size_t window_;
  mutable std::mutex mutex_;
  std::condition_variable advanced_;
  std::map<uint64_t, Pending> pending_;
  uint64_t next_ = 0;
  std::exception_ptr error_;
};

}  // namespace hone::data
