#include "hone/optim/adamw.hpp"

#include <cmath>

namespace hone {

AdamW::AdamW(ParameterSet& params, AdamWConfig config)
    : params_(params),
      config_(config),
      m_(Tensor::zeros(params.values().shape(), params.values().dtype(), params.values().device())),
      v_(Tensor::zeros(params.values().shape(), params.values().dtype(), params.values().device())) {
  HONE_CHECK(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1,
             "optimizer.betas must be in [0, 1), got ({}, {})", config.beta1, config.beta2);
  HONE_CHECK(config.eps > 0, "optimizer.eps must be positive, got {}", config.eps);
  HONE_CHECK(config.weight_decay >= 0, "optimizer.weight_decay must not be negative, got {}", config.weight_decay);
}

void AdamW::step(double lr) {
  ++step_;
  for (const ParameterSet::Group& g : params_.groups()) {
    ops::AdamWHyper hyper{.lr = lr,
                          .beta1 = config_.beta1,
                          .beta2 = config_.beta2,
                          .eps = config_.eps,
                          .weight_decay = g.decay ? config_.weight_decay : 0.0,
                          .step = step_};
    const Shape span{g.count};
    const Tensor compute = params_.compute().defined() ? params_.compute().slice(g.offset, span) : Tensor();
    ops::adamw_update(params_.values().slice(g.offset, span), params_.grads().slice(g.offset, span),
                      m_.slice(g.offset, span), v_.slice(g.offset, span), hyper, compute);
  }
}

double clip_grad_norm(ParameterSet& params, double max_norm) {
  const double norm = std::sqrt(ops::sum_squares(params.grads()));
  if (max_norm > 0) {
    const double coefficient = max_norm / (norm + 1e-6);
    if (coefficient < 1.0) ops::scale_(params.grads(), coefficient);
  }
  return norm;
}

}  // namespace hone
