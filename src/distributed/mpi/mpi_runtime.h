// MPI for the process groups: initialisation (once, thread level SERIALIZED), finalisation at exit,
// the one lock every MPI call is made under, and tapegrad dtypes and reduce ops as MPI's.
#pragma once

#include <mpi.h>

#include <mutex>

#include "tapegrad/core/dtype.h"
#include "tapegrad/distributed/process_group.h"

namespace tapegrad::distributed::detail {

// Initialises MPI unless the program did; then MPI_Finalize runs at exit (after the default
// group is destroyed) if no group is left alive. Throws when MPI's thread level is too low.
void ensure_mpi_initialized();
// Every MPI call is made under this lock: with MPI_THREAD_SERIALIZED, calls from several threads
// (one worker per group, the caller's bootstrap) must never overlap.
std::mutex& mpi_mutex();
// Live groups, so the exit handler does not finalise under one that is still running.
void group_created();
void group_destroyed();

MPI_Datatype mpi_datatype(DType dtype);
// f16/bf16 reductions use our own MPI ops (through float); a bool sum is a logical or.
MPI_Op mpi_op(ReduceOp op, DType dtype);
// Throws a tapegrad::Error naming `what` when an MPI call failed.
void check_mpi(int rc, const char* what);

}  // namespace tapegrad::distributed::detail
