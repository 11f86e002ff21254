# write_test_corpus(<path>): 40 short records in the fortune format, shared by the char_lstm runs
# under mpirun (example_run.cmake, pipeline_run.cmake).
function(write_test_corpus path)
  set(text "")
  foreach(i RANGE 1 40)
    math(EXPR words "${i} % 7 + 1")
    set(record "record ${i}:")
    foreach(w RANGE 1 ${words})
      string(APPEND record " the quick brown fox ${w}")
    endforeach()
    string(APPEND text "${record}\n%\n")
  endforeach()
  file(WRITE "${path}" "${text}")
endfunction()
