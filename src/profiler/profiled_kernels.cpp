// The profiled kernel tables: one per device kind, generated from backend/kernel_slots.def, whose
// every function slot records an event around a call to the registered kernel. The profiler
// installs them as the kernel table's decorator while a session runs (backend::set_kernel_decorator,
// from begin_session to end_session in recorder.cpp), so neither the ops nor the table carry
// profiling code.
//
// Event names: the elementwise, compare and reduce slots are named by their op ("relu", "add",
// "sum"); every other slot by its slot name ("gemm", "copy", "cross_entropy").
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "backend/kernel_table.h"
#include "profiler/record.h"

namespace tapegrad::backend {

namespace {

using profiler::ProfilerEvent;

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Mean:
      return "mean";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
  }
  return "reduce";
}

// The event name: the op for enum-dispatched slots ("relu", and "relu_backward" for the
// unary_backward slot), else the slot's own name.
const char* op_name(UnaryOp op) {
  return unary_op_name(op);
}
const char* op_name(BinaryOp op) {
  return binary_op_name(op);
}
const char* op_name(CompareOp op) {
  return compare_op_name(op);
}
const char* op_name(ReduceOp op) {
  return reduce_op_name(op);
}

template <typename First, typename... Rest>
std::string event_name(const char* slot, const First& first, const Rest&...) {
  if constexpr (std::is_same_v<First, UnaryOp> || std::is_same_v<First, BinaryOp> || std::is_same_v<First, CompareOp> ||
                std::is_same_v<First, ReduceOp>) {
    const std::string_view s(slot);
    const bool backward = s.size() > 9 && s.substr(s.size() - 9) == "_backward";
    return backward ? std::string(op_name(first)) + "_backward" : std::string(op_name(first));
  } else {
    return slot;
  }
}
[[maybe_unused]] std::string event_name(const char* slot) {
  return slot;
}  // a slot without arguments

// Tensor arguments give the event its shapes, dtypes and device; others are not recorded.
template <typename T>
void describe(ProfilerEvent&, bool&, const T&) {}
void describe(ProfilerEvent& e, bool& have_device, const Tensor& t) {
  if (!t.defined()) return;
  if (profiler::detail::session_options().profile_memory && t.storage())
    profiler::detail::claim_allocation(e.id, t.storage()->data());
  if (!have_device) {
    e.device = t.device();
    have_device = true;
  }
  if (profiler::detail::session_options().record_shapes) {
    e.shapes.push_back(t.sizes());
    e.dtypes.push_back(t.dtype());
  }
}
void describe(ProfilerEvent& e, bool& have_device, const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) describe(e, have_device, t);
}

// Slot names and positions, in kernel_slots.def's order.
constexpr const char* kSlotNames[] = {
#define TG_KERNEL_SLOT(name, filled_by, ...) #name,
#include "backend/kernel_slots.def"
#undef TG_KERNEL_SLOT
};
enum SlotIndex {
#define TG_KERNEL_SLOT(name, filled_by, ...) kSlot_##name,
#include "backend/kernel_slots.def"
#undef TG_KERNEL_SLOT
};

template <typename Sig>
struct Profiled;

template <typename... Args>
struct Profiled<void(Args...)> {
  template <int Kind, int Index, void (*KernelTable::*Slot)(Args...)>
  static void call(Args... args) {
    constexpr DeviceKind kind = static_cast<DeviceKind>(Kind);
    auto kernel = registered_kernels(kind).*Slot;
    profiler::detail::EventScope scope(event_name(kSlotNames[Index], args...), profiler::EventKind::Kernel);
    ProfilerEvent* e = scope.data();
    if (e == nullptr) return kernel(args...);
    bool have_device = false;
    (describe(*e, have_device, args), ...);
    if (!have_device) e->device = kind == DeviceKind::CPU ? kCPU : Device(kind, 0);
    if (kind != DeviceKind::CUDA || !profiler::detail::session_options().cuda_timing) return kernel(args...);
    // Note [cuda timing] in recorder.cpp: two events on the launching stream, read at stop().
    const int device = e->device.index();
    const cuda::Stream stream = cuda::current_stream(device);
    e->cuda_stream = static_cast<int64_t>(reinterpret_cast<intptr_t>(stream.handle()));
    cuda::Event start(true), end(true);
    start.record(stream);
    kernel(args...);
    end.record(stream);
    profiler::detail::add_cuda_timing(scope.token(), device, start, end);
  }
};

// Points `table`'s slot `Member` at its recording wrapper, if it is a filled function slot; data
// slots (the allocator, cuDNN's kernels) and empty slots ("no cuda kernel for ...") stay as they are.
template <int Kind, int Index, auto Member>
void wrap_slot(KernelTable& table) {
  using Pointer = std::remove_reference_t<decltype(table.*Member)>;
  using Target = std::remove_pointer_t<Pointer>;
  if constexpr (std::is_function_v<Target>) {
    if (table.*Member != nullptr) table.*Member = &Profiled<Target>::template call<Kind, Index, Member>;
  }
}

template <int Kind>
KernelTable make_profiled_table() {
  KernelTable table = registered_kernels(static_cast<DeviceKind>(Kind));
#define TG_KERNEL_SLOT(name, filled_by, ...) wrap_slot<Kind, kSlot_##name, &KernelTable::name>(table);
#include "backend/kernel_slots.def"
#undef TG_KERNEL_SLOT
  return table;
}

template <int... Kinds>
void fill_profiled(KernelTable* tables, std::integer_sequence<int, Kinds...>) {
  ((tables[Kinds] = make_profiled_table<Kinds>()), ...);
}

const KernelTable* profiled_tables() {
  static KernelTable tables[kNumDeviceKinds];  // never changed once made: a late dispatch may still read them
  static std::once_flag made;
  std::call_once(made, [] { fill_profiled(tables, std::make_integer_sequence<int, kNumDeviceKinds>()); });
  return tables;
}

}  // namespace
}  // namespace tapegrad::backend

namespace tapegrad::profiler::detail {

void prepare_profiled_kernels() {
  backend::profiled_tables();
}

void install_profiled_kernels(bool on) {
  backend::set_kernel_decorator(on ? backend::profiled_tables() : nullptr);
}

}  // namespace tapegrad::profiler::detail
