#pragma once
// ParameterSet: a model's named parameters in three flat buffers (master weights,
// gradients, and the compute copy that GEMMs read), laid out so that the
// weight-decayed parameters form one contiguous group and the others another.
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "hone/core/tensor.hpp"

namespace hone {

struct Parameter {
  std::string name;
  Shape shape;
  bool decay = true;  // AdamW applies weight decay (matrices, embeddings; not norms, biases)
  Tensor value;       // master weights: fp32 (fp64 on the gradient-check path)
  Tensor grad;        // same dtype and shape as value; undefined when frozen
  Tensor compute;     // what the forward pass reads: `value` itself, or its bf16 copy
  int64_t offset = 0; // position in the flat buffers
};

class ParameterSet {
 public:
  // Declares a parameter; its storage comes with allocate().
  Parameter& declare(std::string name, const Shape& shape, bool decay);
  // Allocates the flat buffers (zeroed) and points every parameter into them.
  // compute_dtype bf16 adds a bf16 copy of the weights; otherwise compute aliases value.
  // Without gradients the set is frozen: no gradient buffer exists at all. The
  // buffers are padded with zeros to a multiple of `pad_multiple` elements, so
  // that ZeRO can cut them into equal shards (collectives need equal chunks).
  void allocate(DType master_dtype, DType compute_dtype, Device device, bool with_grads = true,
                int64_t pad_multiple = 1);
  bool frozen() const { return !grads_.defined(); }

  Parameter& get(std::string_view name);
  const Parameter& get(std::string_view name) const;
  const Parameter* find(std::string_view name) const;
  std::deque<Parameter>& all() { return params_; }
  const std::deque<Parameter>& all() const { return params_; }

  // Contiguous spans of the flat buffers that share one weight-decay setting.
  struct Group {
    int64_t offset = 0, count = 0;
    bool decay = true;
  };
  const std::vector<Group>& groups() const { return groups_; }

  // The flat buffers, padding included.
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }  // undefined when frozen
  const Tensor& compute() const { return compute_; }  // undefined unless a separate copy exists
  int64_t numel() const { return numel_; }  // parameters, without the padding

  void zero_grad();
  // Refreshes the compute copy from the master weights (after init or loading).
  void sync_compute();

 private:
  std::deque<Parameter> params_;  // a deque keeps references stable while declaring
  std::vector<Group> groups_;
  Tensor values_, grads_, compute_;
  int64_t numel_ = 0;
};

}  // namespace hone
