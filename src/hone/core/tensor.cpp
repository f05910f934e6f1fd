#include "hone/core/tensor.hpp"

#include <algorithm>
#include <cstddef>
#include <fmt/ranges.h>

namespace hone {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  HONE_CHECK(dims.size() <= size_t(kMaxDims), "tensors have at most {} dimensions, got {}", kMaxDims,
             dims.size());
  for (int64_t d : dims) HONE_CHECK(d >= 0, "negative dimension {} in shape", d);
  std::copy(dims.begin(), dims.end(), dims_.begin());
  ndim_ = int(dims.size());
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : *this) n *= d;
  return n;
}

bool Shape::operator==(const Shape& other) const { return std::equal(begin(), end(), other.begin(), other.end()); }

std::string Shape::str() const { return fmt::format("[{}]", fmt::join(begin(), end(), ", ")); }

Storage::Storage(size_t bytes, Device device)
    : data_(allocator_for(device).allocate(bytes)), bytes_(bytes), device_(device) {}

Storage::~Storage() { allocator_for(device_).deallocate(data_, bytes_); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

template <typename T>
Tensor Tensor::from(std::span<const T> values, const Shape& shape) {
  HONE_CHECK(int64_t(values.size()) == shape.numel(), "{} values do not fill shape {}", values.size(),
             shape.str());
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

int64_t Tensor::size(int dim) const {
  if (dim < 0) dim += ndim();
  HONE_ASSERT(dim >= 0 && dim < ndim());
  return shape_[dim];
}

void* Tensor::raw() const {
  return storage_ ? static_cast<char*>(storage_->data()) + offset_bytes_ : nullptr;
}

Tensor Tensor::view(const Shape& shape) const {
  HONE_CHECK(shape.numel() == numel(), "cannot view {} elements of shape {} as {}", numel(), shape_.str(),
             shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice(int64_t offset, const Shape& shape) const {
  HONE_CHECK(offset >= 0 && offset + shape.numel() <= numel(),
             "slice of {} elements at offset {} exceeds a tensor of {}", shape.numel(), offset, numel());
  Tensor t = *this;
  t.offset_bytes_ += size_t(offset) * dtype_size(dtype_);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::rows(int64_t first, int64_t count) const {
  if (ndim() == 1) return slice(first, {count});
  const int64_t width = size(-1);
  return slice(first * width, {count, width});
}

Tensor Tensor::view_bytes(size_t byte_offset, const Shape& shape, DType dtype) const {
  HONE_ASSERT(byte_offset + size_t(shape.numel()) * dtype_size(dtype) <= nbytes());
  Tensor t = *this;
  t.offset_bytes_ += byte_offset;
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::operator[](int64_t i) const {
  HONE_ASSERT(ndim() >= 1 && i >= 0 && i < shape_[0]);
  Shape inner(std::span<const int64_t>(shape_.begin() + 1, shape_.end()));
  return slice(i * inner.numel(), inner);
}

void Tensor::zero_() const {
  if (numel() != 0) allocator_for(device_).zero(raw(), nbytes());
}

void Tensor::copy_from(const Tensor& src) const {
  HONE_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "copy of {} {} into {} {}", dtype_name(src.dtype_),
             src.shape_.str(), dtype_name(dtype_), shape_.str());
  if (numel() == 0) return;
  if (src.device_ == device_) {
    if (src.raw() == raw()) return;  // onto itself (an in-place collective's output, say)
    const auto *to = static_cast<const std::byte*>(raw()), *from = static_cast<const std::byte*>(src.raw());
    HONE_ASSERT(to + nbytes() <= from || from + nbytes() <= to);  // a GPU's copies are undefined on overlaps
    allocator_for(device_).copy_within(raw(), src.raw(), nbytes());
  } else if (src.device_.is_cpu()) {
    allocator_for(device_).copy_from_host(raw(), src.raw(), nbytes());
  } else if (device_.is_cpu()) {
    allocator_for(src.device_).copy_to_host(raw(), src.raw(), nbytes());
  } else {
    Tensor staging = src.to(Device::cpu());
    copy_from(staging);
  }
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = device_.is_cpu() ? *this : to(Device::cpu());
  std::vector<T> out(static_cast<size_t>(numel()));
  auto convert = [&](auto* src) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = T(load_any(src[i]));
  };
  switch (dtype_) {
    case DType::f32: convert(static_cast<const float*>(host.raw())); break;
    case DType::f64: convert(static_cast<const double*>(host.raw())); break;
    case DType::bf16: convert(static_cast<const bf16*>(host.raw())); break;
    case DType::i32: convert(static_cast<const int32_t*>(host.raw())); break;
    case DType::i64: convert(static_cast<const int64_t*>(host.raw())); break;
    case DType::u16: convert(static_cast<const uint16_t*>(host.raw())); break;
    case DType::u8: convert(static_cast<const uint8_t*>(host.raw())); break;
    default: fail("cannot read {} tensor elements on the host", dtype_name(dtype_));
  }
  return out;
}

#define HONE_INSTANTIATE(T)                                                       \
  template Tensor Tensor::from<T>(std::span<const T>, const Shape&);              \
  template std::vector<T> Tensor::to_vector<T>() const;
HONE_INSTANTIATE(float)
HONE_INSTANTIATE(double)
HONE_INSTANTIATE(int32_t)
HONE_INSTANTIATE(int64_t)
HONE_INSTANTIATE(uint16_t)
HONE_INSTANTIATE(uint8_t)
#undef HONE_INSTANTIATE
template Tensor Tensor::from<bf16>(std::span<const bf16>, const Shape&);

}  // namespace hone
