# An example program trained for one short epoch under mpirun -np 2 --distributed (run by ctest as
# cmake -P, so that it needs no shell or Python):
#   1. mpirun gives rank 1 another --checkpoint path than rank 0 (an MPMD launch). The run must
#      succeed, rank 0's checkpoint must exist and rank 1's must not: only rank 0 writes.
#   2. Both ranks --resume from rank 0's checkpoint for a second epoch; one process resumes it too
#      (a completed epoch: the next one, batched anew), but not a mid-epoch checkpoint of another count.
#   3. One process with the global batch (2 x the per-rank batch) must print the same first-epoch
#      losses: DDP over two ranks is the same training as one process on the whole batch (and one
#      process with the per-rank batch must not, or the comparison would prove nothing).
# Inputs (-D): MPIEXEC, NP_FLAG, MPI_FLAGS (a ;-list), EXAMPLE (char_lstm's path), WORK_DIR.
cmake_minimum_required(VERSION 3.16)

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/rank0" "${WORK_DIR}/rank1")

# The records (test_corpus.cmake); 20% of them held out for validation.
include(${CMAKE_CURRENT_LIST_DIR}/test_corpus.cmake)
write_test_corpus("${WORK_DIR}/corpus.txt")

set(common --device cpu --threads 1 --data "${WORK_DIR}/corpus.txt" --valid-fraction 0.2 --embedding 8 --hidden 16
  --layers 1 --bptt 16 --warmup 2 --seed 3)

include(${CMAKE_CURRENT_LIST_DIR}/run_or_fail.cmake)

# The first-epoch "train loss A  valid loss B" of an output, as one string.
function(epoch_losses output result)
  if(NOT output MATCHES "epoch  1  train loss ([0-9.]+)  valid loss ([0-9.]+)")
    message(FATAL_ERROR "no first-epoch losses in:\n${output}")
  endif()
  set(${result} "${CMAKE_MATCH_1} ${CMAKE_MATCH_2}" PARENT_SCOPE)
endfunction()

set(checkpoint0 "${WORK_DIR}/rank0/ck.safetensors")
set(checkpoint1 "${WORK_DIR}/rank1/ck.safetensors")
run_or_fail("the 2-rank run"
  ${MPIEXEC} ${MPI_FLAGS} ${NP_FLAG} 1 ${EXAMPLE} ${common} --epochs 1 --batch-size 4 --distributed --checkpoint ${checkpoint0}
  : ${NP_FLAG} 1 ${EXAMPLE} ${common} --epochs 1 --batch-size 4 --distributed --checkpoint ${checkpoint1})
if(NOT output MATCHES "on 2 processes")
  message(FATAL_ERROR "the 2-rank run did not run on 2 processes:\n${output}")
endif()
epoch_losses("${output}" distributed_losses)
if(NOT EXISTS "${checkpoint0}")
  message(FATAL_ERROR "rank 0 wrote no checkpoint:\n${output}")
endif()
file(GLOB rank1_files "${WORK_DIR}/rank1/*")
if(rank1_files)
  message(FATAL_ERROR "rank 1 wrote files, only rank 0 should: ${rank1_files}")
endif()
# Rank 0 prints; rank 1's stdout is silenced, so the epoch line appears once.
string(REGEX MATCHALL "epoch  1  train loss" epoch_lines "${output}")
list(LENGTH epoch_lines epoch_line_count)
if(NOT epoch_line_count EQUAL 1)
  message(FATAL_ERROR "expected one epoch line (rank 0's), got ${epoch_line_count}:\n${output}")
endif()

run_or_fail("the 2-rank resume"
  ${MPIEXEC} ${MPI_FLAGS} ${NP_FLAG} 2 ${EXAMPLE} ${common} --epochs 2 --batch-size 4 --distributed --resume ${checkpoint0})
if(NOT output MATCHES "resumed from .* at epoch 2" OR NOT output MATCHES "epoch  2  train loss")
  message(FATAL_ERROR "the resumed run did not train epoch 2:\n${output}")
endif()

# 2b. Rank 0's checkpoint of a completed epoch (4 global batches of 8) resumed by one process of
#     batch 4 (8 batches an epoch) goes on with epoch 2; it used to re-enter epoch 1 at batch 5.
run_or_fail("the 1-process resume of the 2-rank checkpoint" ${EXAMPLE} ${common} --epochs 2 --batch-size 4
  --resume ${checkpoint0})
if(NOT output MATCHES "resumed from .* at epoch 2, batch 1" OR NOT output MATCHES "the run has 1 processes"
   OR output MATCHES "epoch  1  train loss")
  message(FATAL_ERROR "the 1-process resume did not go on with epoch 2:\n${output}")
endif()
#     A mid-epoch checkpoint (--max-minutes) of one process is refused by two, naming both counts.
set(partial "${WORK_DIR}/rank0/partial.safetensors")
run_or_fail("the stopped 1-process run" ${EXAMPLE} ${common} --epochs 1 --batch-size 4 --max-minutes 1e-6
  --checkpoint ${partial})
execute_process(COMMAND ${MPIEXEC} ${MPI_FLAGS} ${NP_FLAG} 2 ${EXAMPLE} ${common} --epochs 1 --batch-size 4
  --distributed --resume ${partial} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(status EQUAL 0 OR NOT "${out}${err}" MATCHES "the run has 2 processes, but the checkpoint's had 1")
  message(FATAL_ERROR "a mid-epoch checkpoint of 1 process resumed on 2 was not refused (${status}):\n${out}\n${err}")
endif()

run_or_fail("the 1-process run" ${EXAMPLE} ${common} --epochs 1 --batch-size 8)
epoch_losses("${output}" single_losses)
if(NOT distributed_losses STREQUAL single_losses)
  message(FATAL_ERROR "2 ranks of batch 4 printed losses ${distributed_losses}, one process of batch 8 ${single_losses}")
endif()
# Negative control: the comparison above can tell batches apart.
run_or_fail("the 1-process run of batch 4" ${EXAMPLE} ${common} --epochs 1 --batch-size 4)
epoch_losses("${output}" small_batch_losses)
if(small_batch_losses STREQUAL single_losses)
  message(FATAL_ERROR "batch 4 and batch 8 printed the same losses ${single_losses}: the comparison is vacuous")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
