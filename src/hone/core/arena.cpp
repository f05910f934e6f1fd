#include "hone/core/arena.hpp"

#include <algorithm>

namespace hone {

Arena::Arena(size_t bytes, Device device) : buffer_(Tensor::empty({int64_t(bytes)}, DType::u8, device)) {}

Tensor Arena::take(const Shape& shape, DType dtype) {
  const size_t offset = (used_ + kAlignment - 1) / kAlignment * kAlignment;
  used_ = offset + size_t(shape.numel()) * dtype_size(dtype);
  end_ = std::max(end_, used_);
  if (measuring()) return Tensor();
  HONE_ASSERT(used_ <= buffer_.nbytes());
  return buffer_.view_bytes(offset, shape, dtype);
}

void Arena::reuse_from(size_t mark) {
  HONE_ASSERT(mark <= end_);
  used_ = mark;
}

}  // namespace hone
