#pragma once
// Files of named tensors, read where they lie in a memory-mapped file: the
// safetensors format (safetensors.hpp) and the archives PyTorch's torch.save
// writes (torch_file.hpp). A Hugging Face folder may hold either.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hone/core/tensor.hpp"

namespace hone {

class TensorFile {
 public:
  struct Entry {
    DType dtype;
    Shape shape;
    std::span<const std::byte> bytes;  // inside the mapped file, row-major
  };

  virtual ~TensorFile() = default;
  virtual const std::string& path() const = 0;
  virtual std::vector<std::string> names() const = 0;  // in file order
  virtual bool contains(const std::string& name) const = 0;
  // Throws hone::Error naming the file and the tensor when it has no such
  // tensor, or one hone cannot read (a dtype it lacks, a strided view).
  virtual const Entry& entry(const std::string& name) const = 0;
};

// A safetensors file or a torch.save archive, told apart by their first bytes.
std::unique_ptr<TensorFile> open_tensor_file(const std::string& path);

}  // namespace hone
