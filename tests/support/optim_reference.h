// PyTorch's optimiser update rules in double, written from torch.optim's documentation, for one
// parameter over a sequence of gradients; and the optimisers built either per parameter or
// through the multi-tensor path. Shared by the optimiser tests and their CUDA parity tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tapegrad/tapegrad.h"

namespace tapegrad::testing {

// The gradient of step k (from 0).
using GradientAt = std::function<std::vector<double>(int k)>;

struct SgdRule {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

inline std::vector<double> sgd_reference(std::vector<double> p, const SgdRule& o, int steps,
                                         const GradientAt& grad_at) {
  std::vector<double> buf(p.size());
  for (int k = 0; k < steps; ++k) {
    std::vector<double> g = grad_at(k);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + o.weight_decay * p[i];
      if (o.momentum != 0) {
        buf[i] = k == 0 ? d : o.momentum * buf[i] + (1 - o.dampening) * d;
        d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * d;
    }
  }
  return p;
}

// Adam (decoupled = false) and AdamW (decoupled = true), with or without amsgrad.
struct AdamRule {
  double lr, b1, b2, eps, weight_decay;
  bool decoupled, amsgrad;
};

inline std::vector<double> adam_reference(std::vector<double> p, const AdamRule& o, int steps,
                                          const GradientAt& grad_at) {
  std::vector<double> m(p.size()), v(p.size()), vmax(p.size());
  for (int k = 1; k <= steps; ++k) {
    std::vector<double> g = grad_at(k - 1);
    for (size_t i = 0; i < p.size(); ++i) {
      if (o.decoupled)
        p[i] *= 1 - o.lr * o.weight_decay;
      else
        g[i] += o.weight_decay * p[i];
      m[i] = o.b1 * m[i] + (1 - o.b1) * g[i];
      v[i] = o.b2 * v[i] + (1 - o.b2) * g[i] * g[i];
      vmax[i] = std::max(vmax[i], v[i]);
      double m_hat = m[i] / (1 - std::pow(o.b1, k));
      double v_hat = (o.amsgrad ? vmax[i] : v[i]) / (1 - std::pow(o.b2, k));
      p[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
  return p;
}

// An optimiser over `params`, per parameter (foreach = false) or through the multi-tensor slots.
using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>, bool foreach)>;

inline MakeOptimizer sgd(optim::SGDOptions options) {
  return [options](std::vector<Tensor> params, bool foreach) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions(options).foreach (foreach));
  };
}

inline MakeOptimizer adam(optim::AdamOptions options, bool decoupled) {
  return [options, decoupled](std::vector<Tensor> params, bool foreach) -> std::unique_ptr<optim::Optimizer> {
    optim::AdamOptions o = optim::AdamOptions(options).foreach (foreach);
    if (decoupled) return std::make_unique<optim::AdamW>(std::move(params), o);
    return std::make_unique<optim::Adam>(std::move(params), o);
  };
}

}  // namespace tapegrad::testing
