#pragma once
// What ZeRO's per-unit machinery (stages 2 and 3) shares: buffers lent out and
// taken back for reuse, and a unit's gradient reductions in flight. Per-unit
// buffers (gathered weights, a unit's gradients) come in the same few sizes
// layer after layer, and a fresh buffer each time would cost a page fault per
// 4 KiB of it.
#include <memory>
#include <utility>
#include <vector>

#include "hone/core/tensor.hpp"
#include "hone/dist/communicator.hpp"

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

// A released unit's gradients on their way to their owners.
struct GradientReduction {
  std::vector<Tensor> grads;  // the unit's gradients, read until the collectives complete
  std::vector<std::pair<Tensor, Tensor>> sums;  // this rank's sum of a part, and where it adds
  std::vector<std::unique_ptr<PendingCollective>> pending;
  // Waits for the collectives, adds each sum where it goes, gives every buffer back.
  void finish(BufferPool& buffers);
};

}  // namespace hone::dist
