// The 16-bit layer over the CPU's float32-only kernels, generated from backend/kernel_slots.def:
// every slot flagged there with TG_WIDEN_16BIT(slot, outputs...) takes float16 and bfloat16
// tensors through float32 copies. Each 16-bit argument is widened into a float32 copy, the float32
// kernel runs, and each 16-bit output (the flag's argument positions) is rounded back once, as
// PyTorch's CPU kernels accumulate 16-bit inputs in float. These kernels read whole rows or reduce
// across them, so unlike the pointwise loops (Note [16-bit operands] in loops/strided_loop.h) they
// take the copies whole. Under autocast these ops run in float32 anyway; this is for 16-bit
// tensors used directly. A family that gains a float32-only kernel flags its slot in the .def;
// nothing here changes. One hand-written exception: sums over rows (Note [16-bit column sums]).
#include <algorithm>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "backend/kernel_tensors.h"
#include "cpu/half/convert_16bit.h"
#include "cpu/kernels/shared_kernels.h"
#include "cpu/loops/parallel.h"
#include "cpu/loops/vec_math.h"
#include "cpu/register.h"

namespace tapegrad::cpu {

namespace {

bool is_16bit(const Tensor& t) {
  return t.defined() && (t.dtype() == kBFloat16 || t.dtype() == kFloat16);
}

enum class Role { kIn, kOut };

// A kernel argument as the float32 kernel gets it: any argument but a tensor as it is.
template <class T>
class StandIn {
 public:
  StandIn(const T& value, Role, const char*) : value_(value) {}
  const T& get() const { return value_; }
  void write_back() const {}

 private:
  const T& value_;
};

// A 16-bit tensor's float32 stand-in; any other tensor is used as it is. An input is widened when
// made; an output is rounded back into the argument by write_back().
template <>
class StandIn<Tensor> {
 public:
  StandIn(const Tensor& t, Role role, const char* op) : original_(t), role_(role) {
    if (!is_16bit(t)) {
      stand_in_ = t;
      return;
    }
    stand_in_ = backend::allocate_tensor(t.sizes(), kFloat32, t.device(), op);
    if (role == Role::kIn) copy(t, stand_in_);
  }
  const Tensor& get() const { return stand_in_; }
  void write_back() const {
    if (role_ == Role::kOut && stand_in_.defined() && stand_in_.impl() != original_.impl()) copy(stand_in_, original_);
  }

