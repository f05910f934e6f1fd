#pragma once
// Tensor: a shape, a dtype and a device over contiguous storage. Views (reshape,
// a range of rows) share storage; nothing here computes, the ops/ layer does.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hone/core/allocator.hpp"
#include "hone/core/device.hpp"
#include "hone/core/dtype.hpp"
#include "hone/core/error.hpp"

namespace hone {

class Shape {
 public:
  static constexpr int kMaxDims = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[size_t(i)]; }
  int64_t numel() const;
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + ndim_; }
  bool operator==(const Shape& other) const;
  std::string str() const;  // "[2, 16, 64]"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

// Owns one allocation; freed through the allocator that made it.
class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // A CPU tensor holding a copy of `values`.
  template <typename T>
  static Tensor from(std::span<const T> values, const Shape& shape);
  template <typename T>
  static Tensor from(const std::vector<T>& values, const Shape& shape) {
    return from(std::span<const T>(values), shape);
  }

  bool defined() const { return storage_ != nullptr || shape_.numel() == 0; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t size(int dim) const;
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }

  void* raw() const;
  template <typename T>
  T* data() const {
    HONE_CHECK(dtype_ == dtype_of<T>(), "tensor holds {}, accessed as {}", dtype_name(dtype_),
               dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // Same elements, another shape with the same element count.
  Tensor view(const Shape& shape) const;
  // The `count` consecutive elements from `offset`, viewed with `shape`.
  Tensor slice(int64_t offset, const Shape& shape) const;
  // Rows [first, first + count) of the rows of its last dimension ([count,
  // last]; of a vector, its elements [first, first + count)).
  Tensor rows(int64_t first, int64_t count) const;
  // `shape` elements of `dtype` starting `byte_offset` bytes into this tensor's
  // memory (carves typed tensors out of one byte buffer, as arenas do).
  Tensor view_bytes(size_t byte_offset, const Shape& shape, DType dtype) const;
  // The i-th block along the first dimension.
  Tensor operator[](int64_t i) const;

  void zero_() const;
  // Copies `src` (same shape and dtype, any device) into this tensor.
  void copy_from(const Tensor& src) const;
  Tensor to(Device device) const;
  Tensor clone() const { return to(device_); }
  // Host copy of all elements, converted to T (for tests and I/O).
  template <typename T>
  std::vector<T> to_vector() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_;
};

}  // namespace hone
