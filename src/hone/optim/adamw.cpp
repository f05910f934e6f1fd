#include "hone/optim/adamw.hpp"

#include <algorithm>
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

void AdamW::step(double lr, double grad_scale) {
  ++step_;
  for (const ParameterSet::Group& g : params_.groups()) {
    ops::AdamWHyper hyper{.lr = lr,
                          .beta1 = config_.beta1,
                          .beta2 = config_.beta2,
                          .eps = config_.eps,
                          .weight_decay = g.decay ? config_.weight_decay : 0.0,
                          .step = step_,
                          .grad_scale = grad_scale};
    const Shape span{g.count};
    const Tensor compute = params_.compute().defined() ? params_.compute().slice(g.offset, span) : Tensor();
    ops::adamw_update(params_.values().slice(g.offset, span), params_.grads().slice(g.offset, span),
                      m_.slice(g.offset, span), v_.slice(g.offset, span), hyper, compute);
  }
}

double grad_norm(const ParameterSet& params) { return std::sqrt(ops::sum_squares(params.grads())); }

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

}  // namespace hone
