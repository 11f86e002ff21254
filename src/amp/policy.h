// The autocast policy as data: amp/policy.def lists every op that autocast changes and its
// category; the ops ask autocast_inputs() what to do, so no op keeps its own piece of the policy.
#pragma once

#include <initializer_list>
#include <optional>
#include <vector>

#include "tapegrad/core/dtype.h"
#include "tapegrad/core/tensor.h"

namespace tapegrad::amp {

// What autocast does to an op (the categories of policy.def).
enum class AutocastCategory { LowerPrecision, Float32 };

// The ops of policy.def, in its order.
enum class AutocastOp {
#define TG_AUTOCAST_OP(op, category) op,
#include "amp/policy.def"
#undef TG_AUTOCAST_OP
};

struct AutocastPolicyRow {
  const char* op;
  AutocastCategory category;
};

// Every line of policy.def, in its order (kAutocastPolicy[int(op)] is op's).
inline constexpr AutocastPolicyRow kAutocastPolicy[] = {
#define TG_AUTOCAST_OP(op, category) {#op, AutocastCategory::category},
#include "amp/policy.def"
#undef TG_AUTOCAST_OP
};

constexpr AutocastCategory autocast_category(AutocastOp op) {
  return kAutocastPolicy[static_cast<int>(op)].category;
}
constexpr const char* autocast_op_name(AutocastOp op) {
  return kAutocastPolicy[static_cast<int>(op)].op;
}
// "lower precision", "float32": as docs/amp.md's table names them.
const char* autocast_category_name(AutocastCategory category);

// What autocast makes of one call of `op`, by op's category in policy.def. `inputs` are the op's
// floating inputs (undefined ones are skipped).
struct AutocastInputs {
  // LowerPrecision: the type the op runs its products in and returns: the autocast type when
  // autocast is on for the first input's device and every input is float32 or that type (PyTorch
  // casts them all to it); otherwise their one dtype, and a mix of dtypes is an error naming the op.
  // Float32: the first input's dtype (unused).
  DType products = kFloat32;
  // Float32: when autocast is on for their device and any input is float16 or bfloat16, all of
  // them converted to float32 (recorded by autograd; others as they are), for the op to call itself
  // again with: `if (auto f = autocast_inputs(AutocastOp::softmax, {&x}).float32) return
  // softmax((*f)[0]);`. Empty otherwise, and always for LowerPrecision.
  std::optional<std::vector<Tensor>> float32;
};
AutocastInputs autocast_inputs(AutocastOp op, std::initializer_list<const Tensor*> inputs);

}  // namespace tapegrad::amp
