# run_or_fail(<what> <command...>): runs the command (90 s at most) and fails the script, printing
# its output, unless it exits 0; sets `output` in the caller to its stdout. Shared by the example
# runs under mpirun (example_run.cmake, zero_run.cmake).
function(run_or_fail what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 90)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${what} failed (${status}):\n${out}\n${err}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()