 private:
  Tensor original_, stand_in_;
  Role role_;
};

// The float32 kernels as the families registered them, before this layer wrapped them.
backend::KernelTable& float32_kernels() {
  static backend::KernelTable table;
  return table;
}

// One flagged slot: where it is, its name (allocations are named after it) and its outputs.
#define TG_KERNEL_SLOT(name, filled_by, ...)
#define TG_WIDEN_16BIT(name, ...)                              \
  struct Widen_##name {                                        \
    static constexpr auto kSlot = &backend::KernelTable::name; \
    static constexpr const char* kName = #name;                \
    static constexpr int kOutputs[] = {__VA_ARGS__};           \
  };
#include "backend/kernel_slots.def"
#undef TG_KERNEL_SLOT

template <class Slot, class Kernel = std::remove_pointer_t<
                          std::remove_reference_t<decltype(std::declval<backend::KernelTable&>().*Slot::kSlot)>>>
struct Widened;

// The wrapper a flagged slot gets: stand-ins made in argument order (inputs widened), the float32
// kernel, then the outputs rounded back in argument order.
template <class Slot, class... Args>
struct Widened<Slot, void(Args...)> {
  static constexpr Role role(size_t i) {
    for (int out : Slot::kOutputs)
      if (static_cast<size_t>(out) == i) return Role::kOut;
    return Role::kIn;
  }
  template <size_t... I>
  static void run(std::index_sequence<I...>, Args... args) {
    const std::tuple<StandIn<std::decay_t<Args>>...> stand_ins{
        StandIn<std::decay_t<Args>>(args, role(I), Slot::kName)...};  // braces: made left to right
    (float32_kernels().*Slot::kSlot)(std::get<I>(stand_ins).get()...);
    (std::get<I>(stand_ins).write_back(), ...);
  }
  static void call(Args... args) { run(std::index_sequence_for<Args...>{}, args...); }
};

template <class Slot>
void widen(backend::KernelTable& t) {
  t.*Slot::kSlot = &Widened<Slot>::call;
}

// acc += row, widened to double: its own function so that it runs on the CPU's widest vectors
// (the rest of this file is baseline code), which made the column sums below 2x faster.
TG_VECTOR_CLONES void add_into_doubles(const float* row, double* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(row[i]);
}

// Note [16-bit column sums]: a sum or mean over the rows of a 16-bit [outer, reduced, inner] (a
// bias gradient under autocast: column_sum in ops/op_helpers.cpp) widens a strip of each row as it
// reads it and adds it into double sums, one pass over the 16-bit data instead of a whole float32
// copy first. The sums are float32 reduce's (each column in double, rows in order) and round the
// same way, so the result has the same bits. mlp_seed:1024's bf16 bias gradient (1024 x 512):
// 226 us as a widened copy and a matrix-vector product in the step, 79 us this way.
void sum_rows_16bit(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduced, int64_t inner) {
  constexpr int64_t kStrip = 256;
  const int64_t strips = (inner + kStrip - 1) / kStrip;
  const double scale = op == ReduceOp::Mean ? 1.0 / static_cast<double>(reduced) : 1.0;
  const char* in = static_cast<const char*>(x.data_ptr());
  char* result = static_cast<char*>(out.data_ptr());
  const bool wide_out = out.dtype() == kFloat32;
  parallel_for(0, outer * strips, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(reduced * kStrip, 1)),
               [&](int64_t begin, int64_t end) {
                 alignas(64) float row[kStrip];
                 double acc[kStrip];
                 for (int64_t job = begin; job < end; ++job) {
                   const int64_t o = job / strips, i0 = (job % strips) * kStrip, width = std::min(kStrip, inner - i0);
                   std::fill_n(acc, width, 0.0);
                   for (int64_t r = 0; r < reduced; ++r) {
                     widen_16bit(x.dtype(), in + ((o * reduced + r) * inner + i0) * 2, 2, row, width);
                     add_into_doubles(row, acc, width);
                   }
                   for (int64_t i = 0; i < width; ++i) row[i] = static_cast<float>(acc[i] * scale);
                   if (wide_out) {
                     std::copy_n(row, width, reinterpret_cast<float*>(result) + o * inner + i0);
                   } else {
                     narrow_16bit(out.dtype(), row, result + (o * inner + i0) * 2, 2, width);
                   }
                 }
               });
}

// The exception to the generic layer: sums and means over rows of 16-bit tensors take the fast
// path above; everything else goes through the widened float32 kernel.
void reduce_16bit(ReduceOp op, const Tensor& x, const Tensor& out, int64_t outer, int64_t reduced, int64_t inner) {
  const bool sum = op == ReduceOp::Sum || op == ReduceOp::Mean;
  if (sum && is_16bit(x) && inner > 1 && reduced > 0 && (out.dtype() == kFloat32 || out.dtype() == x.dtype())) {
    sum_rows_16bit(op, x, out, outer, reduced, inner);  // Note [16-bit column sums]
    return;
  }
  Widened<Widen_reduce>::call(op, x, out, outer, reduced, inner);
}

}  // namespace

void register_16bit_widening(backend::KernelTable& t) {
  float32_kernels() = t;
#define TG_KERNEL_SLOT(name, filled_by, ...)
#define TG_WIDEN_16BIT(name, ...) widen<Widen_##name>(t);
#include "backend/kernel_slots.def"
#undef TG_KERNEL_SLOT
  t.reduce = reduce_16bit;
}

}  // namespace tapegrad::cpu
