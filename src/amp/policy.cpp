// The autocast policy's decisions (amp/policy.h), by the categories of amp/policy.def.
#include "amp/policy.h"

#include "tapegrad/amp/autocast.h"
#include "tapegrad/core/error.h"

namespace tapegrad::amp {

namespace {

DType lower_precision_products(const char* op, std::initializer_list<const Tensor*> operands) {
  const Tensor* first = nullptr;
  for (const Tensor* t : operands)
    if (first == nullptr && t->defined()) first = t;
  if (first != nullptr && is_autocast_enabled(first->device().kind())) {
    const DType low = autocast_dtype(first->device().kind());
    bool all = true;
    for (const Tensor* t : operands) all = all && (!t->defined() || t->dtype() == kFloat32 || t->dtype() == low);
    if (all) return low;
  }
  for (const Tensor* t : operands) {
    if (!t->defined()) continue;
    TG_CHECK(t->dtype() == first->dtype(), op, ": operands must have the same dtype, got ", first->dtype(), " and ",
             t->dtype());
  }
  return first != nullptr ? first->dtype() : kFloat32;
}

std::optional<std::vector<Tensor>> float32_inputs(std::initializer_list<const Tensor*> inputs) {
  auto is_16bit = [](const Tensor& t) { return t.defined() && (t.dtype() == kBFloat16 || t.dtype() == kFloat16); };
  bool any = false;
  for (const Tensor* t : inputs) any = any || (is_16bit(*t) && is_autocast_enabled(t->device().kind()));
  if (!any) return std::nullopt;
  std::vector<Tensor> out;
  for (const Tensor* t : inputs) out.push_back(is_16bit(*t) ? t->to(kFloat32) : *t);
  return out;
}

}  // namespace

const char* autocast_category_name(AutocastCategory category) {
  switch (category) {
    case AutocastCategory::LowerPrecision:
      return "lower precision";
    case AutocastCategory::Float32:
      return "float32";
  }
  return "?";
}

AutocastInputs autocast_inputs(AutocastOp op, std::initializer_list<const Tensor*> inputs) {
  AutocastInputs result;
  switch (autocast_category(op)) {
    case AutocastCategory::LowerPrecision:
      result.products = lower_precision_products(autocast_op_name(op), inputs);
      break;
    case AutocastCategory::Float32:
      for (const Tensor* t : inputs)
        if (t->defined()) {
          result.products = t->dtype();
          break;
        }
      result.float32 = float32_inputs(inputs);
      break;
  }
  return result;
}

}  // namespace tapegrad::amp
