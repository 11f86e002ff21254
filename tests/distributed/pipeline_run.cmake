# char_lstm --pipeline-stages 2 under mpirun -np 2 (run by ctest as cmake -P): the model cut by
# LSTM layers across two processes must print one process's losses, epoch by epoch (the pipeline's
# gradients are exact and every stage starts from one process's weights); a run of another batch
# size must not (the negative control). Flags the pipelined loop does not support, and a stage
# count unlike the process count, are refused with a message naming them.
# Inputs (-D): MPIEXEC, NP_FLAG, MPI_FLAGS (a ;-list), EXAMPLE (char_lstm's path), WORK_DIR.
cmake_minimum_required(VERSION 3.16)

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
include(${CMAKE_CURRENT_LIST_DIR}/test_corpus.cmake)
write_test_corpus("${WORK_DIR}/corpus.txt")

set(common --device cpu --threads 1 --data "${WORK_DIR}/corpus.txt" --valid-fraction 0.2 --embedding 8 --hidden 16
  --layers 2 --bptt 16 --warmup 2 --seed 3 --epochs 2 --dropout 0)

include(${CMAKE_CURRENT_LIST_DIR}/run_or_fail.cmake)

# Every epoch's "train loss A  valid loss B" of an output, as one string.
function(all_losses output result)
  string(REGEX MATCHALL "epoch  [0-9]+  train loss [0-9.]+  valid loss [0-9.]+" lines "${output}")
  list(LENGTH lines count)
  if(NOT count EQUAL 2)
    message(FATAL_ERROR "expected two epoch lines, got ${count}:\n${output}")
  endif()
  set(${result} "${lines}" PARENT_SCOPE)
endfunction()

run_or_fail("the pipelined run" ${MPIEXEC} ${MPI_FLAGS} ${NP_FLAG} 2 ${EXAMPLE} ${common} --batch-size 8
  --pipeline-stages 2 --micro-batches 3)
if(NOT output MATCHES "pipelined over 2 stages")
  message(FATAL_ERROR "the run was not pipelined:\n${output}")
endif()
all_losses("${output}" pipelined)

run_or_fail("the 1-process run" ${EXAMPLE} ${common} --batch-size 8)
all_losses("${output}" single)
if(NOT pipelined STREQUAL single)
  message(FATAL_ERROR "2 pipeline stages printed ${pipelined}, one process ${single}")
endif()
run_or_fail("the 1-process run of batch 4" ${EXAMPLE} ${common} --batch-size 4)
all_losses("${output}" other)
if(other STREQUAL single)
  message(FATAL_ERROR "batch 4 and batch 8 printed the same losses ${single}: the comparison is vacuous")
endif()

# Refusals, each naming its culprit.
function(expect_refusal what pattern)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
  if(status EQUAL 0 OR NOT "${out}${err}" MATCHES "${pattern}")
    message(FATAL_ERROR "${what} was not refused with '${pattern}' (${status}):\n${out}\n${err}")
  endif()
endfunction()
expect_refusal("3 stages on 2 processes" "--pipeline-stages 3 needs as many processes .*this job has 2"
  ${MPIEXEC} ${MPI_FLAGS} ${NP_FLAG} 2 ${EXAMPLE} ${common} --layers 3 --pipeline-stages 3)
expect_refusal("a checkpoint" "--pipeline-stages does not support --checkpoint"
  ${EXAMPLE} ${common} --pipeline-stages 2 --checkpoint "${WORK_DIR}/ck.safetensors")
expect_refusal("more stages than layers" "--pipeline-stages 3 needs at least as many --layers, got 2"
  ${EXAMPLE} ${common} --pipeline-stages 3)
expect_refusal("micro-batches alone" "--micro-batches only applies" ${EXAMPLE} ${common} --micro-batches 2)
file(REMOVE_RECURSE "${WORK_DIR}")
