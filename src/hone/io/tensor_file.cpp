#include "hone/io/tensor_file.hpp"

#include "hone/io/safetensors.hpp"
#include "hone/io/torch_file.hpp"

namespace hone {

std::unique_ptr<TensorFile> open_tensor_file(const std::string& path) {
  // torch.save archives start with a zip's signature, safetensors files with their header's length.
  if (is_torch_archive(path)) return std::make_unique<TorchFile>(path);
  return std::make_unique<SafetensorsFile>(path);
}

}  // namespace hone
