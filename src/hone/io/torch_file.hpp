#pragma once
// The archives PyTorch's torch.save writes (since 1.6): an uncompressed zip
// (ZIP64 past 4 GiB) holding PREFIX/data.pkl, a pickle of the saved object, and
// PREFIX/data/KEY, the bytes of each storage. A state dict pickles as an
// OrderedDict of name -> torch._utils._rebuild_tensor_v2(storage, offset, size,
// stride, ...), its storages as persistent ids ('storage', torch.FloatStorage,
// KEY, location, elements). This is how Hugging Face's pytorch_model.bin and
// Meta's consolidated.NN.pth are stored.
//
// The pickle is read by hone's own machine (core/pickle.hpp), which here
// accepts only the globals a tensor's pickle names (OrderedDict, the tensor and
// parameter rebuild functions, the storage types): any other global is an error
// naming it, and nothing in the file is ever run.
//
// A training checkpoint nests its state dicts in a dict ({'model': {...},
// 'optimizer': {...}, 'model_args': {...}}): nested dicts' tensors are named by
// their keys joined with dots ("model.transformer.wte.weight"), and the entries
// holding plain data (numbers, strings, lists and dicts of them) are kept as JSON.
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hone/io/mapped_file.hpp"
#include "hone/io/tensor_file.hpp"

namespace hone {

// Whether the file at `path` starts as a torch.save archive does (a zip's "PK\3\4").
bool is_torch_archive(const std::string& path);

class TorchFile final : public TensorFile {
 public:
  // The tensors of an archive held in memory, checked against the memory's size.
  struct Contents {
    std::map<std::string, Entry> entries;
    std::map<std::string, std::string> unreadable;  // name -> why hone cannot read it
    std::vector<std::string> order;                 // as the pickle lists them
    nlohmann::ordered_json values;  // the top dict's entries that hold plain data, by key (an object)
  };
  // Throws hone::Error naming `path` and what is wrong (also what a fuzz target drives).
  static Contents parse(std::span<const std::byte> file, const std::string& path);

  explicit TorchFile(const std::string& path);

  const std::string& path() const override { return file_.path(); }
  std::vector<std::string> names() const override { return contents_.order; }
  bool contains(const std::string& name) const override;
  const Entry& entry(const std::string& name) const override;
  // The top dict's entries that hold plain data, as a JSON object.
  const nlohmann::ordered_json& values() const { return contents_.values; }

 private:
  MappedFile file_;
  Contents contents_;
};

}  // namespace hone
