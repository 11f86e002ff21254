// The messages of deferred device checks, and the sync-checks switch (tapegrad/cuda/checks.h).
// No CUDA dependency: every build has them.
#include "backend/device_checks.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "tapegrad/core/error.h"
#include "tapegrad/cuda/checks.h"

namespace tapegrad {

namespace {

// -1: not decided yet (the environment is read at the first call).
std::atomic<int> g_sync_checks{-1};

bool env_sync_checks() {
  const char* value = std::getenv("TAPEGRAD_CUDA_SYNC_CHECKS");
  return value != nullptr && std::strcmp(value, "") != 0 && std::strcmp(value, "0") != 0;
}

const char* check_op(backend::DeviceCheck check) {
  using backend::DeviceCheck;
  switch (check) {
    case DeviceCheck::CrossEntropyTarget:
      return "cross_entropy";
    case DeviceCheck::NllLossTarget:
      return "nll_loss";
    case DeviceCheck::IndexSelect:
      return "index_select";
    case DeviceCheck::IndexAdd:
      return "index_add";
    case DeviceCheck::Gather:
      return "gather";
    case DeviceCheck::ScatterAdd:
      return "scatter_add";
    case DeviceCheck::Embedding:
      return "embedding";
    case DeviceCheck::LstmLength:
      return "lstm";
    case DeviceCheck::None:
      break;
  }
  return "a cuda kernel";
}

}  // namespace

namespace cuda {

bool sync_checks() {
  int state = g_sync_checks.load(std::memory_order_relaxed);
  if (state < 0) {
    int decided = env_sync_checks() ? 1 : 0;
    g_sync_checks.compare_exchange_strong(state, decided, std::memory_order_relaxed);
    state = g_sync_checks.load(std::memory_order_relaxed);
  }
  return state == 1;
}

void set_sync_checks(bool on) {
  g_sync_checks.store(on ? 1 : 0, std::memory_order_relaxed);
}

}  // namespace cuda

namespace backend {

bool checks_on_host(bool is_cuda) {
  return !is_cuda || cuda::sync_checks();
}

std::string device_check_message(const DeviceErrorRecord& r) {
  const auto check = static_cast<DeviceCheck>(r.check);
  const char* op = check_op(check);
  switch (check) {
    case DeviceCheck::CrossEntropyTarget:
    case DeviceCheck::NllLossTarget:
      return detail::str_cat(op, ": target ", r.value, " at position ", r.position, " is out of range for ", r.limit,
                             " classes (expected 0..", r.limit - 1, " or ignore_index ", r.ignore_index,
                             ") (checked on the device, raised at the next synchronisation)");
    case DeviceCheck::LstmLength:
      return detail::str_cat(op, ": sequence length ", r.value, " is outside [0, ", r.limit - 1,
                             "] (checked on the device, raised at the next synchronisation)");
    case DeviceCheck::IndexSelect:
    case DeviceCheck::IndexAdd:
    case DeviceCheck::Gather:
    case DeviceCheck::ScatterAdd:
    case DeviceCheck::Embedding:
      return detail::str_cat(op, ": index ", r.value, " at position ", r.position,
                             " is out of range for a dim of size ", r.limit,
                             " (checked on the device, raised at the next synchronisation)");
    case DeviceCheck::None:
      break;
  }
  return detail::str_cat("a cuda kernel reported an unknown check ", r.check);
}

}  // namespace backend

}  // namespace tapegrad
