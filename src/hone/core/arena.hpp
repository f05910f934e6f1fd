#pragma once
// Arena: one allocation carved into many tensors, planned before the first step.
// A planning function runs twice over the same Arena API: first on a measuring
// arena (tensors come back undefined, only sizes add up), then on a real arena of
// exactly that size. Memory is therefore known before any work is done.
#include "hone/core/tensor.hpp"

namespace hone {

class Arena {
 public:
  // A measuring arena, for a real one on `device`.
  explicit Arena(Device device = Device::cpu());
  // A real arena of `bytes` on `device`.
  Arena(size_t bytes, Device device);
  // A real arena in `memory` (u8), which an earlier arena may have used: its
  // tensors must no longer be used.
  explicit Arena(Tensor memory);

  Tensor take(const Shape& shape, DType dtype);
  size_t bytes_used() const { return end_; }

  // Tensors never live at the same time may share memory: reuse_from(mark())
  // takes the next tensors from that mark again, over those taken since, and
  // reuse_end() goes back to taking after everything.
  size_t mark() const { return used_; }
  void reuse_from(size_t mark);
  void reuse_end() { used_ = end_; }
  bool measuring() const { return !buffer_.defined(); }

 private:
  // Offsets in the arena: 256 bytes, the alignment cuBLASLt's heuristics assume
  // of every operand, so that a GEMM's plan (and so its exact result) does not
  // depend on where a plan put its operands (checkpointed inputs kept on the
  // device or offloaded give other layouts).
  static constexpr size_t kAlignment = 256;
  size_t red_zone_;  // bytes owned by no tensor after each (arena.cpp)
  Tensor buffer_;
  size_t used_ = 0;  // where the next tensor goes
  size_t end_ = 0;   // the furthest any took
};

}  // namespace hone
