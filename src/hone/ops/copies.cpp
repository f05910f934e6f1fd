#include "hone/ops/dispatch.hpp"
#include "hone/ops/ops.hpp"

#ifdef HONE_WITH_CUDA
#include "hone/kernels/cuda/runtime.hpp"
#endif

namespace hone::ops {

#ifdef HONE_WITH_CUDA
struct OverlappedCopies::CopyStream : kernels::cuda::CopyStream {
  using kernels::cuda::CopyStream::CopyStream;
};
#else
struct OverlappedCopies::CopyStream {};  // a build without CUDA has none
#endif

OverlappedCopies::OverlappedCopies(Device device, const Tensor& host, int slots) : host_(host) {
  HONE_CHECK(host.device().is_cpu(), "overlapped copies: the host tensor is on {}", host.device().str());
  HONE_CHECK(slots > 0, "overlapped copies need at least one slot, got {}", slots);
  if (device.is_cpu()) return;
#ifdef HONE_WITH_CUDA
  kernels::cuda::check_device(device);
  stream_ = std::make_unique<CopyStream>(slots);
  stream_->pin(host.raw(), host.nbytes());
#else
  fail("overlapped copies on {} in a build without CUDA", device.str());
#endif
}

OverlappedCopies::~OverlappedCopies() = default;

void OverlappedCopies::start(const Tensor& dst, const Tensor& src, int slot) {
  HONE_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), "overlapped copy of {} {} into {} {}",
             dtype_name(src.dtype()), src.shape().str(), dtype_name(dst.dtype()), dst.shape().str());
  if (!stream_) return dst.copy_from(src);
#ifdef HONE_WITH_CUDA
  HONE_CHECK(dst.device().is_cpu() != src.device().is_cpu(), "overlapped copy from {} to {}: one side is the host",
             src.device().str(), dst.device().str());
  // The host side must lie in the pinned tensor: a pageable one would make the copy synchronous.
  const Tensor& host_side = dst.device().is_cpu() ? dst : src;
  const auto* first = static_cast<const std::byte*>(host_.raw());
  const auto* part = static_cast<const std::byte*>(host_side.raw());
  HONE_CHECK(part >= first && part + host_side.nbytes() <= first + host_.nbytes(),
             "overlapped copy: its host side is not a part of the pinned host tensor");
  stream_->copy(dst.raw(), src.raw(), dst.nbytes(), slot);
#endif
}

void OverlappedCopies::wait(int slot) {
#ifdef HONE_WITH_CUDA
  if (stream_) stream_->compute_waits_for(slot);
#endif
  (void)slot;
}

}  // namespace hone::ops
