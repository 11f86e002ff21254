// Finite-difference gradient checking in f64.
#include "tapegrad/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "tapegrad/autograd/grad_mode.h"
#include "tapegrad/ops/creation.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/reduction.h"

namespace tapegrad::autograd {

namespace {
double projected(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                 const Tensor& direction) {
  NoGradGuard no_grad;
  return sum(mul(fn(inputs), direction)).item();
}
}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    TG_CHECK(x.dtype() == kFloat64 && x.is_leaf() && x.is_contiguous() && x.device().is_cpu(), "gradcheck: input ", i,
             " requires grad, so it must be a contiguous f64 CPU leaf; got ", x.dtype(), " on ", x.device(),
             x.is_leaf() ? "" : " (not a leaf)");
  }
  GradcheckResult result;
  std::ostringstream report;
  Generator generator(options.seed);
  for (int direction_index = 0; direction_index < options.num_directions; ++direction_index) {
    Tensor output = fn(inputs);
    TG_CHECK(output.dtype() == kFloat64, "gradcheck: the function must return f64, got ", output.dtype());
    TG_CHECK(output.requires_grad(), "gradcheck: the output does not require grad");
    Tensor direction = randn(output.sizes(), kFloat64, &generator);
    for (const Tensor& x : inputs)
      if (x.defined() && x.requires_grad()) x.set_grad(Tensor());
    output.backward(direction);

    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& x = inputs[i];
      if (!x.defined() || !x.requires_grad()) continue;
      Tensor analytic = x.grad().defined() ? x.grad().contiguous() : zeros_like(x);
      const double* analytic_data = analytic.data<double>();
      double* data = static_cast<double*>(x.data_ptr());
      for (int64_t j = 0; j < x.numel(); ++j) {
        double saved = data[j];
        data[j] = saved + options.eps;
        double plus = projected(fn, inputs, direction);
        data[j] = saved - options.eps;
        double minus = projected(fn, inputs, direction);
        data[j] = saved;
        double numeric = (plus - minus) / (2 * options.eps);
        double error = std::fabs(analytic_data[j] - numeric);
        result.max_abs_error = std::max(result.max_abs_error, error);
        if (!(error <= options.atol + options.rtol * std::fabs(numeric))) {
          if (result.ok)
            report << "gradcheck: input " << i << " of shape " << shape_str(x.sizes()) << ", element " << j
                   << ": analytic " << analytic_data[j] << " vs numeric " << numeric << " (error " << error << ")\n";
          result.ok = false;
        }
      }
    }
  }
  for (const Tensor& x : inputs)
    if (x.defined() && x.requires_grad()) x.set_grad(Tensor());
  result.report = report.str();
  return result;
}

}  // namespace tapegrad::autograd
