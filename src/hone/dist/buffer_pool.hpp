#pragma once
// Buffers lent out and taken back for reuse. ZeRO's per-unit buffers (gathered
// weights, a unit's gradients) come in the same few sizes layer after layer,
// and a fresh buffer each time would cost a page fault per 4 KiB of it.
#include <vector>

#include "hone/core/tensor.hpp"

namespace hone::dist {

class BufferPool {
 public:
  explicit BufferPool(Device device) : device_(device) {}
  // The first `numel` elements of a free buffer of numel's size class (16 to 32
  // times a power of two, at most 1/16 unused, so that units of nearly one size
  // share buffers: the embeddings and the head differ by a norm), or of a new one.
  Tensor take(int64_t numel, DType dtype);
  // Takes back a view that take() returned, and undefines it (an undefined one: nothing).
  void give_back(Tensor& view);

 private:
  Device device_;
  std::vector<Tensor> spare_, lent_;  // whole buffers, free and in use
};

}  // namespace hone::dist
