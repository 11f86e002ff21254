// MPI initialisation, finalisation and type mapping.
#include "distributed/mpi/mpi_runtime.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "tapegrad/core/half.h"

namespace tapegrad::distributed::detail {

using ::tapegrad::detail::str_cat;
using ::tapegrad::detail::throw_error;

namespace {

std::atomic<int> g_live_groups{0};

void finalize_at_exit() {
  destroy_process_group();
  if (g_live_groups.load() != 0) return;  // a group outlived main(): finalising under it would hang
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Element-wise reductions of 16-bit floats, computed in float and rounded back.
template <class Half16, int Kind>
void reduce_16(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    Half16 x, y;
    x.bits = a[i];
    y.bits = b[i];
    float fx = float(x), fy = float(y);
    float r = Kind == 0 ? fx + fy : Kind == 1 ? std::max(fx, fy) : std::min(fx, fy);
    b[i] = Half16(r).bits;
  }
}

struct HalfOps {
  MPI_Op ops[2][3];  // [f16, bf16][sum, max, min]
  HalfOps() {
    MPI_User_function* fns[2][3] = {{reduce_16<Half, 0>, reduce_16<Half, 1>, reduce_16<Half, 2>},
                                    {reduce_16<BFloat16, 0>, reduce_16<BFloat16, 1>, reduce_16<BFloat16, 2>}};
    for (int t = 0; t < 2; ++t)
      for (int k = 0; k < 3; ++k) check_mpi(MPI_Op_create(fns[t][k], 1, &ops[t][k]), "MPI_Op_create");
  }
};

}  // namespace

std::mutex& mpi_mutex() {
  static std::mutex m;
  return m;
}

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw_error(str_cat("ProcessGroup: ", what, " failed: ", std::string(text, size_t(length))));
}

void ensure_mpi_initialized() {
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  TG_CHECK(!finalized, "ProcessGroup: MPI has already been finalised in this process");
  int provided = 0;
  if (!initialized) {
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    // Errors come back as return codes (turned into tapegrad::Error), never as an abort.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  TG_CHECK(provided >= MPI_THREAD_SERIALIZED, "ProcessGroup: MPI provides thread level ", provided,
           ", and tapegrad needs MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED,
           ") or higher: initialise MPI with MPI_Init_thread, or let tapegrad do it");
}

void group_created() {
  g_live_groups.fetch_add(1);
}
void group_destroyed() {
  g_live_groups.fetch_sub(1);
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Int32:
      return MPI_INT32_T;
    case DType::Int64:
      return MPI_INT64_T;
    case DType::Bool:
      return MPI_UINT8_T;
    case DType::Float16:
    case DType::BFloat16:
      return MPI_UINT16_T;
  }
  throw_error(str_cat("ProcessGroup: no MPI datatype for ", dtype_name(dtype)));
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  int k = op == ReduceOp::Max ? 1 : op == ReduceOp::Min ? 2 : 0;  // Avg is a sum, then a division
  if (dtype == DType::Float16 || dtype == DType::BFloat16) {
    static HalfOps half_ops;  // created under mpi_mutex (callers hold it), after MPI_Init
    return half_ops.ops[dtype == DType::Float16 ? 0 : 1][k];
  }
  if (dtype == DType::Bool) return k == 2 ? MPI_MIN : MPI_MAX;  // 0/1 bytes: max is or, min is and
  return k == 0 ? MPI_SUM : k == 1 ? MPI_MAX : MPI_MIN;
}

}  // namespace tapegrad::distributed::detail
