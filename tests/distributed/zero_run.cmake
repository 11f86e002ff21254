# mlp_fashion --distributed --zero under mpirun -np 2 (run by ctest as cmake -P): Adam's state
# sharded across the ranks must train exactly as the plain DDP run does.
#   1. --zero without --distributed is refused, naming --distributed.
#   2. Two epochs with and without --zero print the same losses and accuracies; the --zero run
#      reports rank 0 holding less optimiser state than all ranks together.
#   3. Its checkpoint (the consolidated state, a plain Adam's) resumes epoch 3 with --zero and
#      without, and both print what resuming the plain run's checkpoint prints.
#   4. The same holds under --amp bf16.
#   5. The control: another seed prints other losses, so the comparisons can fail.
# Inputs (-D): MPIEXEC, NP_FLAG, MPI_FLAGS (a ;-list), EXAMPLE (mlp_fashion's path), WORK_DIR.
cmake_minimum_required(VERSION 3.16)

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(common --device cpu --threads 1 --limit 256 --batch-size 32 --hidden 32 --seed 5)

include(${CMAKE_CURRENT_LIST_DIR}/run_or_fail.cmake)

# Every "epoch N  train loss A  test accuracy B" of an output (the timing left out), as one string.
function(epoch_results output result)
  string(REGEX MATCHALL "epoch +[0-9]+  train loss [0-9.]+  test accuracy [0-9.]+" lines "${output}")
  if(NOT lines)
    message(FATAL_ERROR "no epoch lines in:\n${output}")
  endif()
  set(${result} "${lines}" PARENT_SCOPE)
endfunction()

execute_process(COMMAND ${EXAMPLE} ${common} --epochs 1 --zero RESULT_VARIABLE status OUTPUT_VARIABLE out
  ERROR_VARIABLE err TIMEOUT 60)
if(status EQUAL 0 OR NOT "${out}${err}" MATCHES "--zero .*needs --distributed")
  message(FATAL_ERROR "--zero without --distributed was not refused (${status}):\n${out}\n${err}")
endif()

set(mpi ${MPIEXEC} ${MPI_FLAGS} ${NP_FLAG} 2 ${EXAMPLE} ${common} --distributed)
run_or_fail("the plain 2-rank run" ${mpi} --epochs 2 --checkpoint ${WORK_DIR}/plain.safetensors)
epoch_results("${output}" plain)
run_or_fail("the --zero 2-rank run" ${mpi} --epochs 2 --zero --checkpoint ${WORK_DIR}/zero.safetensors)
epoch_results("${output}" zero)
if(NOT plain STREQUAL zero)
  message(FATAL_ERROR "--zero trained differently:\n  plain: ${plain}\n  zero:  ${zero}")
endif()
if(NOT output MATCHES "optimiser state: ([0-9]+) bytes on rank 0, ([0-9]+) on all 2 ranks")
  message(FATAL_ERROR "the --zero run did not report its optimiser state:\n${output}")
endif()
if(NOT CMAKE_MATCH_1 LESS CMAKE_MATCH_2)
  message(FATAL_ERROR "rank 0 holds ${CMAKE_MATCH_1} of ${CMAKE_MATCH_2} bytes: the state is not sharded")
endif()

run_or_fail("resuming the plain checkpoint" ${mpi} --epochs 3 --resume ${WORK_DIR}/plain.safetensors)
epoch_results("${output}" resumed_plain)
run_or_fail("resuming the --zero checkpoint with --zero" ${mpi} --epochs 3 --zero
  --resume ${WORK_DIR}/zero.safetensors)
epoch_results("${output}" resumed_zero)
run_or_fail("resuming the --zero checkpoint without it" ${mpi} --epochs 3 --resume ${WORK_DIR}/zero.safetensors)
epoch_results("${output}" resumed_zero_plain)
if(NOT resumed_zero STREQUAL resumed_plain OR NOT resumed_zero_plain STREQUAL resumed_plain)
  message(FATAL_ERROR "the resumed epoch 3 differs:\n  plain: ${resumed_plain}\n  zero: ${resumed_zero}\n"
    "  zero's checkpoint, plain Adam: ${resumed_zero_plain}")
endif()

# Under bf16 autocast too (the loss goes through the examples' mixed-precision step).
run_or_fail("the plain bf16 run" ${mpi} --epochs 1 --amp bf16)
epoch_results("${output}" plain_bf16)
run_or_fail("the --zero bf16 run" ${mpi} --epochs 1 --amp bf16 --zero)
epoch_results("${output}" zero_bf16)
if(NOT plain_bf16 STREQUAL zero_bf16)
  message(FATAL_ERROR "--zero --amp bf16 trained differently:\n  plain: ${plain_bf16}\n  zero:  ${zero_bf16}")
endif()

run_or_fail("the control run (another seed)" ${mpi} --epochs 2 --zero --seed 6)
epoch_results("${output}" other_seed)
if(other_seed STREQUAL zero)
  message(FATAL_ERROR "seeds 5 and 6 printed the same epochs: the comparisons are vacuous")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
