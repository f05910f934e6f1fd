#pragma once
// Arena: one allocation carved into many tensors, planned before the first step.
// A planning function runs twice over the same Arena API: first on a measuring
// arena (tensors come back undefined, only sizes add up), then on a real arena of
// exactly that size. Memory is therefore known before any work is done.
#include "hone/core/tensor.hpp"

namespace hone {

class Arena {
 public:
  // A measuring arena.
  Arena() = default;
  // A real arena of `bytes` on `device`.
  Arena(size_t bytes, Device device);

  Tensor take(const Shape& shape, DType dtype);
  size_t bytes_used() const { return used_; }
  bool measuring() const { return !buffer_.defined(); }

 private:
  static constexpr size_t kAlignment = 64;
  Tensor buffer_;
  size_t used_ = 0;
};

}  // namespace hone
