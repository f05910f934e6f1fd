#include "hone/model/parameters.hpp"

#include "hone/ops/ops.hpp"

namespace hone {

Parameter& ParameterSet::declare(std::string name, const Shape& shape, bool decay) {
  HONE_ASSERT(!values_.defined() && find(name) == nullptr);
  Parameter& p = params_.emplace_back();
  p.name = std::move(name);
  p.shape = shape;
  p.decay = decay;
  return p;
}

void ParameterSet::allocate(DType master_dtype, DType compute_dtype, Device device, bool with_grads,
                            int64_t pad_multiple) {
  HONE_ASSERT(pad_multiple >= 1);
  int64_t total = 0;
  for (bool decay : {true, false}) {
    Group group{.offset = total, .count = 0, .decay = decay};
    for (Parameter& p : params_) {
      if (p.decay != decay) continue;
      p.offset = total;
      total += p.shape.numel();
    }
    group.count = total - group.offset;
    if (group.count > 0) groups_.push_back(group);
  }
  numel_ = total;
  const int64_t padded = (total + pad_multiple - 1) / pad_multiple * pad_multiple;
  values_ = Tensor::zeros({padded}, master_dtype, device);
  if (with_grads) grads_ = Tensor::zeros({padded}, master_dtype, device);
  if (compute_dtype != master_dtype) compute_ = Tensor::zeros({padded}, compute_dtype, device);
  for (Parameter& p : params_) {
    p.value = values_.slice(p.offset, p.shape);
    if (with_grads) p.grad = grads_.slice(p.offset, p.shape);
    p.compute = compute_.defined() ? compute_.slice(p.offset, p.shape) : p.value;
  }
}

const Parameter* ParameterSet::find(std::string_view name) const {
  for (const Parameter& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

const Parameter& ParameterSet::get(std::string_view name) const {
  const Parameter* p = find(name);
  HONE_CHECK(p != nullptr, "the model has no parameter named '{}'", name);
  return *p;
}

Parameter& ParameterSet::get(std::string_view name) {
  return const_cast<Parameter&>(static_cast<const ParameterSet*>(this)->get(name));
}

void ParameterSet::zero_grad() {
  if (grads_.defined()) grads_.zero_();
}

void ParameterSet::sync_compute() {
  if (compute_.defined()) ops::cast(values_, compute_);
}

}  // namespace hone
