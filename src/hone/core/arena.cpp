#include "hone/core/arena.hpp"

#include <algorithm>

#include "hone/core/allocator.hpp"

namespace hone {

namespace {

// The CUDA emulator's memory check (HONE_EMULATOR_CHECK=MEMORY) reports a
// kernel touching device bytes that no tensor owns: there an arena on a CUDA
// device leaves this many after each tensor, so that a kernel running past a
// tensor's end into its neighbour's is reported. No room is left elsewhere.
#ifdef HONE_ARENA_RED_ZONE_BYTES
constexpr size_t kCudaRedZone = HONE_ARENA_RED_ZONE_BYTES;
#else
constexpr size_t kCudaRedZone = 0;
#endif

size_t red_zone_bytes(Device device) { return device.is_cuda() ? kCudaRedZone : 0; }

}  // namespace

Arena::Arena(Device device) : red_zone_(red_zone_bytes(device)) {}

Arena::Arena(size_t bytes, Device device) : Arena(Tensor::empty({int64_t(bytes)}, DType::u8, device)) {}

Arena::Arena(Tensor memory) : red_zone_(red_zone_bytes(memory.device())), buffer_(std::move(memory)) {
  if (buffer_.nbytes() != 0) allocator_for(buffer_.device()).mark_unowned(buffer_.raw(), buffer_.nbytes());
}

Tensor Arena::take(const Shape& shape, DType dtype) {
  const size_t offset = (used_ + kAlignment - 1) / kAlignment * kAlignment;
  const size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  used_ = offset + bytes + red_zone_;
  end_ = std::max(end_, used_);
  if (measuring()) return Tensor();
  HONE_ASSERT(used_ <= buffer_.nbytes());
  if (bytes != 0) allocator_for(buffer_.device()).mark_owned(static_cast<char*>(buffer_.raw()) + offset, bytes);
  return buffer_.view_bytes(offset, shape, dtype);
}

void Arena::reuse_from(size_t mark) {
  HONE_ASSERT(mark <= end_);
  used_ = mark;
}

}  // namespace hone
